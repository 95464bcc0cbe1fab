"""One revision by the untrained proposer (Gemma 3 270M) and by the trained one (the same model
plus the GRPO LoRA adapter) on held-out families, scored on their test splits.

    PYTHONPATH=/tmp/site:src python3 experiments/h200_eval.py --model $MODEL_DIR \
        --adapter experiments/results/adapter --out $OUT

Each (proposer, family) is one ``harnesslearn.adapt.adapt`` run, the test-time code path, with
strategy ``independent``: ``--candidates`` proposals from the seed harness (one prompt built from
the seed's feedback-split evaluation), the best valid one by score-split J replaces the seed if
it is strictly better, and the result is evaluated on the test split. J "after" is therefore
the test J of the harness a user would get from one revision step (the seed when no proposal is
valid or better). All runs share one executor and one solver. The seed harness is evaluated once
first, filling the solver's response cache (temperature-0 calls only), so both arms see the same
seed feedback and scores, and the comparison is paired over the same test problems.

The adapter is merged into the base weights in float32 and both proposers run in float32 (a
small LoRA step can vanish when merged into bf16 weights). Bootstrap 95 % intervals: per family
over test problems; over families (problems resampled within each family; and also families
resampled); and for the paired difference trained - base.

Writes ``eval_results.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exp_runtime as rt  # noqa: E402
import exp_stats as st  # noqa: E402

rt.ensure_src()

# fast paper-eval families (items generate in about a millisecond; answers are short strings)
EVAL_FAMILIES = ["basic_arithmetic", "gcd", "base_conversion", "caesar_cipher", "letter_counting",
                 "spell_backward", "word_sorting", "coin_flip"]


def merge_adapter(model_dir: str, adapter: str, dst: Path) -> str:
    """Base + LoRA merged in float32 and saved as a plain transformers folder (for ``hf:``)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, adapter).merge_and_unload()
    dst.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(str(dst))
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(str(dst))
    return str(dst)


def test_scores(run_dir: Path, harness_id: str, task_spec: str, n: int, seed: int) -> list[float]:
    """Per-problem test-split scores of ``harness_id`` recorded in an adapt run store."""
    from harnesslearn.adapt import load_evaluation
    from harnesslearn.store import Store

    with Store.open(run_dir, create=False) as store:
        row = store.find_evaluation("independent", harness_id, task_spec, "test", n, seed)
        if row is None:
            raise RuntimeError(f"no test evaluation of {harness_id[:12]} in {run_dir}")
        ev = load_evaluation(store, row["id"])
    return [p.score for p in ev.problems if p.score is not None]


def proposal_counts(run_dir: Path) -> dict[str, Any]:
    from harnesslearn.store import Store

    with Store.open(run_dir, create=False) as store:
        props = store.proposals("independent")
    reasons: dict[str, int] = {}
    for p in props:
        if not p["valid"]:
            reasons[str(p["reason"])] = reasons.get(str(p["reason"]), 0) + 1
    return {"proposals": len(props), "parsed": sum(bool(p["parsed"]) for p in props),
            "produced": sum(bool(p["produced"]) for p in props), "valid": sum(bool(p["valid"]) for p in props),
            "invalid_reasons": reasons}


async def one_family(arm: str, family: str, proposer: Any, solver: Any, executor: Any, args: argparse.Namespace,
                     work: Path) -> dict[str, Any]:
    from harnesslearn.adapt import adapt
    from harnesslearn.sandbox.records import Budgets
    from harnesslearn.tasks import load_task

    task = load_task(family if ":" in family else f"rg:{family}")
    run_dir = work / arm / task.family
    t = time.time()
    res = await adapt(task, solver, proposer, strategy="independent", rounds=1, candidates=args.candidates,
                      run_dir=run_dir, seed=args.seed, n_feedback=args.n_feedback, n_score=args.n_score,
                      n_test=args.n_test, budgets=Budgets(timeout_s=args.timeout_s), temperature=args.temperature,
                      max_tokens=args.max_tokens, prime=args.prime, progress=False, executor=executor)
    seed_scores = test_scores(run_dir, res.seed_harness_id, task.spec, args.n_test, args.seed)
    after_scores = test_scores(run_dir, res.best_harness_id, task.spec, args.n_test, args.seed)
    rt.log(f"{arm:7s} {task.family:18s} seed test J={res.seed_test_J} -> {res.test_J} "
           f"({res.valid_proposals}/{res.proposals} valid)")
    return {"arm": arm, "family": task.family, "task": task.spec, "seed_test_J": res.seed_test_J,
            "test_J": res.test_J, "seed_score_J": res.seed_score_J, "score_J": res.score_J,
            "improved": res.best_harness_id != res.seed_harness_id, "best_harness_id": res.best_harness_id,
            "seed_scores": seed_scores, "after_scores": after_scores, **proposal_counts(run_dir),
            "wall_s": round(time.time() - t, 1)}


async def warm_seed(family: str, executor: Any, args: argparse.Namespace) -> None:
    from harnesslearn.adapt import default_seed_harness
    from harnesslearn.evaluation import evaluate
    from harnesslearn.sandbox.records import Budgets
    from harnesslearn.tasks import load_task

    task = load_task(family if ":" in family else f"rg:{family}")
    seed_h = default_seed_harness(task)
    budgets = Budgets(timeout_s=args.timeout_s)
    await asyncio.gather(*(evaluate(seed_h, task, split, n, args.seed, executor, budgets, progress=False)
                           for split, n in (("feedback", args.n_feedback), ("score", args.n_score),
                                            ("test", args.n_test))))


async def run_all(args: argparse.Namespace, arms: dict[str, str], work: Path, isolation: str,
                  python: str | None) -> list[dict[str, Any] | BaseException]:
    from harnesslearn.models import load_model
    from harnesslearn.sandbox import Executor, ExecutorConfig

    solver = load_model(args.solver or f"hf:{args.model}?max_batch={args.solver_max_batch}",
                        cache_path=str(work / "solver_cache.sqlite"))
    opts = f"?dtype={args.proposer_dtype}&max_batch=64"
    proposers = {arm: load_model(f"hf:{path}{opts}", cache=False) for arm, path in arms.items()}
    kw: dict[str, Any] = {"isolation": isolation, "concurrency": args.concurrency}
    if python:
        kw["python"] = python
    executor = Executor(solver, ExecutorConfig(**kw))
    await executor.start()
    try:
        # the seed's evaluations first, once: both arms then read them from the solver's response cache
        # (concurrent identical requests would both reach the model, and batched decoding is not bit-exact)
        warm = await asyncio.gather(*(warm_seed(fam, executor, args) for fam in args.families.split(",")),
                                    return_exceptions=True)
        for fam, w in zip(args.families.split(","), warm, strict=True):
            if isinstance(w, BaseException):  # only an optimisation: the arms evaluate the seed themselves
                rt.loud(f"seed warm-up of {fam} failed ({type(w).__name__}: {w}); its arms may score the seed apart")
        rt.log("seed harness evaluated on every family (feedback, score, test splits)")
        jobs = [one_family(arm, fam, proposers[arm], solver, executor, args, work)
                for arm in arms for fam in args.families.split(",")]
        # one family's failure (an infrastructure fault, a bug) must not discard the others' results
        return list(await asyncio.gather(*jobs, return_exceptions=True))
    finally:
        await executor.aclose()
        for m in (solver, *proposers.values()):
            await m.aclose()


def summarise(rows: list[dict[str, Any]], n_boot: int) -> dict[str, Any]:
    """Per-arm validity and J (seed vs. after one revision) with bootstrap intervals."""
    out: dict[str, Any] = {}
    arms = sorted({r["arm"] for r in rows})
    for arm in arms:
        mine = [r for r in rows if r["arm"] == arm]
        before = {r["family"]: r["seed_scores"] for r in mine}
        after = {r["family"]: r["after_scores"] for r in mine}
        n_prop = sum(r["proposals"] for r in mine)
        out[arm] = {
            "families": len(mine),
            "validity": {k: (sum(r[k] for r in mine) / n_prop if n_prop else None) for k in ("parsed", "produced",
                                                                                           "valid")},
            "proposals": n_prop,
            "improved_families": sum(r["improved"] for r in mine),
            "seed_mean_J": st.bootstrap_family_mean(before, n_boot=n_boot),
            "after_mean_J": st.bootstrap_family_mean(after, n_boot=n_boot),
            "after_mean_J_families_resampled": st.bootstrap_family_mean(after, n_boot=n_boot, resample_families=True),
            "gain_over_seed": st.bootstrap_family_mean_diff(before, after, n_boot=n_boot),
            "per_family": {r["family"]: {"seed": st.bootstrap_ci(r["seed_scores"], n_boot=n_boot),
                                         "after": st.bootstrap_ci(r["after_scores"], n_boot=n_boot),
                                         "valid": r["valid"], "proposals": r["proposals"]} for r in mine},
        }
    if {"base", "trained"} <= set(arms):
        b = {r["family"]: r["after_scores"] for r in rows if r["arm"] == "base"}
        t = {r["family"]: r["after_scores"] for r in rows if r["arm"] == "trained"}
        out["trained_minus_base"] = st.bootstrap_family_mean_diff(b, t, n_boot=n_boot)
        out["trained_minus_base_per_family"] = {f: st.bootstrap_paired_diff(b[f], t[f], n_boot=n_boot)
                                                for f in b if f in t and len(b[f]) == len(t[f])}
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Gemma 3 270M transformers folder (base proposer and solver)")
    p.add_argument("--adapter", default=None, help="GRPO LoRA adapter folder (omit: base proposer only)")
    p.add_argument("--out", required=True, help="results folder (the device's $OUT)")
    p.add_argument("--families", default=",".join(EVAL_FAMILIES), help="comma-separated held-out families/specs")
    p.add_argument("--n-test", type=int, default=32)
    p.add_argument("--n-score", type=int, default=16)
    p.add_argument("--n-feedback", type=int, default=8)
    p.add_argument("--candidates", type=int, default=4, help="proposals per family (one revision step)")
    p.add_argument("--max-tokens", type=int, default=384, help="proposer completion limit (as in training)")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--prime", default="rewrite", choices=["search", "rewrite"],
                   help="how proposer prompts end (as in training: configs/h200_grpo.yaml 'prime')")
    p.add_argument("--timeout-s", type=float, default=20.0, help="wall-clock limit of one solve() call")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--isolation", default="auto", choices=sorted(rt.FALLBACK))
    p.add_argument("--worker-python", default=None)
    p.add_argument("--concurrency", type=int, default=128, help="sandboxed runs in flight")
    p.add_argument("--solver", default=None, help="solver spec (default: hf:MODEL?max_batch=N)")
    p.add_argument("--solver-max-batch", type=int, default=256)
    p.add_argument("--proposer-dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--work", default="/tmp/h200_eval_work")
    p.add_argument("--cpu", action="store_true", help="CPU smoke run")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    rt.restart_clock()
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sampler = rt.GpuSampler(interval=0.5).start()
    results: dict[str, Any] = {"label": "Gemma 3 270M proposer + solver, one revision, small-model result",
                               "argv": sys.argv[1:] if argv is None else argv, "status": "started",
                               "settings": {k: v for k, v in vars(args).items() if k not in ("out", "work")}}
    code = 1
    try:
        python = rt.worker_python(args.worker_python)
        isolation, attempts = rt.choose_isolation(args.isolation, python)
        results["isolation"] = {"requested": args.isolation, "used": isolation, "attempts": attempts,
                                "worker_python": python}
        fds = rt.raise_fd_limit()
        args.concurrency = rt.safe_concurrency(args.concurrency, fds["soft"])
        results["open_files_limit"] = fds
        arms = {"base": args.model}
        if args.adapter:
            arms["trained"] = merge_adapter(args.model, args.adapter, work / "merged")
            rt.log(f"merged {args.adapter} into {arms['trained']}")
        outcomes = asyncio.run(run_all(args, arms, work, isolation, python))
        rows = [o for o in outcomes if isinstance(o, dict)]
        failures = [f"{type(o).__name__}: {o}" for o in outcomes if isinstance(o, BaseException)]
        for o in outcomes:
            if isinstance(o, BaseException):
                rt.loud(f"a family failed: {type(o).__name__}: {o}")
                traceback.print_exception(o)
        results.update(rows=rows, failures=failures)
        results["summary"] = summarise(rows, args.bootstrap)
        results["status"] = "ok" if not failures else "partial"
        code = 0 if not failures else 1
    except Exception as e:  # noqa: BLE001 - write what we have (device time is scarce), then fail loudly
        results.update(status="error", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-4000:])
        rt.loud(f"h200_eval failed: {results['error']}")
        traceback.print_exc()
    finally:
        sampler.stop()
        u = [s[1] for s in sampler.samples]
        results["gpu"] = {"source": sampler.source, "mean_util": sum(u) / len(u) if u else None, "samples": len(u)}
        results["wall_s"] = round(time.time() - rt.T0, 1)
        rt.write_json(out / "eval_results.json", results)
        rt.log(f"wrote {out / 'eval_results.json'} ({results['status']})")
    return code


if __name__ == "__main__":
    sys.exit(main())
