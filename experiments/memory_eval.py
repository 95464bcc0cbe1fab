"""Harness memory on the CPU (issue 22): does a memory built on paper-train families help the untrained
Qwen2.5-Coder-1.5B revise harnesses on paper-eval families it was not built from?

    .venv/bin/python experiments/memory_eval.py --work runs/memory_eval --out experiments/results/memory

The memory shipped for the Qwen demo (``src/harnesslearn/seeds/memory/paper_train.jsonl``) is step 1's,
exported: ``... memory_eval.py --work runs/memory_eval --only-build --export src/harnesslearn/seeds/memory/paper_train.jsonl``.

1. ``build``: ``memory.add_zoo`` on the paper-train families (``--train``), the 1.5B as solver: every zoo
   harness (``--zoo``) that beats the minimal seed on the score split is stored.
2. ``single``: on each paper-eval family (``--eval``), K single revisions of the minimal seed by the 1.5B
   (``adapt --strategy independent --rounds 1 --candidates K``), without and with memory (the memory is
   copied for each run, so a run's own addition never reaches another). Per condition: valid rate,
   the share of valid revisions that call ``model.python`` (the strategy the memory's entries use),
   the share that are whole-file rewrites, and test J of the best by score split, with bootstrap 95 %
   intervals over test problems.
3. ``sequential``: ``adapt --strategy sequential`` (R rounds x C) without and with memory on the first two
   eval families.

Resumable: each (family, condition) run has its own run directory and is skipped when finished; the
table is rebuilt from them. Small-model, small-split result on 2 shared CPU cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from harnesslearn.adapt import adapt
from harnesslearn.memory import Memory, add_zoo
from harnesslearn.models import load_model
from harnesslearn.runtime import SolverRuntime
from harnesslearn.sandbox import Budgets
from harnesslearn.settings.adapt import AdaptSettings
from harnesslearn.settings.groups import MemorySettings, ProposerSettings, RuntimeSettings, Sampling, Splits
from harnesslearn.stats import bootstrap_ci
from harnesslearn.store import Store
from harnesslearn.tasks import load_task

MODEL = "local:qwen2.5-coder-1.5b-instruct"  # solver and proposer (--model for a dry run)


def log(msg: str) -> None:
    print(f"[memory_eval {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


async def build(a: argparse.Namespace, solver: Any) -> list[dict[str, Any]]:
    mem_path = a.work / "memory.sqlite"
    done_file = a.work / "build.json"
    done = json.loads(done_file.read_text()) if done_file.is_file() else []
    have = {d["task"] for d in done}
    async with SolverRuntime(solver, concurrency=a.concurrency, own_solver=False, warm=False) as rt:
        for fam in a.train:
            spec = f"rg:{fam}"
            if spec in have:
                continue
            log(f"build: zoo on {spec}")
            with Memory.open(mem_path) as mem:
                r = await add_zoo(mem, load_task(spec), rt.sandbox, solver=a.model, n_score=a.n_score, seed=a.seed,
                                  budgets=Budgets(timeout_s=a.timeout), only=a.zoo)
            done.append(r)
            done_file.write_text(json.dumps(done, indent=1))
            log(f"build: {spec}: seed J {r['seed_score_J']}, stored {len(r['added'])}")
    return done


async def one_run(a: argparse.Namespace, solver: Any, fam: str, cond: str, strategy: str, rounds: int,
                  k: int) -> dict[str, Any]:
    """One adaptation run (resumed when interrupted, read back when finished) and its row of the table."""
    rd = a.work / f"{strategy}-{fam}-{cond}"
    result = rd / "result.json"
    if result.is_file():
        return json.loads(result.read_text())
    mem_copy = a.work / f"memory-{strategy}-{fam}-{cond}.sqlite"
    if cond == "memory" and not mem_copy.exists():  # a copy: this run's own addition never reaches another run
        shutil.copyfile(a.work / "memory.sqlite", mem_copy)
    settings = AdaptSettings(
        strategy=strategy, rounds=rounds, candidates=k, seed=a.seed,
        splits=Splits(n_feedback=a.n_feedback, n_score=a.n_score, n_test=a.n_test), budgets=Budgets(timeout_s=a.timeout),
        proposer=ProposerSettings(sampling=Sampling(max_tokens=a.max_tokens)),
        memory=MemorySettings(enabled=cond == "memory", k=a.k_memory, path=str(mem_copy) if cond == "memory" else None),
        runtime=RuntimeSettings(concurrency=a.concurrency))
    log(f"{strategy} {fam} {cond}: {rounds} x {k}")
    t0 = time.time()
    out = (await adapt(load_task(f"rg:{fam}"), solver, solver, settings, run_dir=rd, resume=rd.exists(),
                       progress=False)).to_json()
    with Store.open(rd, create=False) as s:
        props = s.proposals(strategy)
        valid = [p for p in props if p.valid and p.harness_id]
        sources = [s.harness_source(p.harness_id) for p in valid if p.harness_id]
        test_ev = [e for e in s.evaluations(strategy, "test") if e.harness_id == out["best_harness_id"]]
        seed_ev = [e for e in s.evaluations(strategy, "test") if e.harness_id == out["seed_harness_id"]]
        scores = [p.score for p in s.load_evaluation(test_ev[0].id).problems if p.score is not None] if test_ev else []
        seed_scores = ([p.score for p in s.load_evaluation(seed_ev[0].id).problems if p.score is not None]
                       if seed_ev else [])
    row = {"family": fam, "condition": cond, "strategy": strategy, "rounds": rounds, "candidates": k,
           "proposals": len(props), "valid": len(valid), "uses_python": sum("model.python" in src for src in sources),
           "rewrites": sum(p.kind == "rewrite" for p in valid),
           "invalid_reasons": out["invalid_reasons"], "memory_shown": out["memory_shown"],
           "seed_score_J": out["seed_score_J"], "score_J": out["score_J"], "seed_test_J": out["seed_test_J"],
           "test_J": out["test_J"], "test_ci": bootstrap_ci(scores) if scores else None,
           "seed_test_ci": bootstrap_ci(seed_scores) if seed_scores else None,
           "improved_on_score": out["best_harness_id"] != out["seed_harness_id"],
           "wall_s": round(time.time() - t0, 1), "n_score": a.n_score, "n_test": a.n_test, "seed": a.seed,
           "solver": a.model, "proposer": a.model}
    result.write_text(json.dumps(row, indent=1))
    return row


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def ci(c: dict[str, Any] | None) -> str:
    return "" if not c else f" [{c['lo']:.2f}, {c['hi']:.2f}]"


def table(a: argparse.Namespace, build_rows: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    a.out.mkdir(parents=True, exist_ok=True)
    md = ["# Harness memory on the CPU (Qwen2.5-Coder-1.5B as solver and proposer; small-model, small-split result)",
          "", f"Memory built from paper-train families only ({', '.join(a.train)}; zoo harnesses {', '.join(a.zoo)}, "
          f"stored when they beat the minimal seed on {a.n_score} score-split problems):", ""]
    for b in build_rows:
        md.append(f"- {b['task']}: seed J {fmt(b['seed_score_J'])}; " + ", ".join(
            f"{r['name']} {fmt(r['score_J'])}{' (stored)' if r['stored'] else ''}" for r in b["rows"]))
    md += ["", f"Evaluated on paper-eval families not used to build it. Splits feedback/score/test "
           f"{a.n_feedback}/{a.n_score}/{a.n_test}, seed {a.seed}, proposer max {a.max_tokens} tokens, memory k "
           f"{a.k_memory}. 'python' = valid revisions calling model.python; 'rewrites' = whole-file rewrites. "
           "Test J with 95 % bootstrap intervals over test problems.", "",
           "| strategy | family | memory | valid | python | rewrites | score J seed -> best | test J seed | test J best |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['strategy']} {r['rounds']}x{r['candidates']} | {r['family']} | {r['condition']} | "
                  f"{r['valid']}/{r['proposals']} | {r['uses_python']}/{r['valid']} | {r['rewrites']}/{r['valid']} | "
                  f"{fmt(r['seed_score_J'])} -> {fmt(r['score_J'])} | {fmt(r['seed_test_J'])}{ci(r['seed_test_ci'])} | "
                  f"{fmt(r['test_J'])}{ci(r['test_ci'])} |")
    (a.out / "table.md").write_text("\n".join(md) + "\n")
    (a.out / "table.json").write_text(json.dumps({"build": build_rows, "rows": rows}, indent=1) + "\n")
    log(f"wrote {a.out / 'table.md'}")


async def main_async(a: argparse.Namespace) -> None:
    a.work.mkdir(parents=True, exist_ok=True)
    solver = load_model(a.model)
    rows: list[dict[str, Any]] = []
    try:
        build_rows = await build(a, solver)
        if a.export is not None:  # the memory the Qwen demo ships with (src/harnesslearn/seeds/memory/)
            from harnesslearn.memory import export_jsonl

            with Memory.open(a.work / "memory.sqlite") as mem:
                a.export.write_text(export_jsonl(mem))
            log(f"exported the paper-train memory to {a.export}")
        if a.only_build:
            return
        plan = [(f, c, "independent", 1, a.k) for f in a.eval for c in ("none", "memory")]
        plan += [(f, c, "sequential", a.rounds, a.candidates) for f in a.eval[:2] for c in ("none", "memory")]
        for fam, cond, strategy, rounds, k in plan:
            if a.deadline and time.time() > a.deadline:
                log("deadline: stopping before the next run (rerun to continue)")
                break
            rows.append(await one_run(a, solver, fam, cond, strategy, rounds, k))
            table(a, build_rows, rows)
    finally:
        await solver.aclose()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=MODEL, help="solver and proposer spec (a python: callable for a dry run)")
    p.add_argument("--work", type=Path, default=Path("runs/memory_eval"))
    p.add_argument("--out", type=Path, default=Path("experiments/results/memory"))
    p.add_argument("--train", type=lambda s: s.split(","), default=["simple_geometry", "maze", "tower_of_hanoi"])
    p.add_argument("--zoo", type=lambda s: s.split(","), default=["interpreter_loop", "reason_extract"])
    p.add_argument("--eval", type=lambda s: s.split(","),
                   default=["gcd", "basic_arithmetic", "word_sorting", "letter_counting"])
    p.add_argument("--k", type=int, default=8, help="single revisions per family and condition")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--candidates", type=int, default=2)
    p.add_argument("--k-memory", type=int, default=2)
    p.add_argument("--n-feedback", type=int, default=3)
    p.add_argument("--n-score", type=int, default=4)
    p.add_argument("--n-test", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--max-tokens", type=int, default=768)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--export", type=Path, default=None, help="write the built memory here as JSONL")
    p.add_argument("--only-build", action="store_true", help="build (and --export) the memory, run nothing else")
    p.add_argument("--minutes", type=float, default=0.0, help="stop starting new runs after this (0: no limit)")
    a = p.parse_args(argv)
    a.deadline = time.time() + a.minutes * 60 if a.minutes else 0.0
    asyncio.run(main_async(a))


if __name__ == "__main__":
    main()
