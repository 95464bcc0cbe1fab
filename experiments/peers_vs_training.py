"""Did the trained proposer's harnesses in the peers grid come from its own training? (issue 35, session 44)

    .venv/bin/python experiments/peers_vs_training.py benchmarks/peers/results_gpu/b16 benchmarks/peers/results_gpu/b64 \\
        --out experiments/results/qwen/peers_vs_training

The RL adapter's training is on record: its SFT rows (zoo harnesses written as revisions) and every candidate of
its GRPO epoch (``experiments/results/qwen/state/rollouts.jsonl.gz``: 640 contexts x 8, revisions of the minimal
seed). For each harness our systems returned in the peers grid (the seed left out), this finds the nearest valid
GRPO candidate (difflib ratio, as ``zoo.nearest`` measures a harness against the zoo) and the nearest zoo file. The
untrained systems never saw those candidates: their ratios are the control, what any revision of the same seed
shares with them by chance (imports, the solver call, the answer's extraction). It also counts the GRPO candidates
by kind (zoo near-copy, or what they do with the solver) in three bands of updates, to set against what the same
adapter proposes in the grid (``summary.md``, "What the proposals are").

Writes ``OUT/results.md`` and ``OUT/results.json``. CPU only; ~21 minutes on 2 cores (difflib; measured 2026-12-06).
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import statistics
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("hl-sequential", "hl-independent", "hl-sequential@trained", "hl-sequential~prefill",
           "hl-sequential~prefill@trained", "hl-sequential+mem")
BANDS = ((0, 19), (20, 49), (50, 79))  # GRPO updates
_TRAIN: list[str] = []


def grpo_candidates(rollouts: Path, seed_source: str) -> dict[str, list[str]]:
    """Band of GRPO updates (``BANDS``) -> its valid candidates as harness sources (revisions of ``seed_source``),
    in the log's order, repeats kept."""
    from harnesslearn.propose.edits import apply_proposal

    out: dict[str, list[str]] = {f"{a}-{b}": [] for a, b in BANDS}
    with gzip.open(rollouts, "rt") as f:
        for line in f:
            d = json.loads(line)
            band = next(f"{a}-{b}" for a, b in BANDS if a <= d["step"] <= b)
            for c in d["candidates"]:
                src = apply_proposal(seed_source, c["proposal"]).source if c.get("valid") else None
                if src is not None:
                    out[band].append(src)
    return out


def training_harnesses(rollouts: Path, seed_source: str) -> tuple[list[str], dict[str, Counter[str]]]:
    """The distinct valid GRPO candidates as harness sources, and their kinds per band of updates."""
    from harnesslearn.taxonomy import harness_kind

    bands = grpo_candidates(rollouts, seed_source)
    kinds = {band: Counter(harness_kind(src) for src in srcs) for band, srcs in bands.items()}
    return list(dict.fromkeys(src for srcs in bands.values() for src in srcs)), kinds


def _init(train: list[str]) -> None:
    global _TRAIN
    _TRAIN = train


def nearest_training(text: str) -> float:
    """The difflib ratio of ``text`` to its nearest training harness (exact: the candidates are taken in order of
    ``quick_ratio``, an upper bound of ``ratio``, and the search stops once no bound can beat the best)."""
    matchers = []
    for s in _TRAIN:
        sm = difflib.SequenceMatcher(None, text, s, autojunk=False)
        matchers.append((sm.quick_ratio(), sm))
    matchers.sort(key=lambda m: -m[0])
    best = 0.0
    for bound, sm in matchers:
        if bound <= best:
            break
        best = max(best, sm.ratio())
    return best


def main(argv: list[str] | None = None) -> int:
    from harnesslearn.zoo import NEAR_COPY, load_harness, nearest

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="peers run.py --out folders, one per budget")
    p.add_argument("--rollouts", type=Path, default=ROOT / "experiments/results/qwen/state/rollouts.jsonl.gz")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args(argv)
    seed = load_harness("minimal").source
    train, kinds = training_harnesses(a.rollouts, seed)
    print(f"{len(train)} distinct valid GRPO candidates", flush=True)
    rows: list[dict[str, Any]] = []
    for folder in a.folders:  # a landed folder (run.py --from-partial): its rows as the summary reads them
        data = json.loads((folder / "results.json").read_text())
        meta = data["meta"]
        returned = {(r["task"], r["seed"], r["system"]): data["harnesses"].get(f"{r['task']}|{r['seed']}|{r['system']}")
                    for r in data["runs"] if not r.get("error") and r.get("test_J") is not None}
        todo = [(key, text) for key, text in sorted(returned.items())
                if key[2] in SYSTEMS and text and text != seed and not key[0].startswith("musique")]
        with ProcessPoolExecutor(a.workers, initializer=_init, initargs=(train,)) as pool:
            ratios = list(pool.map(nearest_training, [t for _, t in todo], chunksize=1))
        for (key, text), ratio in zip(todo, ratios, strict=True):
            rows.append({"calls": int(meta["proposer_calls"]), "task": key[0], "seed": key[1], "system": key[2],
                         "nearest_training": round(ratio, 3), "nearest_zoo": round(nearest(text)[1], 3)})
        print(f"{folder}: {len(todo)} returned harnesses", flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps({"training_harnesses": len(train), "kinds": kinds, "rows": rows},
                                                   indent=1))
    lines = ["# The peers grid's returned harnesses against the RL adapter's own training "
             "(generated by experiments/peers_vs_training.py)", "",
             f"Training: {len(train)} distinct valid GRPO candidates (revisions of the minimal seed, "
             f"`{a.rollouts.relative_to(ROOT) if a.rollouts.is_relative_to(ROOT) else a.rollouts}`). Grid: "
             f"{', '.join(str(f) for f in a.folders)}; every returned harness of our systems that is not the seed, "
             "MuSiQue left out (its seed is another one). Ratio: difflib, as for the zoo. The untrained systems "
             "never saw these candidates: their ratios say what revisions of the same seed share by chance.", "",
             "| calls | system | returned (not the seed) | median ratio to the nearest training candidate |"
             f" at {NEAR_COPY} or more | median ratio to the nearest zoo file | zoo near-copies |",
             "|---|---|---|---|---|---|---|"]
    for calls in sorted({r["calls"] for r in rows}):
        for system in SYSTEMS:
            rs = [r for r in rows if r["calls"] == calls and r["system"] == system]
            if rs:
                tr, zo = [r["nearest_training"] for r in rs], [r["nearest_zoo"] for r in rs]
                lines.append(f"| {calls} | {system} | {len(rs)} | {statistics.median(tr):.2f} |"
                             f" {sum(x >= NEAR_COPY for x in tr)} | {statistics.median(zo):.2f} | {sum(x >= NEAR_COPY for x in zo)} |")
    lines += ["", "What the GRPO candidates were, by band of updates (valid ones; zoo near-copy, else what they do "
              "with the solver):", "", "| updates | valid | zoo_copy | solver_program | prompt_level | computes |",
              "|---|---|---|---|---|---|"]
    for band, c in kinds.items():
        n = sum(c.values())
        lines.append(f"| {band} | {n} | " + " | ".join(f"{c[k]} ({c[k] / max(1, n):.0%})" for k in
                                                      ("zoo_copy", "solver_program", "prompt_level", "computes")) + " |")
    (a.out / "results.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {a.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
