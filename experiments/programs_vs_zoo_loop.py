"""Where do the trained proposer's own programs in the peers grid come from? (issue 35, session 45)

    .venv/bin/python experiments/programs_vs_zoo_loop.py benchmarks/peers/results_gpu/b16 benchmarks/peers/results_gpu/b64 \\
        --out experiments/results/qwen/programs_vs_zoo_loop

Asked in words (``chat-function``), the RL adapter proposes harnesses that have the solver write a program for
``model.python`` (``solver_program``) and are not near-copies of a zoo file. Every prompt shows that idea (the runtime
API's "Have the solver write a program and run it" pattern); the zoo's ``interpreter_loop`` file, which the adapter
learned to write back in GRPO, is a longer version of it. Whole-file similarity cannot tell the two apart (the
adapter writes a ``solve()``, not a file). Lines can: this counts, in every valid proposal of that kind (the seed
and zoo near-copies left out), the lines that only the zoo's loop has, lines that are in no template of the prompt
and not in the runtime API (checked at start: the count would mean nothing otherwise). A proposer that was never
shown the loop (the untrained one, asked the same way) is the control. The same count over the adapter's GRPO
candidates says what it was trained on.

Writes ``OUT/results.md`` and ``OUT/results.json``. CPU only: 10 minutes on 2 cores (difflib: the zoo near-copies;
measured 2026-12-06).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from peers_vs_training import grpo_candidates  # experiments/: the GRPO log read once, for both scripts

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("hl-sequential", "hl-independent", "hl-sequential~prefill", "hl-sequential@trained",
           "hl-sequential~prefill@trained", "hl-sequential+mem", "hl-independent+mem")
# text of the zoo's interpreter_loop that no prompt of a plain system shows (``check_markers``)
MARKERS = (("system role", "You are an expert Python programmer"),
           ("prints ONLY the answer", "prints ONLY"),
           ("code-block regex", "(?:python|py)?"),
           ("number normaliser", "is_integer()"),
           ("ATTEMPTS constant", "ATTEMPTS"))


def check_markers() -> None:
    """Each marker is in the zoo's interpreter_loop and in nothing a plain system's prompt shows (every packaged
    template, the runtime API): else exit naming it."""
    from harnesslearn import zoo
    from harnesslearn.harness import runtime_api_doc
    from harnesslearn.propose.prompt import packaged_template, template_names

    loop = zoo.source("interpreter_loop")
    shown = "\n".join([runtime_api_doc(), *(packaged_template(n) for n in template_names())])
    for label, text in MARKERS:
        if text not in loop:
            raise SystemExit(f"marker {label!r} ({text!r}) is not in the zoo's interpreter_loop")
        if text in shown:
            raise SystemExit(f"marker {label!r} ({text!r}) is in the prompt: it says nothing about the source")


def markers_in(source: str) -> list[str]:
    return [label for label, text in MARKERS if text in source]


def count(sources: list[str]) -> dict[str, Any]:
    """The programs (``solver_program``, not zoo near-copies) among ``sources`` and their markers."""
    from harnesslearn.taxonomy import harness_kind

    progs = [s for s in sources if harness_kind(s) == "solver_program"]
    per = [markers_in(s) for s in progs]
    return {"valid": len(sources), "programs": len(progs), "with_any": sum(1 for m in per if m),
            "markers": dict(Counter(x for m in per for x in m))}


def grid_sources(folder: Path) -> dict[str, list[str]]:
    """system -> every valid, distinct harness its runs evaluated in ``folder`` (a landed run.py --out), the
    seed left out, MuSiQue left out (its seed is another one)."""
    data = json.loads((folder / "results.json").read_text())
    out: dict[str, list[str]] = {s: [] for s in SYSTEMS}
    for r in data["runs"]:
        if r.get("error") or r.get("test_J") is None or r["system"] not in out or r["task"].startswith("musique"):
            continue
        slug = "".join(ch if ch.isalnum() else "_" for ch in r["task"])[:60]  # benchmarks/peers/common.slug
        f = folder / "harnesses" / f"{slug}-s{r['seed']}-{r['system']}.json"
        if not f.exists():
            continue
        seed_id = r["score_best_points"][0][2]
        seen: set[str] = set()
        for h in json.loads(f.read_text())["harnesses"]:
            src = h.get("source")
            if h.get("id") == seed_id or h.get("invalid_reason") or not src or h.get("id") in seen:
                continue
            seen.add(h["id"])
            out[r["system"]].append(src)
    return out


def row(name: str, c: dict[str, Any]) -> str:
    cells = " | ".join(f"{c['markers'].get(label, 0)}" for label, _ in MARKERS)
    share = f"{c['with_any']} ({c['with_any'] / c['programs']:.0%})" if c["programs"] else "0"
    return f"| {name} | {c['valid']} | {c['programs']} | {share} | {cells} |"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="peers run.py --out folders, one per budget")
    p.add_argument("--rollouts", type=Path, default=ROOT / "experiments/results/qwen/state/rollouts.jsonl.gz")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    check_markers()
    grid: dict[str, dict[str, Any]] = {}
    for folder in a.folders:
        calls = json.loads((folder / "results.json").read_text())["meta"]["proposer_calls"]
        grid[str(calls)] = {s: count(srcs) for s, srcs in grid_sources(folder).items() if srcs}
        print(f"{folder}: counted", flush=True)
    from harnesslearn.zoo import NEAR_COPY, load_harness

    training = {band: count(srcs) for band, srcs in grpo_candidates(a.rollouts, load_harness("minimal").source).items()}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps({"markers": dict(MARKERS), "grid": grid, "training": training},
                                                   indent=1))
    head = ("| proposals of | valid | programs (not zoo copies) | with a marker of the zoo's loop | "
            + " | ".join(label for label, _ in MARKERS) + " |")
    sep = "|---" * (4 + len(MARKERS)) + "|"
    lines = ["# The trained proposer's programs against the zoo's interpreter loop "
             "(generated by experiments/programs_vs_zoo_loop.py)", "",
             "Markers: text of the zoo's `interpreter_loop` that is in no template of the prompt and not in the "
             "runtime API (checked): "
             + "; ".join(f"{label} (`{text}`)" for label, text in MARKERS) + ". Programs: valid proposals that "
             "have the solver write a program for `model.python` and are not near-copies of a zoo file (difflib "
             f"{NEAR_COPY}), the seed and MuSiQue left out. The plain systems are shown no zoo file; the `+mem` ones are "
             "shown zoo files from the memory.", ""]
    for calls, systems in grid.items():
        lines += [f"## The peers grid, {calls} proposer calls", "", head, sep]
        lines += [row(s, c) for s, c in systems.items()]
        lines.append("")
    lines += ["## The RL adapter's GRPO candidates (every valid one, by band of updates)", "", head, sep]
    lines += [row(f"updates {band}", c) for band, c in training.items()]
    (a.out / "results.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {a.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
