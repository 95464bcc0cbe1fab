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

Writes ``eval_results.json`` into ``--out``, and rewrites it after every finished (arm, family)
run with ``status: "running"``, so that a run killed part-way (a device time limit) keeps what
finished. ``--summarise-only WORK_DIR`` rebuilds ``eval_results.json`` from the run stores of an
earlier run's work dir (``WORK_DIR/{arm}/{family}/runs.sqlite``) without loading any model:

    python3 experiments/h200_eval.py --summarise-only /tmp/h200_eval_work --out experiments/results/h200

Both paths build each row with ``family_row`` and the summary with ``summarise``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import exp_runtime as rt  # noqa: E402
import exp_stats as st  # noqa: E402

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


def test_scores(store: Any, harness_id: str, task_spec: str, n: int, seed: int) -> list[float]:
    """Per-problem test-split scores of ``harness_id`` recorded in an adapt run store."""
    row = store.find_evaluation("independent", harness_id, task_spec, "test", n, seed)
    if row is None:
        raise RuntimeError(f"no test evaluation of {harness_id[:12]} in {store.run_dir}")
    ev = store.load_evaluation(row.id)
    return [p.score for p in ev.problems if p.score is not None]


def proposal_counts(store: Any) -> dict[str, Any]:
    props = store.proposals("independent")
    reasons: dict[str, int] = {}
    for p in props:
        if not p.valid:
            reasons[str(p.reason)] = reasons.get(str(p.reason), 0) + 1
    return {"proposals": len(props), "parsed": sum(p.parsed for p in props),
            "produced": sum(p.produced for p in props), "valid": sum(p.valid for p in props),
            "invalid_reasons": reasons}


def family_row(arm: str, run_dir: Path) -> dict[str, Any]:
    """One (arm, family) result row, read back from the finished ``adapt`` run in ``run_dir``:
    the adapt result recorded there, the per-problem test scores of the seed and of the selected
    harness, and the proposal counts. Raises RuntimeError when the run there did not finish."""
    from harnesslearn.settings import AdaptSettings
    from harnesslearn.store import Store

    with Store.open(run_dir, create=False) as store:
        run = store.run("independent")
        if run is None or run.status != "done" or not isinstance(run.result, dict):
            raise RuntimeError(f"no finished independent adapt run in {run_dir}")
        res, cfg = run.result, run.config
        settings = AdaptSettings.from_json(cfg)
        n, seed = settings.n_test, settings.seed
        row = {"arm": arm, "family": run_dir.name, "task": cfg["task"], "seed_test_J": res["seed_test_J"],
               "test_J": res["test_J"], "seed_score_J": res["seed_score_J"], "score_J": res["score_J"],
               "improved": res["best_harness_id"] != res["seed_harness_id"],
               "best_harness_id": res["best_harness_id"],
               "seed_scores": test_scores(store, res["seed_harness_id"], cfg["task"], n, seed),
               "after_scores": test_scores(store, res["best_harness_id"], cfg["task"], n, seed),
               **proposal_counts(store), "adapt_wall_s": res.get("wall_s")}
    return row


def rows_from_work(work: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every ``WORK/{arm}/{family}`` run store's row, and one line per store that has none."""
    rows, failures = [], []
    for arm_dir in sorted(d for d in work.iterdir() if d.is_dir() and d.name != "merged"):
        for fam_dir in sorted(d for d in arm_dir.iterdir() if (d / "runs.sqlite").is_file()):
            try:
                rows.append(family_row(arm_dir.name, fam_dir))
            except (RuntimeError, KeyError, ValueError) as e:  # an unfinished or foreign store: say so, go on
                failures.append(f"{arm_dir.name}/{fam_dir.name}: {type(e).__name__}: {e}")
    if not rows and not failures:
        raise FileNotFoundError(f"no WORK/ARM/FAMILY/runs.sqlite under {work}")
    return rows, failures


def store_settings(work: Path) -> dict[str, Any]:
    """The adapt settings that all run stores under ``work`` share (from their recorded config)."""
    from harnesslearn.store import Store

    common: dict[str, Any] | None = None
    for db in sorted(work.glob("*/*/runs.sqlite")):
        with Store.open(db.parent, create=False) as store:
            run = store.run("independent")
        cfg = {k: v for k, v in (run.config if run else {}).items() if k not in ("task", "proposer")}
        common = cfg if common is None else {k: v for k, v in common.items() if cfg.get(k) == v}
    return common or {}


class Results:
    """``eval_results.json``, rewritten after every change so that a killed run keeps its rows."""

    def __init__(self, path: Path, n_boot: int, **fields: Any) -> None:
        self.path, self.n_boot = path, n_boot
        self.data: dict[str, Any] = {"status": "started", "rows": [], "failures": [], **fields}

    def write(self) -> None:
        self.data["wall_s"] = round(time.time() - rt.T0, 1)
        rt.write_json(self.path, self.data)

    def add_rows(self, rows: list[dict[str, Any]], failures: Sequence[str] = ()) -> None:
        """Add finished rows (and failure lines); re-summarise (a few ms: numpy bootstrap); write."""
        self.data["rows"] += rows
        self.data["failures"] += list(failures)
        self.data["summary"] = summarise(self.data["rows"], self.n_boot)
        if self.data["status"] == "started":
            self.data["status"] = "running"
        self.write()


async def one_family(arm: str, family: str, proposer: Any, solver: Any, executor: Any, args: argparse.Namespace,
                     work: Path, results: Results) -> dict[str, Any]:
    from harnesslearn.adapt import adapt
    from harnesslearn.tasks import load_task

    task = load_task(family if ":" in family else f"rg:{family}")
    run_dir = work / arm / task.family
    t = time.time()
    res = await adapt(task, solver, proposer, adapt_settings(args), run_dir=run_dir, progress=False,
                      executor=executor)
    row = {**family_row(arm, run_dir), "wall_s": round(time.time() - t, 1)}
    rt.log(f"{arm:7s} {task.family:18s} seed test J={res.seed_test_J} -> {res.test_J} "
           f"({res.valid_proposals}/{res.proposals} valid)")
    results.add_rows([row])
    return row


def adapt_settings(args: argparse.Namespace) -> Any:
    """The settings of every (arm, family) run: one revision step of ``--candidates`` proposals."""
    from harnesslearn.proposer import PRIMES
    from harnesslearn.sandbox.records import Budgets
    from harnesslearn.settings import AdaptSettings, choose

    return AdaptSettings(strategy="independent", rounds=1, candidates=args.candidates, seed=args.seed,
                         n_feedback=args.n_feedback, n_score=args.n_score, n_test=args.n_test,
                         budgets=Budgets(timeout_s=args.timeout_s), temperature=args.temperature,
                         max_tokens=args.max_tokens, prime=choose(args.prime, PRIMES, "--prime"))


async def warm_seed(family: str, executor: Any, args: argparse.Namespace) -> None:
    from harnesslearn.evaluation import evaluate
    from harnesslearn.sandbox.records import Budgets
    from harnesslearn.tasks import load_task
    from harnesslearn.zoo import default_seed

    task = load_task(family if ":" in family else f"rg:{family}")
    seed_h = default_seed(task)
    budgets = Budgets(timeout_s=args.timeout_s)
    await asyncio.gather(*(evaluate(seed_h, task, split, n, args.seed, executor, budgets, progress=False)
                           for split, n in (("feedback", args.n_feedback), ("score", args.n_score),
                                            ("test", args.n_test))))


async def run_all(args: argparse.Namespace, arms: dict[str, str], work: Path,
                  results: Results) -> list[dict[str, Any] | BaseException]:
    from harnesslearn.models import load_model
    from harnesslearn.runtime import SolverRuntime
    from harnesslearn.sandbox import ExecutorConfig

    solver = load_model(args.solver or f"hf:{args.model}?max_batch={args.solver_max_batch}",
                        cache_path=str(work / "solver_cache.sqlite"))
    opts = f"?dtype={args.proposer_dtype}&max_batch=64"
    proposers = {arm: load_model(f"hf:{path}{opts}", cache=False) for arm, path in arms.items()}
    runtime = SolverRuntime(solver, config=ExecutorConfig(isolation=args.isolation, python=args.worker_python),
                            concurrency=args.concurrency, warm=False)
    await runtime.__aenter__()  # the preflight self-test: refuses to run when the isolation does not hold
    executor = runtime.executor
    assert executor is not None
    results.data["isolation"] = rt.isolation_record(args.isolation, executor.isolation, args.worker_python)
    try:
        # the seed's evaluations first, once: both arms then read them from the solver's response cache
        # (concurrent identical requests would both reach the model, and batched decoding is not bit-exact)
        warm = await asyncio.gather(*(warm_seed(fam, executor, args) for fam in args.families.split(",")),
                                    return_exceptions=True)
        for fam, w in zip(args.families.split(","), warm, strict=True):
            if isinstance(w, BaseException):  # only an optimisation: the arms evaluate the seed themselves
                rt.loud(f"seed warm-up of {fam} failed ({type(w).__name__}: {w}); its arms may score the seed apart")
        rt.log("seed harness evaluated on every family (feedback, score, test splits)")
        jobs = [one_family(arm, fam, proposers[arm], solver, executor, args, work, results)
                for arm in arms for fam in args.families.split(",")]
        # one family's failure (an infrastructure fault, a bug) must not discard the others' results
        return list(await asyncio.gather(*jobs, return_exceptions=True))
    finally:
        t = time.time()
        await runtime.aclose()  # the executor, then the solver
        for m in proposers.values():
            await m.aclose()
        rt.log(f"executor and models closed ({time.time() - t:.1f}s)")


def summarise(rows: list[dict[str, Any]], n_boot: int) -> dict[str, Any]:
    """Per-arm validity and J (seed vs. after one revision) with bootstrap intervals. Rows are taken
    in (arm, family) order, so the intervals do not depend on the order the families finished in."""
    rows = sorted(rows, key=lambda r: (r["arm"], r["family"]))
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
    p.add_argument("--model", default=None, help="Gemma 3 270M transformers folder (base proposer and solver); "
                   "required unless --summarise-only")
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
    p.add_argument("--isolation", default="auto", choices=rt.ISOLATIONS,
                   help="sandbox isolation (auto: bwrap, else landlock; none only when asked for)")
    p.add_argument("--worker-python", default=None)
    p.add_argument("--concurrency", type=int, default=128, help="sandboxed runs in flight")
    p.add_argument("--solver", default=None, help="solver spec (default: hf:MODEL?max_batch=N)")
    p.add_argument("--solver-max-batch", type=int, default=256)
    p.add_argument("--proposer-dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--work", default="/tmp/h200_eval_work")
    p.add_argument("--cpu", action="store_true", help="CPU smoke run")
    p.add_argument("--summarise-only", default=None, metavar="WORK_DIR",
                   help="load no model: rebuild eval_results.json from the run stores of an earlier run's work dir")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    if not args.model and not args.summarise_only:
        p.error("--model is required (unless --summarise-only WORK_DIR)")
    return args


def summarise_only(args: argparse.Namespace, results: Results) -> int:
    """Rebuild the results from ``args.summarise_only``'s run stores (no model, no executor)."""
    work = Path(args.summarise_only)
    rows, failures = rows_from_work(work)
    results.data["settings"] = {**store_settings(work), "bootstrap": args.bootstrap}
    results.data["summarised_from"] = str(work)
    results.add_rows(rows, failures)
    results.data["status"] = "ok" if not failures else "partial"
    rt.log(f"{len(rows)} (arm, family) runs read from {work}; {len(failures)} without a finished run")
    return 0 if not failures else 1


def main(argv: list[str] | None = None) -> int:
    rt.restart_clock()
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = Results(out / "eval_results.json", args.bootstrap,
                      label="Gemma 3 270M proposer + solver, one revision, small-model result",
                      argv=sys.argv[1:] if argv is None else argv,
                      settings={k: v for k, v in vars(args).items() if k not in ("out", "work")})
    if args.summarise_only:
        code = summarise_only(args, results)
        results.write()
        rt.log(f"wrote {results.path} ({results.data['status']})")
        return code
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sampler = rt.GpuSampler(interval=0.5).start()
    code = 1
    try:
        fds = rt.raise_fd_limit()
        args.concurrency = rt.safe_concurrency(args.concurrency, fds["soft"])
        results.data["open_files_limit"] = fds
        arms = {"base": args.model}
        if args.adapter:
            arms["trained"] = merge_adapter(args.model, args.adapter, work / "merged")
            rt.log(f"merged {args.adapter} into {arms['trained']}")
        outcomes = asyncio.run(run_all(args, arms, work, results))
        failures = [f"{type(o).__name__}: {o}" for o in outcomes if isinstance(o, BaseException)]
        for o in outcomes:
            if isinstance(o, BaseException):
                rt.loud(f"a family failed: {type(o).__name__}: {o}")
                traceback.print_exception(o)
        results.add_rows([], failures)  # the rows themselves were added as each family finished
        results.data["status"] = "ok" if not failures else "partial"
        code = 0 if not failures else 1
    except Exception as e:  # noqa: BLE001 - write what we have (device time is scarce), then fail loudly
        results.data.update(status="error", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-4000:])
        rt.loud(f"h200_eval failed: {results.data['error']}")
        traceback.print_exc()
    finally:
        sampler.stop()
        u = [s[1] for s in sampler.samples]
        results.data["gpu"] = {"source": sampler.source, "mean_util": sum(u) / len(u) if u else None,
                               "samples": len(u)}
        results.write()
        rt.log(f"wrote {results.path} ({results.data['status']})")
    return code


if __name__ == "__main__":
    sys.exit(main())
