"""The stages of the transfer experiment, each reading and writing files under ``ret`` (the folder
that comes back from the GPU machine) and each stopping at its deadline with what finished:

    sftdata  zoo revisions + best-of-N self samples of the seed (source zoo), or the proposer's own
             revisions of parents drawn from a pool (source self: expert iteration), on paper-train
             contexts, kept by the one keep rule -> ret/sft.jsonl (a line per kept row, as each
             context finishes), ret/sftdata.json; resumable (ret/sftdata_jobs.jsonl: the contexts
             done; ret/sftdata_pool.jsonl: self's winners)
    sft      LoRA SFT (TRL) on ret/sft.jsonl -> ret/sft_adapter/, ret/sft.json
    grpo     GRPO with the exact reward (training.grpo.run_grpo, chat form, rewrite prefill), from the
             SFT adapter, resumable -> ret/grpo/state/ (adapter, state.json, updates.jsonl),
             ret/grpo.json, ret/rollouts.jsonl.gz
    eval     one revision of the minimal seed per unseen family by each proposer arm (base, sft, rl, and
             X_mem shown the shipped memory), each an ``adapt`` run (independent, K proposals) into
             WORK/eval_runs/ARM/FAMILY, and the best zoo harness by score split -> ret/eval_rows.jsonl
             (a line per finished row)
    musique  R sequential rounds against the best of R independent proposals and their oracle, per
             proposer arm, EM and F1 (``musique.py``) -> ret/musique_rows.jsonl

Each stage returns a dict for ``status.json``: its state (``done``, ``partial`` when its deadline
cut it short, ``skipped`` with a reason) and its counts.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from harnesslearn.errors import UserError
from harnesslearn.models.base import ModelBackend
from harnesslearn.runtime import SolverRuntime, served_limit
from harnesslearn.transfer.deadline import StageCounts, deadline_callback, run_until
from harnesslearn.transfer.settings import TransferSettings

SOLVER_NAME = "qwen2.5-coder-1.5b-instruct"


# ----------------------------------------------------------------------------- files
def write_json(path: Path, obj: Any) -> None:
    from harnesslearn.fsutil import atomic_write_text

    atomic_write_text(path, json.dumps(obj, indent=1, default=str) + "\n")


def append_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    from harnesslearn.fsutil import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ----------------------------------------------------------------------------- engines
def solver_backend(s: TransferSettings, *, lora: dict[str, str] | None = None, memory: float = 0.85,
                   log: str = "vllm") -> ModelBackend:
    """The solver of a stage: ``s.solver`` if given, else the model on the engine (vLLM serves LoRA
    adapters by name beside it; its share of GPU memory is ``memory``)."""
    from harnesslearn.models import load_model

    if s.solver:
        return load_model(s.solver, concurrency=served_limit(s.solver, s.runtime.concurrency))
    if s.engine == "vllm":
        return load_model(f"vllm:{s.model}", gpu_memory_utilization=memory, max_num_seqs=512,
                          lora=",".join(f"{k}={v}" for k, v in (lora or {}).items()) or None,
                          log=str(Path(s.work) / f"{log}.log"))
    return load_model(f"hf:{s.model}", max_batch=256)


def renderer(s: TransferSettings) -> Any:
    """messages -> the prompt text the proposer continues: the model's own chat template."""
    from transformers import AutoTokenizer

    from harnesslearn.training.model_io import chat_text

    tok = AutoTokenizer.from_pretrained(s.model)
    return lambda m: chat_text(tok, m)


def runtime(s: TransferSettings, solver: ModelBackend) -> SolverRuntime:
    """The stage's solver and sandbox. With ``runtime.executor`` = ``shards:K`` the shards build their own
    solver clients from ``s.solver`` (a spec), so that spec is what the runtime gets."""
    if s.runtime.executor != "local":
        if not s.solver:
            raise UserError(f"runtime.executor {s.runtime.executor} needs solver (an openai: spec of a running server)")
        return SolverRuntime.of(s.solver, s.runtime, verbose=True)
    return SolverRuntime.of(solver, s.runtime, verbose=True)


def state_of(counts: Any) -> str:
    return "partial" if counts.partial else "done"


# ----------------------------------------------------------------------------- sftdata
async def sftdata(s: TransferSettings, ret: Path) -> dict[str, Any]:
    """The SFT rows of ``sftdata.source`` (``zoo_sft``): the zoo arm revises the minimal seed with the zoo files
    and best-of-N proposer samples; self (expert iteration) samples the proposer on a parent drawn per context from
    the pool (the seed, the zoo harnesses, the family's earlier winners: the kept harnesses of ``ret/sft.jsonl``,
    listed in ``ret/sftdata_pool.jsonl`` as their contexts finish, so which winners a context may draw depends on
    what finished before it started). Resumable: each finished context is recorded in ``ret/sftdata_jobs.jsonl``
    after its rows, and a later run (the stage is ``partial`` until every context is done) skips those contexts;
    ``force`` starts over; a ``ret`` holding rows of the other source is refused."""
    from harnesslearn import zoo
    from harnesslearn.harness import load_harness
    from harnesslearn.propose.prompt import load_prompt_dir
    from harnesslearn.seeding import child_seed
    from harnesslearn.tasks import load_task
    from harnesslearn.taxonomy import runs_solver_code
    from harnesslearn.training.keep import KeepRule
    from harnesslearn.training.zoo_sft import (
        ZOO_NAMES,
        ZooSFTSettings,
        context_rows,
        draw_parent,
        parent_pool,
        summarise_rows,
        winner_record,
    )

    t0 = time.time()
    d = s.sftdata
    out, log, pool_path = ret / "sft.jsonl", ret / "sftdata_jobs.jsonl", ret / "sftdata_pool.jsonl"
    if s.force:
        for f in (out, log, pool_path):
            f.unlink(missing_ok=True)
    done_jobs = read_jsonl(log)
    other = {j.get("source", "zoo") for j in done_jobs} - {d.source}
    if other:
        raise UserError(f"sftdata: {log} holds contexts of source {', '.join(sorted(other))}, not {d.source}: "
                        "rows of two arms would mix in one sft.jsonl (--force starts over; or another --work)")
    render = renderer(s)
    seed_h = load_harness("minimal")
    zoo_names = tuple(n for n in ZOO_NAMES if not (d.hold_out_loop and runs_solver_code(zoo.source(n))))
    rule = KeepRule(margin=d.margin, drop_copies=d.source == "self", prompt_dir=s.proposer.prompt_dir,
                    hold_out_loop=d.hold_out_loop)
    settings = ZooSFTSettings(splits=d.splits, samples=d.self_samples, budgets=s.budgets,
                              proposer=s.proposer.with_(format=s.training_format), rule=rule,
                              zoo_names=zoo_names if d.source == "zoo" else (),
                              prompts=load_prompt_dir(s.proposer.prompt_dir) if s.proposer.prompt_dir else {},
                              labels={"solver": s.solver or SOLVER_NAME, "proposer": s.model})
    tasks = {f: load_task(f"rg:{f}") for f in s.families}
    finished = {(j["family"], j["seed"]) for j in done_jobs}
    kept = [r for r in read_jsonl(out) if (r["provenance"]["family"], r["provenance"]["seed"]) in finished]
    write_jsonl(out, kept)  # rows of a context cut off before its record are dropped: it runs again
    winners = [w for w in read_jsonl(pool_path) if (w["family"], w["seed"]) in finished]
    write_jsonl(pool_path, winners)
    counts: Counter[str] = Counter()
    for j in done_jobs:
        counts.update(j["counts"])
    jobs = [(f, child_seed(s.seed, fi * 1000 + c)) for c in range(d.contexts) for fi, f in enumerate(s.families)]
    todo = [j for j in jobs if j not in finished]

    def done(job: Any, r: Any) -> None:
        rows, c, parent = r
        counts.update(c)
        kept.extend(rows)
        append_jsonl(out, rows)
        if d.source == "self":
            won = [winner_record(row) for row in rows]
            winners.extend(won)
            append_jsonl(pool_path, won)
        append_jsonl(log, [{"family": job[0], "seed": job[1], "kept": len(rows), "counts": dict(c),
                            "source": d.source, "parent": parent}])

    n = StageCounts()
    if todo:
        async with runtime(s, solver_backend(s, log="vllm-sftdata")) as rt:
            proposer = rt.solver  # the untrained proposer is the solver model itself

            async def one(job: tuple[str, int]) -> Any:
                f, pseed = job
                name, parent = "minimal", seed_h
                if d.source == "self":  # an empty pool (winners only, none yet): the seed
                    pool = parent_pool(tasks[f], pseed, seed_h, d.parents, winners, hold_out_loop=d.hold_out_loop)
                    name, parent = draw_parent(pool, pseed) if pool else (name, parent)
                rows, c = await context_rows(tasks[f], parent, pseed, rt.sandbox, render, settings,
                                             proposer=proposer, parent_name=name)
                return rows, c, name

            n = await run_until(todo, t0 + d.minutes * 60, one, done, concurrency=d.in_flight, label="sftdata")
    recorded = {(j["family"], j["seed"]): j for j in read_jsonl(log)}
    contexts = sum(j in recorded for j in jobs)  # of this plan (a log of a larger plan may hold more)
    summary = summarise_rows(kept, counts, contexts, per_context=[recorded[j]["kept"] for j in jobs if j in recorded])
    by_parent: dict[str, list[int]] = {}
    for job in jobs:
        if job in recorded:
            kind = str(recorded[job].get("parent") or "minimal").split(":")[0]
            by_parent.setdefault(kind, []).append(recorded[job]["kept"])
    summary.update(source=d.source, margin=d.margin, parents=list(d.parents) if d.source == "self" else ["seed"],
                   hold_out_loop=d.hold_out_loop, prompt_dir=s.proposer.prompt_dir,
                   yield_per_parent={k: {"contexts": len(v), "kept": sum(v)} for k, v in sorted(by_parent.items())},
                   seconds=round(time.time() - t0, 1), n_score=d.splits.n_score, self_samples=d.self_samples,
                   families=list(s.families), solver=s.solver or SOLVER_NAME, counts_jobs=n.as_dict(),
                   contexts_planned=len(jobs), rows_per_context=round(len(kept) / contexts, 3) if contexts else None)
    write_json(ret / "sftdata.json", summary)
    return {"state": "done" if contexts == len(jobs) else "partial", **n.as_dict(), "kept": summary["kept"],
            "contexts_done": contexts, "contexts_planned": len(jobs)}


# ----------------------------------------------------------------------------- sft
def sft(s: TransferSettings, ret: Path, work: Path) -> dict[str, Any]:
    from harnesslearn.training.config import SFTTrainConfig
    from harnesslearn.training.sft import SFTDiverged, run_sft
    from harnesslearn.training.zoo_sft import loop_row

    data = ret / "sft.jsonl"
    rows = read_jsonl(data)
    held_out = 0
    if s.sft.hold_out_loop:  # the control trains on the rows without the held-out pattern
        kept = [r for r in rows if not loop_row(r)]
        held_out, data = len(rows) - len(kept), work / "sft_hold_out_loop.jsonl"
        write_jsonl(data, kept)
        rows = kept
    if not rows:
        return {"state": "skipped", "reason": "the sftdata stage kept no rows" + (
            f" ({held_out} held out: they run solver-written code)" if held_out else "")}
    t0 = time.time()
    cfg = SFTTrainConfig(model=s.model, data=str(data), output_dir=str(work / "sft"), lora=s.lora,
                         trainer=s.sft.trainer.with_(bf16=not s.cpu, use_cpu=s.cpu), max_length=s.sft.max_length,
                         max_same_completion=s.sft.max_same_completion)
    tries: list[dict[str, Any]] = []
    while True:  # a run that diverges (a non-finite loss: no adapter saved) is tried again at half the lr
        stop = deadline_callback(t0 + s.sft.minutes * 60)
        try:
            res = run_sft(cfg, callbacks=[stop])
            break
        except SFTDiverged as e:
            if len(tries) == 2:
                raise
            lr = cfg.trainer.learning_rate
            tries.append({"learning_rate": lr, "error": str(e)})
            print(f"[transfer] sft: {e}; again at learning rate {lr / 2:g}", file=sys.stderr, flush=True)
            cfg = cfg.with_(**{"trainer.learning_rate": lr / 2, "output_dir": f"{cfg.output_dir}-{len(tries)}"})
    res["diverged_tries"] = tries
    res.update(hold_out_loop=s.sft.hold_out_loop, rows_held_out=held_out)
    shutil.rmtree(ret / "sft_adapter", ignore_errors=True)
    shutil.copytree(res["adapter"], ret / "sft_adapter")
    res.update(seconds=round(time.time() - t0, 1), stopped_at_deadline=stop.stopped, step_seconds=stop.steps)
    write_json(ret / "sft.json", res)
    return {"state": "partial" if stop.stopped else "done", "steps": res["steps"], "examples": res["examples"]}


# ----------------------------------------------------------------------------- grpo
def adapter_dir(ret: Path, arm: str) -> Path:
    """Where an arm's adapter lies under ``ret``: the SFT output, or GRPO's resumable state."""
    return ret / "grpo" / "state" / "adapter" if arm == "rl" else ret / f"{arm}_adapter"


def grpo(s: TransferSettings, ret: Path, work: Path) -> dict[str, Any]:
    """GRPO from the SFT adapter (or the base model), continuing from ``ret/grpo/state`` when an earlier
    stretch left one; every update saves that state, so a stretch cut at any point loses one update."""
    from harnesslearn.training.config import GRPOTrainConfig
    from harnesslearn.training.grpo import GRPOHooks, run_grpo

    t0 = time.time()
    g = s.grpo
    stop = deadline_callback(t0 + g.minutes * 60)

    class Hooks(GRPOHooks):
        def on_start(self, run: Any) -> None:
            run.trainer.add_callback(stop)

    adapter = adapter_dir(ret, "sft") if adapter_dir(ret, "sft").is_dir() and not g.from_base else None
    if adapter is None and not g.from_base and not (ret / "grpo" / "state" / "state.json").is_file():
        raise UserError(f"a new GRPO chain starts from the SFT adapter, and {adapter_dir(ret, 'sft')} does not "
                        "exist: run the sft stage first (--stages sft,grpo), or set --grpo.from-base")
    solver = s.solver or (f"vllm:{s.model}?gpu_memory_utilization={s.solver_memory}&max_num_seqs=512"
                          if s.engine == "vllm" else f"hf:{s.model}?max_batch=256")
    cfg = GRPOTrainConfig(
        solver=solver, families=s.families, splits=g.splits, budgets=s.budgets, runtime=s.runtime, seed=s.seed + 7,
        run_dir=str(work / "grpo_run"), model=s.model, adapter=str(adapter) if adapter else None,
        output_dir=str(ret / "grpo"), rollouts=str(ret / "rollouts.jsonl.gz"), resume=True, lora=s.lora,
        trainer=g.trainer.with_(bf16=not s.cpu, use_cpu=s.cpu), grpo=g.grpo,
        proposer=s.proposer.with_(**{"format": s.training_format, "sampling.temperature": g.temperature}),
        vllm=g.vllm.with_(use=g.vllm.use and s.engine == "vllm" and not s.cpu))
    res = run_grpo(cfg, hooks=Hooks())
    res.update(seconds=round(time.time() - t0, 1), step_seconds=stop.steps, stopped_at_deadline=stop.stopped,
               start=start_label(res, adapter), learning_rate=g.trainer.learning_rate,
               contexts_per_update=g.grpo.contexts_per_update, num_generations=g.grpo.num_generations,
               n_score=g.splits.n_score)
    write_json(ret / "grpo.json", res)
    shutil.rmtree(ret / "grpo" / "adapter", ignore_errors=True)  # the fp32 copy; the state's bf16 one is kept
    done = res["steps"] >= g.trainer.max_steps
    return {"state": "done" if done else "partial", "steps": res["steps"], "new_steps": res["new_steps"],
            "contexts": res["contexts"], "start": res["start"]}


def start_label(res: dict[str, Any], adapter: Path | None) -> str:
    """Where this stage's training began: a resumed chain goes on from its saved state (whatever the first
    stretch started from, which that stretch's grpo.json names), a fresh one from the SFT adapter or the base."""
    if res.get("resumed_from"):
        return f"state_after_update_{res['resumed_from']}"
    return "sft_adapter" if adapter else "base"


# ----------------------------------------------------------------------------- eval
def shipped_memory(work: Path) -> Path:
    """The harness memory shipped with the package (built from paper-train families only), as a file of
    this run's own (each memory arm's adapt run gets a copy, so no arm reads what another one added and
    the user's memory is never read or written)."""
    from harnesslearn.memory import shipped_copy

    shipped_copy(work / "memory.sqlite")
    return work / "memory.sqlite"


class SharedEvaluations:
    """``evaluation.evaluate`` with one result per (harness, task, split, problems, seed) for the whole eval
    stage: every arm's adapt run of a family sees the same seed evaluations (the paired comparison of the
    report), and a harness two arms both propose is run once. An evaluation with infrastructure failures
    is not kept (adapt stops on it; the job is retried in the next stretch)."""

    def __init__(self) -> None:
        self.done: dict[tuple[str, str, str, int, int], Any] = {}
        self.locks: dict[tuple[str, str, str, int, int], asyncio.Lock] = {}

    async def __call__(self, h: Any, task: Any, split: str, n: int, seed: int, executor: Any, budgets: Any = None,
                       progress: bool = False) -> Any:
        from harnesslearn.evaluation import evaluate

        key = (h.id, task.spec, split, n, seed)
        async with self.locks.setdefault(key, asyncio.Lock()):
            if key in self.done:
                return self.done[key]
            ev = await evaluate(h, task, split, n, seed, executor, budgets, progress=False)
            if not ev.infra_failures:
                self.done[key] = ev
            return ev


async def proposers(s: TransferSettings, rt: SolverRuntime, ret: Path, work: Path,
                    names: tuple[str, ...] | None = None) -> dict[str, ModelBackend | None]:
    """Each arm's proposer backend (None for the zoo arm) for the arms ``names`` (default: the eval stage's);
    arms whose adapter is missing are left out. On vLLM the adapters are served by name by the solver's own
    server (the stage's, or a running one that serves this run's: ``served.py``); in process they are merged
    into the weights at load (``hf:MODEL?adapter=DIR``)."""
    from harnesslearn.models import load_model
    from harnesslearn.transfer.served import served_arm, served_models, server_started, solver_url

    shared = solver_url(s.solver)  # a running server: its own model and adapters, where it serves this run's
    models = await asyncio.to_thread(served_models, shared[1]) if shared else {}
    started = await asyncio.to_thread(server_started, shared[1]) if shared and len(models) > 1 else None
    arms: dict[str, ModelBackend | None] = {}
    for arm in dict.fromkeys(a.removesuffix("_mem") for a in names or s.eval.arms):  # X_mem: X's proposer + memory
        served = shared and served_arm(arm, models, solver_name=shared[0], base_model=s.model,
                                       adapter=adapter_dir(ret, arm), started=started)
        if arm in FIXED_ARMS:
            arms[arm] = None
        elif arm != "base" and not adapter_dir(ret, arm).is_dir():
            print(f"[transfer] no {arm}_adapter, arm {arm} left out", file=sys.stderr, flush=True)
        elif shared and served:
            arms[arm] = load_model(f"openai:{served}", base_url=shared[1], prefill=True, timeout=300.0)
            print(f"[transfer] arm {arm}: proposer {served!r} on the solver's server", file=sys.stderr, flush=True)
        elif s.engine == "vllm" and not s.solver:
            arms[arm] = rt.solver if arm == "base" else load_model(f"openai:{arm}", base_url=rt.base_url, prefill=True,
                                                                    timeout=300.0)
        elif arm == "base":
            arms[arm] = rt.solver if not s.solver else load_model(f"hf:{s.model}", max_batch=128)
        else:
            if shared:
                print(f"[transfer] arm {arm}: the solver's server does not serve {adapter_dir(ret, arm)} as {arm!r} "
                      "(or loaded it before its last change); merged into an in-process engine (slow: start the "
                      "server with it, solver.sh start ... LORA)", file=sys.stderr, flush=True)
            arms[arm] = load_model(f"hf:{s.model}", max_batch=128, dtype="float32", adapter=str(adapter_dir(ret, arm)))
    return arms


# the arms that propose nothing: the best zoo harness by score split, and every known source evaluated (fixed rules)
FIXED_ARMS = ("zoo", "rules")


def row_key(r: dict[str, Any]) -> tuple[Any, ...]:
    """What makes an eval row unique: its arm and family, the splits and problem seed it ran on, and, for a proposer
    arm, the parent it revised, the rounds and the prompt folder (rows from before those settings: the minimal
    seed, one round, the packaged prompts)."""
    fixed = r["arm"] in FIXED_ARMS
    return (r["arm"], r["family"], r.get("n_score"), r.get("eval_seed"),
            "" if fixed else r.get("parent", "seed"), 0 if fixed else r.get("rounds", 1),
            None if fixed else r.get("prompt_dir"))


def stage_key(s: TransferSettings, arm: str, fam: str) -> tuple[Any, ...]:
    """``row_key`` of the row the eval stage's settings ask for."""
    e = s.eval
    return row_key({"arm": arm, "family": fam, "n_score": e.splits.n_score, "eval_seed": e.seed, "parent": e.parent,
                    "rounds": e.rounds, "prompt_dir": s.proposer.prompt_dir})


def eval_missing(s: TransferSettings, ret: Path) -> int:
    """The (arm, family) rows of ``s.eval`` that ``ret/eval_rows.jsonl`` does not hold yet."""
    have = {row_key(r) for r in read_jsonl(ret / "eval_rows.jsonl")}
    return sum(stage_key(s, arm, fam) not in have for fam in s.eval.families for arm in s.eval.arms)


async def evaluate_arms(s: TransferSettings, ret: Path, work: Path) -> dict[str, Any]:
    """Each proposer arm revises the parent of each unseen family (the minimal seed, or with ``eval.parent`` zoo the
    family's best zoo harness by score split) through the library's own path, ``adapt`` (one round: strategy
    independent, K proposals from one prompt, the best by score-split J kept only if strictly better; more rounds:
    sequential), reported on the test split, into a run directory ``work/eval_runs/TAG/ARM/FAMILY`` that
    ``harnesslearn report`` reads; the zoo arm picks the best zoo harness by score split; the rules arm evaluates
    every known source (``sources.known_sources``) on both splits. One row per (arm, family) goes to
    ``ret/eval_rows.jsonl`` as each finishes (the run directories stay on the machine: 126 of them would not fit
    the way back)."""
    from harnesslearn.harness import load_harness

    t0 = time.time()
    rows_path = ret / "eval_rows.jsonl"
    have = {row_key(r) for r in read_jsonl(rows_path)}
    e = s.eval
    async with arm_runtime(s, ret, work, e.arms, "eval") as (rt, arms):
        tag = f"{e.parent}-r{e.rounds}-n{e.splits.n_score}-s{e.seed}"
        if s.proposer.prompt_dir:  # runs asked with other prompts are other runs (adapt refuses to resume them)
            tag += "-" + re.sub(r"\W+", "_", Path(s.proposer.prompt_dir.removeprefix("packaged:")).name)
        job = EvalJob(s, rt, load_harness("minimal"), SharedEvaluations(), shipped_memory(work),
                      work / "eval_runs" / tag)
        jobs = [(arm, fam) for fam in e.families for arm in e.arms
                if arm.removesuffix("_mem") in arms and stage_key(s, arm, fam) not in have]
        n = await run_until(jobs, t0 + e.minutes * 60, lambda j: job.row(j[0], j[1], arms),
                            lambda j, r: append_jsonl(rows_path, [r]), label="eval")
    return {"state": state_of(n), **n.as_dict(), "rows": len(read_jsonl(rows_path))}


@asynccontextmanager
async def arm_runtime(s: TransferSettings, ret: Path, work: Path, names: tuple[str, ...],
                      stage: str) -> AsyncIterator[tuple[SolverRuntime, dict[str, ModelBackend | None]]]:
    """A stage's solver runtime (serving, by name, the sft/rl adapters its arms ``names`` need: an X_mem arm
    needs X's) and each arm's proposer (``proposers``), closed on exit; UserError if no arm could be built."""
    needed = {a.removesuffix("_mem") for a in names}
    lora: dict[str, str] = {a: str(adapter_dir(ret, a)) for a in ("sft", "rl")
                            if a in needed and adapter_dir(ret, a).is_dir()}
    async with runtime(s, solver_backend(s, lora=lora, log=f"vllm-{stage}")) as rt:
        arms = await proposers(s, rt, ret, work, names=names)
        try:
            if not arms:
                raise UserError(f"{stage}: no proposer arm could be built")
            yield rt, arms
        finally:
            for backend in arms.values():  # not the solver, which the runtime owns
                if backend is not None and backend is not rt.solver:
                    await backend.aclose()


class EvalJob:
    """One (arm, family) row of the eval stage (see :func:`evaluate_arms`)."""

    def __init__(self, s: TransferSettings, rt: SolverRuntime, seed_h: Any, shared: SharedEvaluations,
                 memory: Path, runs: Path) -> None:
        self.s, self.rt, self.seed_h, self.shared, self.memory, self.runs = s, rt, seed_h, shared, memory, runs

    async def evaluation(self, h: Any, task: Any, split: str) -> Any:
        e = self.s.eval
        n = {"feedback": e.splits.n_feedback, "score": e.splits.n_score, "test": e.splits.n_test}[split]
        return await self.shared(h, task, split, n, e.seed, self.rt.sandbox, self.s.budgets)

    async def zoo_pick(self, task: Any) -> tuple[dict[str, Any], dict[str, float | None], str | None]:
        """Every zoo harness for ``task``, its score-split J, and the best by score split (``zoo.score_all``)."""
        from harnesslearn import zoo

        async def score_J(h: Any) -> float | None:
            return (await self.evaluation(h, task, "score")).J  # type: ignore[no-any-return]

        return await zoo.score_all(task, self.s.eval.seed, score_J)

    async def row(self, arm: str, fam: str, arms: dict[str, ModelBackend | None]) -> dict[str, Any]:
        from harnesslearn import sources
        from harnesslearn.tasks import load_task

        s, e, t = self.s, self.s.eval, time.time()
        task = load_task(f"rg:{fam}")
        sc, te = await self.evaluation(self.seed_h, task, "score"), await self.evaluation(self.seed_h, task, "test")
        row: dict[str, Any] = {"arm": arm, "family": fam, "solver": s.solver or SOLVER_NAME,
                               "proposer": None if arm in FIXED_ARMS else f"{s.model}+{arm}", "k": e.k,
                               "n_score": e.splits.n_score, "n_test": e.splits.n_test, "eval_seed": e.seed,
                               "seed_score_J": sc.J, "seed_test_J": te.J, "seed_scores": _scores(te)}
        if arm == "rules":
            row.update(await self.rules(task))
            row["wall_s"] = round(time.time() - t, 1)
            return row
        if arm == "zoo":  # the best zoo harness by score split, whatever the seed scored
            hs, js, top = await self.zoo_pick(task)
            row.update(proposals=len(hs), valid=len(hs), candidate_score_J=js)
            picked = (top, hs[top], js[top]) if top is not None else None
            parent = self.seed_h
        else:
            parent, pname = self.seed_h, "minimal"
            if e.parent == "zoo":
                hs, js, top = await self.zoo_pick(task)
                if top is not None:
                    parent, pname = hs[top], f"zoo:{top}"
            pte = await self.evaluation(parent, task, "test")
            row.update(parent=e.parent, parent_name=pname, rounds=e.rounds, prompt_dir=s.proposer.prompt_dir,
                       parent_score_J=(await self.evaluation(parent, task, "score")).J, parent_test_J=pte.J,
                       parent_scores=_scores(pte), parent_taxonomy=taxonomy_counts(pte))
            picked = await self.adapted(arm, task, row, arms[arm.removesuffix("_mem")], parent)
        if picked is None:
            kept = await self.evaluation(parent, task, "test")
            row.update(picked="parent" if parent is not self.seed_h else "seed",
                       score_J=row.get("parent_score_J", sc.J), test_J=kept.J, after_scores=_scores(kept),
                       improved=False, taxonomy=taxonomy_counts(kept))
        else:
            from harnesslearn import zoo

            tev = await self.evaluation(picked[1], task, "test")
            near, ratio = zoo.nearest(picked[1].source)
            row.update(picked=picked[0], score_J=picked[2], test_J=tev.J, after_scores=_scores(tev), improved=True,
                       picked_source=picked[1].source, nearest_zoo=near, nearest_zoo_ratio=round(ratio, 3),
                       picked_provenance=sources.provenance(picked[1].source, prompt_dir=s.proposer.prompt_dir), taxonomy=taxonomy_counts(tev))
        row["wall_s"] = round(time.time() - t, 1)
        return row

    async def rules(self, task: Any) -> dict[str, Any]:
        """Every known source that applies to ``task`` (the zoo files built for it, the prompts' programs) on the
        score and test splits: the fixed rule "submit S; keep it if its score J beats the parent's" is computed
        from these by the report, for any parent among them."""
        from harnesslearn import sources, zoo
        from harnesslearn.harness import Harness

        out: dict[str, Any] = {}
        for ks in sources.known_sources():
            if ks.qa != zoo.is_qa(task):
                continue
            h = (zoo.build(ks.name.removeprefix(zoo.PREFIX), task, self.s.eval.seed) if ks.origin == "zoo"
                 else Harness(ks.source, name=ks.name))
            sc, te = await self.evaluation(h, task, "score"), await self.evaluation(h, task, "test")
            out[ks.name] = {"harness_id": h.id, "origin": ks.origin, "score_J": sc.J, "test_J": te.J,
                            "test_scores": _scores(te), "taxonomy": taxonomy_counts(te)}
        return {"sources": out}

    async def adapted(self, arm: str, task: Any, row: dict[str, Any], proposer: Any,
                      parent: Any) -> tuple[str, Any, Any] | None:
        """``adapt`` for one proposer arm on one family from ``parent``; fills ``row`` from its result and run
        directory (every proposal's provenance and score J, each round's best on test) and returns the pick
        (label, harness, score J), or None when the parent was kept."""
        from harnesslearn import sources
        from harnesslearn.adapt import adapt
        from harnesslearn.settings.adapt import AdaptSettings
        from harnesslearn.settings.groups import MemorySettings
        from harnesslearn.store import Store
        from harnesslearn.taxonomy import runs_solver_code

        s, e, fam = self.s, self.s.eval, task.family
        rd = self.runs / arm / fam
        memory_path = None
        if arm.endswith("_mem"):
            rd.mkdir(parents=True, exist_ok=True)
            memory_path = rd.parent / f"{fam}.memory.sqlite"
            if not memory_path.is_file():
                shutil.copyfile(self.memory, memory_path)
        strategy: Literal["independent", "sequential"] = "independent" if e.rounds == 1 else "sequential"
        settings = AdaptSettings(
            strategy=strategy, rounds=e.rounds, candidates=e.k, seed=e.seed, splits=e.splits,
            budgets=s.budgets, proposer=s.proposer, memory=MemorySettings(
                enabled=memory_path is not None, k=e.memory_k, path=str(memory_path) if memory_path else None))
        assert self.rt.solver is not None and proposer is not None
        res = await adapt(task, self.rt.solver, proposer, settings, run_dir=rd, resume=True, seed_harness=parent,
                          progress=False, executor=self.rt.sandbox, evaluate_fn=self.shared)
        with Store.open(rd, create=False) as st:
            props = sorted(st.proposals(strategy), key=lambda p: (p.round, p.idx))
            children = {p.harness_id: st.load_harness(p.harness_id) for p in props if p.harness_id}
            trace_h = {r["best_harness_id"]: st.load_harness(r["best_harness_id"]) for r in res.rounds}
        shown = []
        if memory_path is not None:
            from harnesslearn.memory import Memory

            with Memory.open(memory_path, readonly=True) as mem:
                task_of = {en.id: en.task for en in mem.entries()}
            shown = [f"{en}:{task_of[en]}" for en in res.memory_shown]
        def label(p: Any) -> str:  # a proposal's name in the row: p{idx}, or r{round}p{idx} with several rounds
            return f"p{p.idx}" if e.rounds == 1 else f"r{p.round}p{p.idx}"

        # each distinct valid revision judged once: its score J (a shared evaluation), provenance and solver use
        judged = {hid: {**sources.provenance(h.source, prompt_dir=s.proposer.prompt_dir),
                        "solver_code": runs_solver_code(h.source),
                        "score_J": (await self.evaluation(h, task, "score")).J} for hid, h in children.items()}
        js = {label(p): judged[p.harness_id]["score_J"] for p in props if p.harness_id}
        candidates = [{"round": p.round, "idx": p.idx, "valid": p.valid, "reason": p.reason,
                       "harness_id": p.harness_id, **(judged[p.harness_id] if p.harness_id else {})} for p in props]
        trace = [{"round": r["round"], "best_harness_id": r["best_harness_id"], "score_J": r["best_score_J"],
                  "test_J": (await self.evaluation(trace_h[r["best_harness_id"]], task, "test")).J}
                 for r in res.rounds]
        row.update(format=res.proposer_format, run_dir=str(rd),
                   memory_shown=shown, memory_added=res.memory_added, proposals=len(props),
                   parsed=sum(p.parsed for p in props), produced=sum(p.produced for p in props),
                   valid=sum(p.valid for p in props),
                   distinct=len(children),  # distinct valid revisions among the K: a peaked proposer repeats itself
                   invalid_reasons=dict(Counter(str(p.reason) for p in props if not p.valid)),
                   uses_python=sum("model.python" in h.source for h in children.values()),
                   # distinct valid revisions that run solver-written code with model.python (the held-out pattern)
                   solver_code=sum(j["solver_code"] for j in judged.values()),
                   candidate_score_J=js, candidates=candidates, round_trace=trace,
                   proposal_texts=[(p.raw or "")[-3000:] for p in props])
        if res.best_harness_id == parent.id:
            return None
        best = next(p for p in props if p.harness_id == res.best_harness_id)
        return label(best), children[res.best_harness_id], res.score_J


def taxonomy_counts(ev: Any) -> dict[str, int]:
    """The failure taxonomy of an evaluation: how many of its scored problems failed in each way
    (``taxonomy.classify_result``; a full score and an infrastructure failure are not counted)."""
    from harnesslearn.taxonomy import classify_result

    return dict(Counter(str(k) for k in (classify_result(p) for p in ev.problems) if k is not None))


def _scores(ev: Any) -> list[float]:
    return [p.score for p in ev.problems if p.score is not None]
