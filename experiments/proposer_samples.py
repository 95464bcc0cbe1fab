"""K samples of trained proposers on real proposer prompts, on the CPU: how many differ, how many are valid
revisions of the minimal seed, and how near each is to a zoo harness (the transfer table's near-copy test).

The prompt is a chat one with the assistant's SEARCH block started, as ``adapt`` sends it (default: the rg:gcd
prompt of ``benchmarks/data/gcd_proposer_prompt.json``, a held-out family); each proposer is
``local:qwen2.5-coder-1.5b-instruct?adapter=DIR`` (llama.cpp with the adapter as a GGUF LoRA) or, for ``base``, the
model alone. ``rl`` names the adapter shipped with the package, the chain's final one (update 80; the committed
state holds a pointer to it, which ``qwen12.py restore`` fills in).

    .venv/bin/python experiments/proposer_samples.py --arm sft=.keep/sft_adapter \
        --arm rl@80=rl --k 4 --temperature 0.8 --out FILE.json

With ``--families`` (``eval``: the transfer table's 21 unseen paper-eval families), each family's prompt is the one
the eval stage sends (``transfer/stages.py``): the minimal seed run by the CPU solver (``--solver``) on the
feedback split (n_feedback 4, seed 1234), rendered in the chat-prefill format with 3 traces; each arm then draws
K candidates with the eval's seeds (``rounds.candidate_seed``), temperature and token limit, through
``rounds.sample`` as ``adapt`` does. No candidate is scored (that is the GPU's work): the rows say what a proposer
writes on families it never saw: valid, distinct, and near-copies of a zoo file (difflib ratio >= 0.8). One row
per (arm, family) is appended to ``--rows`` as it finishes, so a cut run resumes; prompts are kept beside it
(``ROWS.prompts.json``) so every arm reads the same ones. ``--seed-harness zoo:NAME`` revises that zoo harness,
built for each family, instead of the minimal seed, as a GRPO context seeded with it would (``--families train``:
the 5 paper-train families). ``--compare`` judges the proposals of another run's eval rows (``eval_rows.jsonl``)
the same way, for the summary:

    .venv/bin/python experiments/proposer_samples.py --families eval \
        --arm rl@80=rl --arm base \
        --rows experiments/results/qwen/heldout_cpu/rows.jsonl --minutes 100 \
        --compare experiments/results/qwen/h200/eval_rows.jsonl --implied experiments/results/qwen/h200/eval_rows.jsonl \
        --out experiments/results/qwen/heldout_cpu/summary.json --plot experiments/results/qwen/heldout_cpu/copies.png
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from harnesslearn.zoo import NEAR_COPY, resolve_harness

ROOT = Path(__file__).resolve().parents[1]


async def samples(spec: str, messages: list[dict[str, str]], k: int, temperature: float, max_tokens: int,
                  seed0: int) -> list[dict[str, Any]]:
    from harnesslearn.models import GenerateRequest, load_model

    m = load_model(spec, cache=False)
    out = []
    try:
        for i in range(k):
            t = time.perf_counter()
            c = await m.generate(GenerateRequest(messages, max_tokens=max_tokens, temperature=temperature,
                                                 seed=seed0 + i))
            out.append({"text": c.text, "tokens": c.completion_tokens, "s": round(time.perf_counter() - t, 1)})
            print(f"{spec}: sample {i}: {c.completion_tokens} tokens", file=sys.stderr, flush=True)
    finally:
        await m.aclose()
    return out


def judge(prefill: str, text: str, parent: str | None = None, fmt: str | None = None,
          hit_max_tokens: bool = False) -> dict[str, Any]:
    """The sample as a proposal on ``parent`` (default: the minimal seed): the prompt's started assistant turn + the
    sample, or, with ``fmt`` (a chat format that asks in words: ``chat-file``, ``chat-function``), the sample read
    as that format reads a reply. A valid one keeps the revised harness's ``source``."""
    from harnesslearn import zoo
    from harnesslearn.harness import load_harness
    from harnesslearn.propose.edits import apply_proposal
    from harnesslearn.propose.formats import by_name

    parent = parent if parent is not None else load_harness("minimal").source
    proposal = (by_name(fmt).decode(text, [], hit_max_tokens=hit_max_tokens, source=parent) if fmt
                else prefill + text)
    r = apply_proposal(parent, proposal)
    ok = r.valid and r.source is not None
    return {"valid": r.valid, "reason": None if r.reason is None else str(r.reason.value),
            "nearest_zoo": zoo.near(r.source) if ok else None, **({"source": r.source} if ok else {})}


def parent_of(prompt: dict[str, Any]) -> str:
    """The source of the harness a cached family prompt revises (prompts cached before ``--seed-harness``: the
    minimal seed)."""
    from harnesslearn.harness import load_harness

    return prompt.get("parent_source") or load_harness("minimal").source


def spec_of(model: str, adapter: str) -> str:
    return f"local:{model}" + (f"?adapter={adapter}" if adapter else "")


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


async def eval_prompts(families: list[str], solver: str, seed: int, n_feedback: int, n_traces: int,
                       cache: Path, seed_harness: str = "minimal") -> dict[str, Any]:
    """Each family's eval-stage prompt (chat messages) for revising ``seed_harness`` (``zoo:NAME``: built for the
    family, as a GRPO context seeded with it is), built once and kept in ``cache`` with the harness's source."""
    from harnesslearn.evaluation import evaluate
    from harnesslearn.propose.formats import by_name
    from harnesslearn.propose.prompt import PromptContext
    from harnesslearn.propose.rounds import prompt_seed
    from harnesslearn.runtime import SolverRuntime
    from harnesslearn.sandbox import Budgets
    from harnesslearn.tasks import load_task

    prompts: dict[str, Any] = json.loads(cache.read_text()) if cache.is_file() else {}
    if any(p.get("seed_harness", "minimal") != seed_harness for p in prompts.values()):
        raise SystemExit(f"{cache}: its prompts revise another seed harness than {seed_harness}: give another --rows")
    todo = [f for f in families if f not in prompts]
    if not todo:
        return prompts
    fmt = by_name("chat-prefill")
    async with SolverRuntime(solver, concurrency=2, warm=False) as rt:
        for fam in todo:
            t = time.perf_counter()
            task = load_task(f"rg:{fam}")
            seed_h = resolve_harness(seed_harness, task, seed)
            fb = await evaluate(seed_h, task, "feedback", n_feedback, seed, rt.sandbox, Budgets(), progress=False)
            prompts[fam] = {"messages": fmt.render(PromptContext(task, seed_h, fb, [], n_traces=n_traces,
                                                                 rng_seed=prompt_seed(seed, 1))),
                            "seed_harness": seed_harness, "parent_source": seed_h.source,
                            "seed_feedback_J": fb.J, "s": round(time.perf_counter() - t, 1)}
            cache.write_text(json.dumps(prompts, indent=1) + "\n")
            print(f"prompt {fam}: seed feedback J {fb.J}, {prompts[fam]['s']} s", file=sys.stderr, flush=True)
    return prompts


async def family_row(proposer: Any, label: str, fam: str, messages: Any, k: int, temperature: float,
                     max_tokens: int, seed: int, seed_src: str) -> dict[str, Any]:
    """K candidates of ``proposer`` for one family's prompt, as the eval stage draws them, judged unscored, as
    revisions of ``seed_src``."""
    from harnesslearn.propose.formats import by_name
    from harnesslearn.propose.rounds import candidate_seed, sample

    fmt, t0 = by_name("chat-prefill"), time.perf_counter()
    out = []
    for i in range(k):
        t = time.perf_counter()
        text, comp, _ = await sample(proposer, fmt, messages, temperature=temperature, max_tokens=max_tokens,
                                     seed=candidate_seed(seed, 1, i), source=seed_src)
        out.append({"text": text, "tokens": comp.completion_tokens, "prompt_tokens": comp.prompt_tokens,
                    "s": round(time.perf_counter() - t, 1), **judge("", text, seed_src)})
        print(f"{label} {fam} {i}: {comp.completion_tokens} tokens, {out[-1]['s']} s, "
              + (f"{out[-1]['nearest_zoo']['name']} {out[-1]['nearest_zoo']['ratio']:.2f}" if out[-1]["valid"]
                 else f"invalid ({out[-1]['reason']})"), file=sys.stderr, flush=True)
    return {"arm": label, "family": fam, "spec": proposer.spec, "k": k, "temperature": temperature,
            "max_tokens": max_tokens, "seed": seed, "samples": out, "wall_s": round(time.perf_counter() - t0, 1)}


def mark_layout_only(rows: list[dict[str, Any]], prompts: dict[str, Any]) -> None:
    """Flag each sample recorded valid whose revision is its parent's program laid out differently (``layout_only``:
    the same syntax tree; only layout, comments, quotes or parentheses differ). The rows of sessions 36-37 were judged when only a
    byte-identical revision was ``no_change``; ``apply_proposal`` now calls such a sample ``no_change`` too, so the
    flag says how many of a recorded arm's valid samples the current rule would refuse."""
    from harnesslearn.propose.edits import apply_blocks, parse_blocks, same_program

    for r in rows:
        parent = parent_of(prompts.get(r["family"], {}))
        for smp in r["samples"]:
            child = apply_blocks(parent, parse_blocks(smp["text"]).blocks)[0] if smp["valid"] else None
            smp["layout_only"] = child is not None and same_program(child, parent)


def compared_rows(path: Path) -> list[dict[str, Any]]:
    """Another run's eval rows (``eval_rows.jsonl``) as rows of this script: each proposal text judged here
    (the texts are whole proposals, SEARCH marker included)."""
    rows = []
    for r in read_rows(path):
        if r.get("arm") == "zoo" or "proposal_texts" not in r:
            continue
        rows.append({"arm": f"{r['arm']} ({path.parent.name})", "family": r["family"],
                     "samples": [{"text": t, **judge("", t)} for t in r["proposal_texts"]]})
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm: samples, valid, distinct valid (per family, summed), invalid ones by reason, near-copies of a zoo
    file (and which), the families with at least one valid revision that is not a near-copy, and the valid samples
    that are their parent's program laid out anew (``mark_layout_only``)."""
    from collections import Counter

    out: dict[str, Any] = {}
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        valid = [(r["family"], s) for r in mine for s in r["samples"] if s["valid"]]
        copies = [s["nearest_zoo"]["name"] for _, s in valid if s["nearest_zoo"]["ratio"] >= NEAR_COPY]
        out[arm] = {"families": len(mine), "samples": sum(len(r["samples"]) for r in mine), "valid": len(valid),
                    "distinct_valid": sum(len({s["text"] for s in r["samples"] if s["valid"]}) for r in mine),
                    "invalid": dict(Counter(s["reason"] for r in mine for s in r["samples"] if not s["valid"])),
                    "near_zoo_copies": len(copies), "copied": dict(Counter(copies).most_common()),
                    "families_with_a_non_copy": len({f for f, s in valid if s["nearest_zoo"]["ratio"] < NEAR_COPY}),
                    "layout_only": sum(bool(s.get("layout_only")) for _, s in valid)}
    return out


def implied(rows: list[dict[str, Any]], eval_rows: Path) -> dict[str, Any]:
    """What each arm of ``rows`` would score where its valid samples are all near-copies of zoo files, read from the
    zoo arm of another run (``eval_rows.jsonl``: each zoo file's score-split J per family, the seed's score and test
    J, and the test J of the zoo file it picked): the copied file best by score J is adopted when it beats the seed's
    score J (``adapt``'s strict rule), and its test J is known where it was that run's zoo pick. An inference from
    another run's scores (its solver, its problems), not a measurement; a family with a valid non-copy, or none
    valid, is left out (the seed is kept when nothing is valid, so that family's test J is the seed's)."""
    import statistics

    zoo_rows = {r["family"]: r for r in read_rows(eval_rows) if r.get("arm") == "zoo"}
    out: dict[str, Any] = {}
    for arm in dict.fromkeys(r["arm"] for r in rows):
        fams = []
        for r in (r for r in rows if r["arm"] == arm):
            z, valid = zoo_rows.get(r["family"]), [s for s in r["samples"] if s["valid"]]
            if z is None or not valid or any(s["nearest_zoo"]["ratio"] < NEAR_COPY for s in valid):
                continue
            js = {n: z["candidate_score_J"].get(n) for n in {s["nearest_zoo"]["name"] for s in valid}}
            best = max(js, key=lambda n: -1.0 if js[n] is None else js[n])
            adopted = js[best] is not None and js[best] > z["seed_score_J"]
            if not adopted:
                test = z["seed_test_J"]  # the seed is kept
            else:  # known where the copied file was that run's zoo pick
                test = z["test_J"] if z.get("picked") == best else None
            fams.append({"family": r["family"], "copied": best, "copy_score_J": js[best],
                         "seed_score_J": z["seed_score_J"], "adopted": adopted, "test_J": test,
                         "seed_test_J": z["seed_test_J"], "best_zoo_test_J": z["test_J"]})
        known = [f for f in fams if f["test_J"] is not None]

        def mean(key: str, fs: list[dict[str, Any]] = known) -> float | None:
            return round(statistics.mean(f[key] for f in fs), 3) if fs else None

        out[arm] = {"all_copy_families": len(fams), "adopted": sum(f["adopted"] for f in fams),
                    "test_J_known": len(known), "mean_test_J": mean("test_J"), "mean_seed_test_J": mean("seed_test_J"),
                    "mean_best_zoo_test_J": mean("best_zoo_test_J"), "families": fams}
    return out


def plot(res: dict[str, Any], path: Path) -> None:
    """Left: per arm, the valid samples that are near-copies of a zoo file and those that are not. Right, where
    ``implied`` was asked: per family, the seed's test J, the implied test J of the first arm, and the best zoo
    harness's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = res["arms"]
    imp = {k: v for k, v in res.get("implied", {}).items() if k != "from"}
    first = next((k for k, v in imp.items() if v["families"]), None)
    fig, axes = plt.subplots(1, 2 if first else 1, figsize=(13 if first else 6, 4.2), squeeze=False,
                             gridspec_kw={"width_ratios": [1, 2.2] if first else [1]})
    ax = axes[0][0]
    names = list(arms)
    copies = [arms[n]["near_zoo_copies"] for n in names]
    ax.bar(names, copies, label=f"near-copy of a zoo file (ratio >= {NEAR_COPY})", color="tab:red")
    ax.bar(names, [arms[n]["valid"] - c for n, c in zip(names, copies, strict=True)], bottom=copies,
           label="valid, not a copy", color="tab:blue")
    ax.set_ylabel("valid samples (of K x families)")
    ax.set_title(f"what each proposer writes, revising {res.get('seed_harness', 'minimal')}", fontsize=9)
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    ax.legend(fontsize=7)
    if first:
        fams = [f for f in imp[first]["families"] if f["test_J"] is not None]
        x = range(len(fams))
        ax = axes[0][1]
        for off, key, label in ((-0.27, "seed_test_J", "seed (minimal)"), (0.0, "test_J", f"{first}, implied"),
                                (0.27, "best_zoo_test_J", "best zoo harness")):
            ax.bar([i + off for i in x], [f[key] for f in fams], width=0.27, label=label)
        ax.set_xticks(list(x), [f["family"] for f in fams], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("test J (the other run's scores)")
        ax.set_title(f"{first}: its copies scored as the zoo file it copies (an inference, not a run)", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"{res['model']} (a small model): {len(res['families'])} families, K={res['k']} at temperature "
                 f"{res['temperature']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


async def families_mode(a: argparse.Namespace) -> dict[str, Any]:
    from harnesslearn.models import load_model
    from harnesslearn.tasks.families import family_set

    named = {"eval": "paper-eval", "train": "paper-train"}
    families = family_set(named[a.families]) if a.families in named else a.families.split(",")
    rows_path = Path(a.rows)
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    prompts = await eval_prompts(families, a.solver, a.eval_seed, a.n_feedback, a.n_traces,
                                 rows_path.with_suffix(".prompts.json"), a.seed_harness)
    deadline = time.time() + a.minutes * 60
    for arm in a.arm:
        label, _, adapter = arm.partition("=")
        todo = [f for f in families if (label, f) not in {(r["arm"], r["family"]) for r in read_rows(rows_path)}]
        if not todo or time.time() > deadline:
            continue
        m = load_model(spec_of(a.model, adapter), cache=False)
        try:
            for fam in todo:
                if time.time() > deadline:
                    print(f"deadline: {label} stopped before {fam}", file=sys.stderr, flush=True)
                    break
                row = await family_row(m, label, fam, prompts[fam]["messages"], a.k, a.temperature, a.max_tokens,
                                       a.eval_seed, parent_of(prompts[fam]))
                with rows_path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
        finally:
            await m.aclose()
    own = read_rows(rows_path)
    mark_layout_only(own, prompts)
    rows = own + [r for c in a.compare for r in compared_rows(Path(c))]
    return {"model": a.model, "solver": a.solver, "families": families, "k": a.k, "temperature": a.temperature,
            "max_tokens": a.max_tokens, "eval_seed": a.eval_seed, "n_feedback": a.n_feedback,
            "seed_harness": a.seed_harness, "copy_ratio": NEAR_COPY, "rows": str(rows_path), "arms": summary(rows),
            **({"implied": {"from": a.implied, **implied(own, Path(a.implied))}} if a.implied else {})}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arm", action="append", required=True, metavar="LABEL=DIR",
                   help="a proposer: LABEL=ADAPTER_DIR, or base (the model alone)")
    p.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--prompt", default=str(ROOT / "benchmarks" / "data" / "gcd_proposer_prompt.json"))
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--temperature", type=float, default=0.8, help="the eval stage's proposer temperature")
    p.add_argument("--max-tokens", type=int, default=768, help="the eval stage's proposer limit")
    p.add_argument("--seed", type=int, default=10007)
    p.add_argument("--format", default=None, choices=["chat-file", "chat-function"],
                   help="--prompt asks in words in this format (no started assistant turn): read each reply as it "
                   "does (default: the prompt's started assistant turn + the sample)")
    p.add_argument("--out", default=None)
    p.add_argument("--families", default=None, help="eval (the 21 paper-eval families), train (the 5 paper-train "
                   "ones) or a comma list: each "
                   "family's eval-stage prompt instead of --prompt (see the module docstring)")
    p.add_argument("--solver", default="local:qwen2.5-coder-1.5b-instruct", help="--families: runs the seed")
    p.add_argument("--eval-seed", type=int, default=1234, help="--families: problems and candidate seeds")
    p.add_argument("--n-feedback", type=int, default=4)
    p.add_argument("--n-traces", type=int, default=3)
    p.add_argument("--rows", default=None, help="--families: the rows file (JSONL, appended, resumable)")
    p.add_argument("--minutes", type=float, default=600.0, help="--families: no new family after this")
    p.add_argument("--compare", action="append", default=[], metavar="EVAL_ROWS",
                   help="--families: another run's eval_rows.jsonl, judged the same way for the summary")
    p.add_argument("--implied", default=None, metavar="EVAL_ROWS",
                   help="--families: what each arm would score where it only copies zoo files, from the zoo rows "
                   "of this eval_rows.jsonl (an inference, see implied())")
    p.add_argument("--seed-harness", default="minimal", help="--families: the harness revised (zoo:NAME is built "
                   "for each family, as grpo.seed_harnesses does)")
    p.add_argument("--plot", default=None, metavar="PNG", help="--families: the summary as a figure")
    a = p.parse_args(argv)
    if a.families:
        if not a.rows:
            p.error("--families needs --rows FILE.jsonl")
        res = asyncio.run(families_mode(a))
        for arm, r in res["arms"].items():
            print(f"{arm}: {r['families']} families, {r['valid']}/{r['samples']} valid ({r['distinct_valid']} "
                  f"distinct), invalid {r['invalid']}, {r['near_zoo_copies']} near-copies of a zoo file "
                  f"{r['copied']}, {r['layout_only']} the parent's program laid out anew; families with a "
                  f"valid non-copy: {r['families_with_a_non_copy']}")
        for arm, r in res.get("implied", {}).items():
            if arm != "from":
                print(f"{arm} implied: {r['all_copy_families']} families with only zoo copies, {r['adopted']} adopted; "
                      f"test J known on {r['test_J_known']}: {r['mean_test_J']} (seed {r['mean_seed_test_J']}, "
                      f"best zoo {r['mean_best_zoo_test_J']})")
        if a.out:
            Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
        if a.plot:
            plot(res, Path(a.plot))
        return res
    messages = json.loads(Path(a.prompt).read_text())
    prefill = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
    if bool(prefill) == bool(a.format):
        p.error("--format goes with a prompt that asks in words (no started assistant turn), and only there")
    res: dict[str, Any] = {"model": a.model, "prompt": a.prompt, "k": a.k, "temperature": a.temperature,
                           "max_tokens": a.max_tokens, "format": a.format or "chat-prefill", "arms": {}}
    for arm in a.arm:
        label, _, adapter = arm.partition("=")
        spec = spec_of(a.model, adapter)
        got = asyncio.run(samples(spec, messages, a.k, a.temperature, a.max_tokens, a.seed))
        judged = [{**s, **judge(prefill, s["text"], fmt=a.format, hit_max_tokens=s["tokens"] >= a.max_tokens)}
                  for s in got]
        valid = [s for s in judged if s["valid"]]
        res["arms"][label] = {
            "spec": spec, "distinct": len({s["text"] for s in judged}), "valid": len(valid),
            "distinct_valid": len({s["text"] for s in valid}),
            "near_zoo_copies": sum(1 for s in valid if s["nearest_zoo"] and s["nearest_zoo"]["ratio"] >= NEAR_COPY),
            "samples": judged}
        r = res["arms"][label]
        print(f"{label}: {r['distinct']} distinct of {a.k}, {r['valid']} valid ({r['distinct_valid']} distinct), "
              f"{r['near_zoo_copies']} near-copies of a zoo harness; nearest: "
              + ", ".join(f"{s['nearest_zoo']['name']} {s['nearest_zoo']['ratio']:.2f}" if s["nearest_zoo"]
                          else f"invalid ({s['reason']})" for s in judged))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    return res


if __name__ == "__main__":
    main()
