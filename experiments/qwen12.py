"""Issue 12 on one H200: Qwen2.5-Coder-1.5B-Instruct as frozen solver AND as proposer; SFT data
from the zoo (and best-of-N self samples), LoRA SFT, GRPO with the exact reward, and the transfer
table on the 21 paper-eval families (base / SFT / RL proposer, best zoo harness by score split).

Small-model result: a 1.5B solver and a 1.5B proposer with tiny splits, not the paper's 4B/8B.

Stages (each one resumable from what an earlier run left in WORK/ret, the folder whose files
come back through $OUT):

    sftdata  zoo revisions + self samples on paper-train contexts -> ret/sft.jsonl, ret/sftdata.json
    sft      LoRA SFT (TRL) on ret/sft.jsonl -> ret/sft_adapter/
    grpo     GRPO (harnesslearn.training.grpo.run_grpo, chat form, rewrite prefill) from the SFT
             adapter -> ret/rl_adapter/, ret/grpo.json, ret/rollouts.jsonl
    eval     one revision of the minimal seed per paper-eval family by each proposer, plus the best
             zoo harness by score-split J -> ret/eval_rows.jsonl (one line per finished row)

    PYTHONPATH=/tmp/site:src python3 experiments/qwen12.py run --model DIR --work /tmp/q12w \
        --stages sftdata,sft,grpo,eval
    python3 experiments/qwen12.py collect --work /tmp/q12w --out $OUT     # what comes back
    python3 experiments/qwen12.py restore --work /tmp/q12w --from DIR      # a returned $OUT -> WORK

Each stage has a wall-clock budget (--minutes-*): work is done in waves and no new wave starts when
the last one would not fit, so a stage ends with what finished rather than being killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tarfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exp_runtime as rt  # noqa: E402

rt.ensure_src()

PAPER_TRAIN = ["codeio", "maze", "rotten_oranges", "simple_geometry", "tower_of_hanoi"]
ZOO = ("interpreter_loop", "reason_extract", "self_consistency", "verify_retry", "few_shot")
PART = 15 * 1024 * 1024  # files back through $OUT are split into parts of this size


def now() -> float:
    return time.time()


def jdump(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)


def append_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ----------------------------------------------------------------------------- shared runtime
class Runtime:
    """The solver backend and the sandboxed executor, opened once for all stages."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.solver: Any = None
        self.executor: Any = None

    async def open(self) -> None:
        from harnesslearn.models import load_model
        from harnesslearn.sandbox import ExecutorConfig, build_executor

        a = self.args
        fd = rt.raise_fd_limit()
        conc = rt.safe_concurrency(a.concurrency, fd["soft"])
        rt.log(f"runtime: loading the solver ({a.solver or solver_spec(a)})")
        self.solver = load_model(a.solver or solver_spec(a))
        if hasattr(self.solver, "warm"):
            await asyncio.to_thread(self.solver.warm)
        rt.log(f"runtime: solver loaded; starting the executor (isolation {a.isolation}, {conc} slots)")
        self.executor = build_executor("local", self.solver, ExecutorConfig(isolation=a.isolation), concurrency=conc)
        await self.executor.__aenter__()
        rt.log(f"runtime: solver {self.solver.name} concurrency {conc} isolation {self.executor.isolation}")

    async def close(self) -> None:
        if self.executor is not None:
            await self.executor.aclose()
        if self.solver is not None:
            await self.solver.aclose()

    def budgets(self) -> Any:
        from harnesslearn.sandbox.records import Budgets

        return Budgets(timeout_s=self.args.timeout, max_calls=16, max_tokens=8192)


def solver_spec(a: argparse.Namespace) -> str:
    return f"hf:{a.model}?static_cache={str(a.static_cache).lower()}&max_batch={a.max_batch}"


def renderer(a: argparse.Namespace) -> Any:
    """messages -> prompt text: the model's chat template (``model_io.chat_text``); ``--solver``
    smoke runs without a tokenizer use the plain rendering."""
    if a.solver:
        from harnesslearn.models.common import render_messages

        return render_messages
    from harnesslearn.training.model_io import chat_text

    tok = tokenizer(a.model)
    return lambda m: chat_text(tok, m)


def tokenizer(model_dir: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


async def waves(jobs: list[Any], size: int, deadline: float, run_one: Any, on_done: Any) -> int:
    """Run ``jobs`` ``size`` at a time; start no wave that the last wave's duration says will not
    end before ``deadline``. Returns how many jobs ran."""
    done, last = 0, 0.0
    for i in range(0, len(jobs), size):
        if now() + last > deadline:
            rt.log(f"waves: stopping before job {i} of {len(jobs)} (deadline)")
            break
        t = now()
        results = await asyncio.gather(*(run_one(j) for j in jobs[i:i + size]), return_exceptions=True)
        for j, r in zip(jobs[i:i + size], results, strict=True):
            if isinstance(r, BaseException):
                rt.log(f"job {j} failed: {r!r}")
                continue
            on_done(j, r)
        done += len(results)
        last = now() - t
        rt.log(f"wave {i // size}: {len(results)} jobs in {last:.1f}s")
    return done


async def until(jobs: list[Any], deadline: float, run_one: Any, on_done: Any) -> int:
    """Start every job at once (the solver's batches stay full); record each as it finishes; at
    ``deadline`` cancel the rest. Returns how many finished."""
    tasks = {asyncio.ensure_future(run_one(j)): j for j in jobs}
    finished = 0
    pending = set(tasks)
    while pending:
        left = deadline - now()
        if left <= 0:
            break
        done, pending = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            if t.exception() is not None:
                rt.log(f"job {tasks[t]} failed: {t.exception()!r}")
                continue
            on_done(tasks[t], t.result())
            finished += 1
            rt.log(f"finished {tasks[t]} ({finished}/{len(jobs)})")
    for t in pending:
        t.cancel()
    if pending:
        rt.log(f"deadline: {len(pending)} of {len(jobs)} jobs cancelled")
        await asyncio.gather(*pending, return_exceptions=True)
    return finished


# ----------------------------------------------------------------------------- sftdata
async def stage_sftdata(rtm: Runtime, a: argparse.Namespace, ret: Path) -> None:
    from collections import Counter

    from harnesslearn.harness import load_harness
    from harnesslearn.seeding import child_seed
    from harnesslearn.tasks import load_task
    from harnesslearn.training.zoo_sft import ZooSFTSettings, context_rows, summarise_rows

    render = renderer(a)
    seed_h = load_harness("minimal")
    settings = ZooSFTSettings(n_feedback=4, n_score=a.n_score_sft, samples=a.self_samples, budgets=rtm.budgets(),
                              labels={"solver": "qwen2.5-coder-1.5b-instruct", "proposer": "qwen2.5-coder-1.5b-instruct"})
    tasks = {f: load_task(f"rg:{f}") for f in PAPER_TRAIN}
    jobs = [(f, child_seed(a.seed, fi * 1000 + c)) for c in range(a.contexts_sft) for fi, f in enumerate(PAPER_TRAIN)]
    out = ret / "sft.jsonl"
    out.unlink(missing_ok=True)
    counts: Counter[str] = Counter()
    rows_all: list[dict[str, Any]] = []

    async def one(job: tuple[str, int]) -> Any:
        f, pseed = job
        return await context_rows(tasks[f], seed_h, pseed, rtm.executor, render, settings,
                                  proposer=rtm.solver)

    def done(job: Any, r: Any) -> None:
        rows, c = r
        counts.update(c)
        rows_all.extend(rows)
        append_jsonl(out, rows)

    t0 = now()
    ran = await waves(jobs, a.wave_sft, t0 + a.minutes_sftdata * 60, one, done)
    summary = summarise_rows(rows_all, counts, ran)
    summary.update({"seconds": round(now() - t0, 1), "n_score": a.n_score_sft, "self_samples": a.self_samples,
                    "families": PAPER_TRAIN, "solver": rtm.solver.name})
    jdump(ret / "sftdata.json", summary)
    rt.log(f"sftdata: kept {summary['kept']} of {ran} contexts; interpreter_loop share "
           f"{summary['interpreter_loop_share']:.2f}")


# ----------------------------------------------------------------------------- sft
def stage_sft(a: argparse.Namespace, ret: Path, work: Path) -> None:
    from harnesslearn.training.config import SFTTrainConfig
    from harnesslearn.training.sft import run_sft

    data = ret / "sft.jsonl"
    if not read_jsonl(data):
        raise RuntimeError("no SFT rows: the sftdata stage kept nothing")
    cfg = SFTTrainConfig(model=a.model, data=str(data), output_dir=str(work / "sft"), learning_rate=a.lr_sft,
                         epochs=a.epochs_sft, micro_batch=2, grad_accum=4, max_length=4096, bf16=True,
                         report_to="none", save_steps=10**6, lora_r=32, lora_alpha=64, target_modules=a.targets.split(","))
    t0 = now()
    res = run_sft(cfg)
    shutil.rmtree(ret / "sft_adapter", ignore_errors=True)
    shutil.copytree(res["adapter"], ret / "sft_adapter")
    res["seconds"] = round(now() - t0, 1)
    jdump(ret / "sft.json", res)
    rt.log(f"sft: {res}")


# ----------------------------------------------------------------------------- grpo
def stage_grpo(a: argparse.Namespace, ret: Path, work: Path) -> None:
    from transformers import TrainerCallback

    from harnesslearn.training.config import GRPOTrainConfig
    from harnesslearn.training.grpo import GRPOHooks, run_grpo

    deadline = now() + a.minutes_grpo * 60
    steps: list[dict[str, Any]] = []

    class Stop(TrainerCallback):  # type: ignore[misc]
        t = now()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            dt = now() - Stop.t
            Stop.t = now()
            steps.append({"step": state.global_step, "seconds": round(dt, 1)})
            if now() + dt > deadline:
                control.should_training_stop = True

    class Hooks(GRPOHooks):
        def on_start(self, run: Any) -> None:
            self.run = run
            Stop.t = now()
            run.trainer.add_callback(Stop())

    adapter = ret / "sft_adapter" if (ret / "sft_adapter").is_dir() and not a.grpo_from_base else None
    cfg = GRPOTrainConfig(
        solver=a.solver or solver_spec(a),
        families=PAPER_TRAIN, n_feedback=4, n_score=a.n_score_grpo, n_traces=3, timeout_s=a.timeout, max_calls=16,
        max_tokens_per_problem=8192, isolation=a.isolation, concurrency=a.concurrency, seed=a.seed + 7,
        run_dir=str(work / "grpo_run"), model=a.model, adapter=str(adapter) if adapter else None,
        output_dir=str(work / "grpo"), learning_rate=a.lr_grpo, max_steps=a.max_steps_grpo, micro_batch=8,
        save_steps=10**6, report_to="none", bf16=True, lora_r=32, lora_alpha=64, target_modules=a.targets.split(","),
        num_generations=8, contexts_per_update=a.contexts_per_update, contexts_per_epoch=a.contexts_per_update * a.max_steps_grpo,
        max_completion_length=a.max_tokens, temperature=1.0, beta=0.0, prime="rewrite", form="chat",
        rollouts=str(ret / "rollouts.jsonl"))
    hooks = Hooks()
    t0 = now()
    try:
        res = run_grpo(cfg, hooks=hooks)
        status = "done"
    except Exception:
        res = {"error": traceback.format_exc()}
        status = "failed"
    res.update({"status": status, "seconds": round(now() - t0, 1), "step_seconds": steps,
                "from": "sft_adapter" if adapter else "base", "learning_rate": a.lr_grpo,
                "contexts_per_update": a.contexts_per_update, "num_generations": 8, "n_score": a.n_score_grpo})
    jdump(ret / "grpo.json", res)
    if status == "done":
        shutil.rmtree(ret / "rl_adapter", ignore_errors=True)
        shutil.copytree(res["adapter"], ret / "rl_adapter")
    rt.log(f"grpo: {status} steps={res.get('steps')} in {res['seconds']}s")


# ----------------------------------------------------------------------------- eval
def merge(model_dir: str, adapter: Path, dst: Path) -> str:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if (dst / "config.json").is_file():
        return str(dst)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    merged.save_pretrained(str(dst))
    tokenizer(model_dir).save_pretrained(str(dst))
    del base, merged
    return str(dst)


async def stage_eval(rtm: Runtime, a: argparse.Namespace, ret: Path, work: Path) -> None:
    from harnesslearn import zoo
    from harnesslearn.edits import apply_proposal
    from harnesslearn.evaluation import evaluate, improves
    from harnesslearn.harness import Harness, load_harness
    from harnesslearn.models import load_model
    from harnesslearn.proposer import build_messages, candidate_seed, sample_one
    from harnesslearn.tasks import load_task
    from harnesslearn.tasks.families import family_set

    deadline = now() + a.minutes_eval * 60
    families = a.families.split(",") if a.families else family_set("paper-eval")
    seed_h = load_harness("minimal")
    budgets = rtm.budgets()
    arms: dict[str, Any] = {}
    for arm in a.arms.split(","):
        if arm == "zoo":
            arms[arm] = None
            continue
        if a.solver:  # smoke run: every proposer arm is the given callable
            arms[arm] = load_model(a.solver)
            continue
        if arm == "base":
            path = a.model
        else:
            ad = ret / f"{arm}_adapter"
            if not ad.is_dir():
                rt.log(f"eval: no {ad}, arm {arm} skipped")
                continue
            path = await asyncio.to_thread(merge, a.model, ad, work / f"merged_{arm}")
        arms[arm] = load_model(f"hf:{path}?dtype=float32&max_batch=128")
    rows_path = ret / "eval_rows.jsonl"
    have = {(r["arm"], r["family"]) for r in read_jsonl(rows_path)}
    seeds: dict[str, Any] = {}

    async def seed_evals(fam: str) -> Any:
        if fam not in seeds:
            task = load_task(f"rg:{fam}")
            fb, sc, te = await asyncio.gather(*(evaluate(seed_h, task, sp, n, a.eval_seed, rtm.executor, budgets,
                                                         progress=False)
                                                for sp, n in (("feedback", 4), ("score", a.n_score_eval),
                                                              ("test", a.n_test_eval))))
            seeds[fam] = (task, fb, sc, te)
        return seeds[fam]

    def scores(ev: Any) -> list[float]:
        return [p.score for p in ev.problems if p.score is not None]

    async def one(job: tuple[str, str]) -> dict[str, Any]:
        arm, fam = job
        t = now()
        task, fb, sc, te = await seed_evals(fam)
        row: dict[str, Any] = {"arm": arm, "family": fam, "seed_score_J": sc.J, "seed_test_J": te.J,
                               "seed_scores": scores(te)}
        cands: list[tuple[str, Harness, str]] = []
        if arm == "zoo":
            for name in zoo.names(task):
                h = zoo.build(name, task, a.eval_seed)
                cands.append((name, h, ""))
            row.update(proposals=len(cands), parsed=len(cands), produced=len(cands), valid=len(cands))
        else:
            msgs = build_messages(task, seed_h, fb, n_traces=3, rng_seed=a.eval_seed, prime="rewrite")
            outs = await asyncio.gather(*(sample_one(arms[arm], msgs, temperature=0.8, max_tokens=a.max_tokens,
                                                     seed=candidate_seed(a.eval_seed, 0, i)) for i in range(a.k)))
            eds = [apply_proposal(seed_h.source, text) for text, _, _ in outs]
            reasons: dict[str, int] = {}
            for i, ed in enumerate(eds):
                if ed.valid and ed.source is not None:
                    cands.append((f"p{i}", Harness(ed.source, parent_id=seed_h.id), outs[i][0]))
                else:
                    reasons[str(ed.reason)] = reasons.get(str(ed.reason), 0) + 1
            row.update(proposals=len(eds), parsed=sum(e.parsed for e in eds), produced=sum(e.produced for e in eds),
                       valid=len(cands), invalid_reasons=reasons,
                       proposal_texts=[o[0][-3000:] for o in outs])
        evs = await asyncio.gather(*(evaluate(h, task, "score", a.n_score_eval, a.eval_seed, rtm.executor, budgets,
                                              progress=False) for _, h, _ in cands))
        row["candidate_score_J"] = {name: ev.J for (name, _, _), ev in zip(cands, evs, strict=True)}
        row["candidate_completion_rate"] = {name: ev.completion_rate for (name, _, _), ev in zip(cands, evs, strict=True)}
        best: tuple[str, Harness, float] | None = None
        ref = None if arm == "zoo" else sc.J  # the zoo row is the best zoo harness, whatever the seed scored
        for (name, h, _), ev in zip(cands, evs, strict=True):
            if improves(ev.J, ref if best is None else best[2]):
                best = (name, h, ev.J)
        if best is None:
            row.update(picked="seed", score_J=sc.J, test_J=te.J, after_scores=scores(te), improved=False)
        else:
            tev = await evaluate(best[1], task, "test", a.n_test_eval, a.eval_seed, rtm.executor, budgets, progress=False)
            row.update(picked=best[0], score_J=best[2], test_J=tev.J, after_scores=scores(tev), improved=True,
                       picked_source=best[1].source, test_completion_rate=tev.completion_rate)
        row["wall_s"] = round(now() - t, 1)
        return row

    jobs = [(arm, fam) for fam in families for arm in arms if (arm, fam) not in have]
    await until(jobs, deadline, one, lambda j, r: append_jsonl(rows_path, [r]))
    for b in arms.values():
        if b is not None:
            await b.aclose()


# ----------------------------------------------------------------------------- driver
def run(a: argparse.Namespace) -> None:
    rt.restart_clock()
    work = Path(a.work)
    ret = work / "ret"
    ret.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HARNESSLEARN_CACHE_DIR", "/tmp/hlcache")
    stages = a.stages.split(",")
    status_path = ret / "status.json"
    status = json.loads(status_path.read_text()) if status_path.is_file() else {}

    def mark(stage: str, state: str, **extra: Any) -> None:
        status[stage] = {"state": state, "t": round(now() - rt.T0, 1), **extra}
        jdump(status_path, status)

    async def async_stages(names: list[str]) -> None:
        rtm = Runtime(a)
        mark("runtime", "opening")  # a stall before the first stage shows in status.json (2026-12-03: 6.5 min, no line)
        await rtm.open()
        mark("runtime", "open")
        try:
            for s in names:
                if status.get(s, {}).get("state") == "done" and not a.force:
                    continue
                mark(s, "running")
                try:
                    await (stage_sftdata(rtm, a, ret) if s == "sftdata" else stage_eval(rtm, a, ret, work))
                    mark(s, "done")
                except Exception:
                    mark(s, "failed", error=traceback.format_exc()[-3000:])
                    rt.log(traceback.format_exc())
        finally:
            await rtm.close()

    i = 0
    while i < len(stages):
        s = stages[i]
        if s in ("sftdata", "eval"):
            group = [s]
            while i + 1 < len(stages) and stages[i + 1] in ("sftdata", "eval"):
                i += 1
                group.append(stages[i])
            asyncio.run(async_stages(group))
        else:
            if status.get(s, {}).get("state") == "done" and not a.force:
                i += 1
                continue
            mark(s, "running")
            try:
                (stage_sft if s == "sft" else stage_grpo)(a, ret, work)
                mark(s, "done")
            except Exception:
                mark(s, "failed", error=traceback.format_exc()[-3000:])
                rt.log(traceback.format_exc())
            import gc

            gc.collect()
            try:
                import torch

                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001
                pass
        i += 1
    mark("all", "done")


def collect(a: argparse.Namespace) -> None:
    """Pack WORK/ret into $OUT: small files in results.tgz, each adapter as a tar split in parts."""
    ret, out = Path(a.work) / "ret", Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if not ret.is_dir():
        print("nothing to collect")
        return
    with tarfile.open(out / "results.tgz", "w:gz") as tf:
        for p in sorted(ret.iterdir()):
            if p.is_file():
                tf.add(p, arcname=p.name)
        log = Path(a.work) / "log.txt"
        if log.is_file():
            tf.add(log, arcname="log.txt")
    for ad in ("sft_adapter", "rl_adapter"):
        d = ret / ad
        if not d.is_dir() or a.skip_adapters:
            continue
        tar = Path(a.work) / f"{ad}.tar"
        with tarfile.open(tar, "w") as tf:
            tf.add(d, arcname=ad)
        data = tar.read_bytes()
        for k in range(0, len(data), PART):
            (out / f"{ad}.tar.{k // PART:02d}").write_bytes(data[k:k + PART])
    print("collected:", sorted(p.name for p in out.iterdir()))


def restore(a: argparse.Namespace) -> None:
    """A returned $OUT folder -> WORK/ret (the resume path on a fresh machine)."""
    src, ret = Path(a.src), Path(a.work) / "ret"
    ret.mkdir(parents=True, exist_ok=True)
    if (src / "results.tgz").is_file():
        with tarfile.open(src / "results.tgz") as tf:
            tf.extractall(ret, filter="data")
    for ad in ("sft_adapter", "rl_adapter"):
        parts = sorted(src.glob(f"{ad}.tar.*"))
        if parts:
            tar = Path(a.work) / f"{ad}.tar"
            tar.write_bytes(b"".join(p.read_bytes() for p in parts))
            with tarfile.open(tar) as tf:
                tf.extractall(ret, filter="data")
    print("restored:", sorted(p.name for p in ret.iterdir()))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--model", required=True, help="bf16 transformers folder of Qwen2.5-Coder-1.5B-Instruct")
    r.add_argument("--work", default="/tmp/q12w")
    r.add_argument("--solver", default="", help="override the solver (and proposer) spec, e.g. a python: callable "
                   "for a smoke run without a model")
    r.add_argument("--stages", default="sftdata,sft,grpo,eval")
    r.add_argument("--force", action="store_true", help="rerun stages already marked done")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--isolation", default="auto")
    r.add_argument("--concurrency", type=int, default=192)
    r.add_argument("--max-batch", type=int, default=256)
    r.add_argument("--static-cache", action=argparse.BooleanOptionalAction, default=True)
    r.add_argument("--timeout", type=float, default=60.0, help="per-problem solve() limit, seconds")
    r.add_argument("--max-tokens", type=int, default=768, help="proposer completion limit (eval, GRPO, self samples)")
    r.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj", help="LoRA target modules (r=32)")
    r.add_argument("--contexts-sft", type=int, default=6, help="contexts per paper-train family")
    r.add_argument("--wave-sft", type=int, default=10)
    r.add_argument("--n-score-sft", type=int, default=8)
    r.add_argument("--self-samples", type=int, default=4)
    r.add_argument("--minutes-sftdata", type=float, default=4.0)
    r.add_argument("--lr-sft", type=float, default=1e-4)
    r.add_argument("--epochs-sft", type=float, default=3.0)
    r.add_argument("--minutes-grpo", type=float, default=5.0)
    r.add_argument("--grpo-from-base", action="store_true")
    r.add_argument("--lr-grpo", type=float, default=2e-5)
    r.add_argument("--max-steps-grpo", type=int, default=12)
    r.add_argument("--contexts-per-update", type=int, default=4)
    r.add_argument("--n-score-grpo", type=int, default=4)
    r.add_argument("--minutes-eval", type=float, default=8.0)
    r.add_argument("--arms", default="zoo,base,sft,rl")
    r.add_argument("--families", default="", help="comma list (default: the 21 paper-eval families)")
    r.add_argument("--k", type=int, default=4, help="proposals per (arm, family)")
    r.add_argument("--n-score-eval", type=int, default=6)
    r.add_argument("--n-test-eval", type=int, default=12)
    r.add_argument("--eval-seed", type=int, default=1234)
    c = sub.add_parser("collect")
    c.add_argument("--work", default="/tmp/q12w")
    c.add_argument("--out", required=True)
    c.add_argument("--skip-adapters", action="store_true")
    s = sub.add_parser("restore")
    s.add_argument("--work", default="/tmp/q12w")
    s.add_argument("--from", dest="src", required=True)
    a = p.parse_args(argv)
    {"run": run, "collect": collect, "restore": restore}[a.cmd](a)


if __name__ == "__main__":
    main()
