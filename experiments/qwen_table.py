"""The measured table of issue 10: the embedded Qwen coder as solver and proposer, per task.

For each task: the seed harness's test J; every zoo harness on the score split, the best one
(picked on the score split) with its test J; sequential adaptation (R rounds of K candidates)
and independent proposals at the same budget (R*K from the seed), each harness picked on the
score split and reported on the test split; the oracle best-of-(R*K) by test J (an upper bound,
not a method); proposal validity; solver and proposer calls; wall time. It runs
``harnesslearn.adapt.adapt`` with ``strategy="compare", oracle=True, zoo_baselines=True``
(exactly what ``harnesslearn adapt --strategy compare --oracle --zoo-baselines`` does), one run
directory per task under ``--work``, resumable: re-running the command continues where it
stopped and reuses every finished task.

    .venv/bin/python experiments/qwen_table.py --out experiments/results/qwen_table \\
        --work runs/qwen_table            # defaults: the sizes of the committed table

Writes ``table.json`` (every run's result) and ``table.md`` into ``--out`` after each task.
Uses only the public API of harnesslearn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harnesslearn import AdaptSettings, zoo
from harnesslearn.adapt import adapt
from harnesslearn.models import load_model
from harnesslearn.runtime import SolverRuntime
from harnesslearn.sandbox import Budgets
from harnesslearn.settings.groups import ProposerSettings, RuntimeSettings, Sampling, Splits
from harnesslearn.store import Store
from harnesslearn.tasks import load_task
from harnesslearn.tasks.families import family_set

QA = os.environ.get("HARNESSLEARN_QA_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data" / "qa"))
# cheap families first (rotten_oranges' long grids took over 20 minutes a run on 2 shared cores)
PAPER_TRAIN = [f"rg:{f}" for f in ("simple_geometry", "maze") if f in family_set("paper-train")]  # short questions
PAPER_EVAL = ["rg:basic_arithmetic", "rg:gcd", "rg:word_sorting", "rg:letter_counting"]
MUSIQUE = f"musique:{QA}/musique_dev_with_paragraphs.jsonl?corpus={QA}/musique_dev200_corpus.jsonl"
MODEL = "local:qwen2.5-coder-1.5b-instruct"


def _j(x: Any) -> str:
    return "–" if x is None else f"{x:.3f}"


def row_of(spec: str, r: dict[str, Any]) -> dict[str, Any]:
    """One table row from an ``adapt`` compare result."""
    c = r.get("compare") or {}
    seq, ind = c.get("sequential", {}), c.get("independent", {})
    zoo_rows = (r.get("zoo_eval") or {}).get("rows", [])
    best_zoo = next((z for z in zoo_rows if z["name"] == (r.get("zoo_eval") or {}).get("best")), None)
    return {
        "task": spec.split("?")[0].rsplit("/", 1)[-1] if spec.startswith("musique:") else spec,
        "seed_test_J": r.get("seed_test_J"),
        "best_zoo": best_zoo and best_zoo["name"], "best_zoo_test_J": best_zoo and best_zoo["test"].get("J"),
        "zoo_score_J": {z["name"]: z["score"].get("J") for z in zoo_rows},
        "sequential_test_J": seq.get("test_J"), "independent_test_J": ind.get("test_J"),
        "oracle_test_J": (ind.get("oracle") or {}).get("test_J"),
        "valid": f"{seq.get('valid_proposals', 0) + ind.get('valid_proposals', 0)}/"
                 f"{seq.get('proposals', 0) + ind.get('proposals', 0)}",
        "invalid_reasons": dict(Counter(seq.get("invalid_reasons", {})) + Counter(ind.get("invalid_reasons", {}))),
        "solver_calls": seq.get("solver_calls", 0) + ind.get("solver_calls", 0),
        "proposer_calls": seq.get("proposer_calls", 0) + ind.get("proposer_calls", 0),
        "busy_s": r.get("busy_s"),
    }


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    head = (f"# {meta['model']} as solver and proposer (small-model, small-split result)\n\n"
            f"Splits: feedback {meta['n_feedback']}, score {meta['n_score']}, test {meta['n_test']} problems; "
            f"sequential {meta['rounds']} rounds x {meta['candidates']} candidates, independent "
            f"{meta['rounds'] * meta['candidates']} proposals from the seed; zoo without {meta['zoo_skip']} (cost); "
            f"2 CPU cores (llama.cpp), shared with other jobs; time: the evaluations' and proposer calls' wall "
            f"time summed (they ran one after another). Command: `{meta['command']}`\n\n"
            "| task | seed test J | best zoo (picked on score) | its test J | sequential test J | independent test J "
            "| oracle best-of-N test J (upper bound) | valid proposals | solver calls | time |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    lines = [f"| {r['task']} | {_j(r['seed_test_J'])} | {r['best_zoo'] or '–'} | {_j(r['best_zoo_test_J'])} "
             f"| {_j(r['sequential_test_J'])} | {_j(r['independent_test_J'])} | {_j(r['oracle_test_J'])} "
             f"| {r['valid']} | {r['solver_calls']} | {(r['busy_s'] or 0) / 60:.1f} min |" for r in rows]
    return head + "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Grouped bars per task: seed, best zoo, sequential, independent test J; the oracle as a tick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [("seed_test_J", "seed"), ("best_zoo_test_J", "best zoo (score-picked)"),
            ("sequential_test_J", "sequential"), ("independent_test_J", "independent")]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(rows)), 3.6))
    w = 0.8 / len(keys)
    for k, (key, label) in enumerate(keys):
        ax.bar([i + k * w for i in range(len(rows))], [r[key] or 0.0 for r in rows], w, label=label)
    ax.scatter([i + 1.5 * w for i in range(len(rows))], [r["oracle_test_J"] or 0.0 for r in rows], marker="_",
               s=400, color="black", label="oracle best-of-N (upper bound)")
    ax.set_xticks([i + 1.5 * w for i in range(len(rows))], [r["task"].removeprefix("rg:") for r in rows],
                  rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("test J")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


async def one(spec: str, args: argparse.Namespace, solver: Any, proposer: Any) -> dict[str, Any]:
    settings = AdaptSettings(
        strategy="compare", rounds=args.rounds, candidates=args.candidates, seed=args.seed, oracle=True,
        splits=Splits(n_feedback=args.n_feedback, n_score=args.n_score, n_test=args.n_test),
        budgets=Budgets(timeout_s=args.timeout), proposer=ProposerSettings(sampling=Sampling(max_tokens=args.max_tokens)),
        runtime=RuntimeSettings(concurrency=args.concurrency),
    )
    task = load_task(spec)
    rd = args.work / task.family.replace("/", "_")
    out = (await adapt(task, solver, proposer, settings, run_dir=rd, resume=rd.exists())).to_json()
    zoo_file = rd / "zoo.json"  # the zoo on the same splits: every entry on score, the pick on test
    if not zoo_file.exists():
        only = [n for n in zoo.names(task) if n not in args.zoo_skip.split(",")]
        async with SolverRuntime(solver, concurrency=args.concurrency, own_solver=False, warm=False) as rt:
            assert rt.executor is not None
            z = await zoo.evaluate_zoo(task, rt.executor, n_score=args.n_score, n_test=args.n_test, seed=args.seed,
                                       budgets=settings.budgets, only=only, test="best", include_seed=False,
                                       progress=False)
        zoo_file.write_text(json.dumps(z))
    out["zoo_eval"] = json.loads(zoo_file.read_text())
    with Store.open(rd, create=False) as store:  # time spent, summed over every invocation that worked on it
        out["busy_s"] = round(sum(e.wall_s for e in store.evaluations())
                              + sum(store.proposer_usage(r.id).latency_s for r in store.runs())
                              + sum(z["wall_s"] for z in out["zoo_eval"]["rows"]), 1)
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    order = [PAPER_EVAL[1], PAPER_TRAIN[0], PAPER_EVAL[2], PAPER_TRAIN[1], MUSIQUE, PAPER_EVAL[0], PAPER_EVAL[3]]
    ap.add_argument("--tasks", default=",".join(order),
                    help="comma-separated task specs")
    ap.add_argument("--solver", default=MODEL)
    ap.add_argument("--proposer", default=MODEL)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--candidates", type=int, default=1)
    ap.add_argument("--n-feedback", type=int, default=2)
    ap.add_argument("--n-score", type=int, default=4)
    ap.add_argument("--n-test", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--max-tokens", type=int, default=768)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--zoo-skip", default="self_consistency",
                    help="zoo entries left out (self_consistency: 5 sampled solver calls a problem, 460 s for 4 gcd "
                         "problems here)")
    ap.add_argument("--work", type=Path, default=Path("runs/qwen_table"))
    ap.add_argument("--out", type=Path, default=Path("experiments/results/qwen_table"))
    args = ap.parse_args()
    meta = {k: getattr(args, k) for k in ("rounds", "candidates", "n_feedback", "n_score", "n_test", "seed",
                                          "zoo_skip")}
    meta |= {"model": args.solver if args.solver == args.proposer else f"{args.solver} / {args.proposer}",
             "command": "python experiments/qwen_table.py " + " ".join(sys.argv[1:])}
    solver, proposer = load_model(args.solver), load_model(args.proposer)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        for spec in [s for s in args.tasks.split(",") if s]:
            results[spec] = await one(spec, args, solver, proposer)
            rows = [row_of(s, r) for s, r in results.items()]
            (args.out / "table.json").write_text(json.dumps({"meta": meta, "rows": rows, "results": results},
                                                            indent=1, default=str))
            (args.out / "table.md").write_text(markdown(rows, meta))
            plot(rows, args.out / "table.png")
            sys.stderr.write(f"[table] {spec} done ({time.perf_counter() - t0:.0f} s so far)\n")
    finally:
        await solver.aclose()
        await proposer.aclose()
    print((args.out / "table.md").read_text())


if __name__ == "__main__":
    asyncio.run(main())
