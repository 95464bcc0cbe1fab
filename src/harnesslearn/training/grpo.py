"""`harnesslearn train grpo`: TRL GRPOTrainer with the execution reward.

Flow: stream the contexts (``contexts.py``: seed harness -> feedback evaluation -> the test-time
proposer prompt), realised a few updates ahead of the trainer, to TRL as an iterable prompt dataset, and score every group of
``grpo.num_generations`` completions with ``harness_reward`` -- the completion goes through
the format's ``decode`` (``propose/decode.py``) (the prompt ends with an opening SEARCH marker), the edit is applied,
and the candidate harness is run by the executor with the solver. The whole generation batch is
scored concurrently (one gather) on a private event loop thread that also owns the solver and
the executor, so they live on one loop for the whole run. A candidate that cannot be scored
because of an infrastructure failure gets ``None``, which TRL treats as missing.

Batch arithmetic: an optimizer update sees ``grpo.contexts_per_update * grpo.num_generations``
completions, in micro batches of ``trainer.micro_batch`` (gradient accumulation makes up the rest);
one epoch is ``grpo.contexts_per_epoch`` contexts. Logged per generation batch through TRL's
``report_to`` as ``reward_parts/{reward,J,parse_rate,produce_rate,completion_rate,none_rate}``, written
to the run store's ``rewards`` table and to the rollout export (``rollouts.py``).

Instrumentation (``GRPOHooks``, the public extension point; the transfer recipe uses it for its deadline):
``on_start`` receives a ``GRPORun`` (the trainer, for callbacks; the solver backend in use; the
rollout sink with the reward parts; the sandbox isolation in use) before training starts, and
``on_phase_start``/``on_phase_end`` bracket two phases of each update: ``reward`` (the execution
reward of a generation batch) and ``generation`` (from the start of the update to its reward
call: TRL's sampling plus its prompt preparation; TRL offers no public hook around sampling
alone, so this is measured from the outside with a trainer callback and the reward call).
"""

from __future__ import annotations

import asyncio
import math
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from harnesslearn.errors import UserError
from harnesslearn.harness import Harness
from harnesslearn.models.base import ModelBackend
from harnesslearn.propose.formats import ProposerFormat, by_name
from harnesslearn.propose.prompt import load_prompt_dir, use_prompts
from harnesslearn.runtime import SolverRuntime
from harnesslearn.sandbox.protocol import HarnessExecutor
from harnesslearn.sandbox.records import Budgets
from harnesslearn.training.config import GRPOTrainConfig
from harnesslearn.training.contexts import (
    Builder,
    ContextStream,
    check_seed_harnesses,
    load_tasks,
    plan_contexts,
    task_spec,
)
from harnesslearn.training.model_io import chat_text, load_policy, lora_config
from harnesslearn.training.reward import RewardRequest, RewardResult, harness_rewards, parent_scores
from harnesslearn.training.rollouts import Candidate, RolloutSink
from harnesslearn.training.sft import check_output_dir, resume_arg

T = TypeVar("T")


class LoopThread:
    """A private asyncio loop on a daemon thread; ``run`` blocks until a coroutine finishes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="harnesslearn-reward", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@dataclass(frozen=True)
class GRPORun:
    """What ``GRPOHooks.on_start`` receives."""

    trainer: Any  # the TRL GRPOTrainer: add transformers TrainerCallbacks with trainer.add_callback
    solver: ModelBackend  # the frozen solver the execution reward runs harnesses with
    rollouts: RolloutSink  # .history: the reward parts of every generation batch so far
    isolation: str | None  # the sandbox isolation in use (bwrap | landlock | none)


class GRPOHooks:
    """Observe a GRPO run: subclass and override what you need (every method is a no-op here).
    Times are ``time.time()`` seconds. Called on the training thread."""

    def on_start(self, run: GRPORun) -> None:
        """Once, after the trainer is built and before training starts."""

    def on_phase_start(self, name: str) -> None:
        """A phase of an update begins ("generation" at the update's start, "reward")."""

    def on_phase_end(self, name: str, start: float, end: float) -> None:
        """A phase of an update ended. A "generation" phase ends at the update's reward call
        (an update that reuses buffered completions has none)."""


class PhaseClock:
    """Turns the start of each update (a trainer callback) and each reward call into phases."""

    def __init__(self, hooks: GRPOHooks) -> None:
        self.hooks = hooks
        self.update_start: float | None = None
        self.phases: dict[str, float] = {}  # this update's seconds per phase, and when its reward ended

    def update_started(self) -> None:
        self.update_start = time.time()
        self.hooks.on_phase_start("generation")

    def reward_started(self) -> float:
        """The reward begins now (and the update's generation, if running, ends): its start time."""
        t = time.time()
        if self.update_start is not None:
            self.hooks.on_phase_end("generation", self.update_start, t)
            self.phases["generation"] = t - self.update_start
            self.update_start = None
        self.hooks.on_phase_start("reward")
        return t

    def reward_ended(self, t: float) -> None:
        end = time.time()
        self.phases["reward"] = self.phases.get("reward", 0.0) + end - t
        self.phases["reward_end"] = end
        self.hooks.on_phase_end("reward", t, end)

    @contextmanager
    def reward(self, started: float | None = None) -> Iterator[None]:
        """The reward phase around the block (``started``: it began earlier, at ``reward_started``)."""
        t = self.reward_started() if started is None else started
        try:
            yield
        finally:
            self.reward_ended(t)

    def callback(self) -> Any:
        """A transformers TrainerCallback that marks the start of every update."""
        from transformers import TrainerCallback

        clock = self

        class UpdateClock(TrainerCallback):  # type: ignore[misc]
            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                clock.update_started()

        return UpdateClock()


Scored = tuple[list[RewardResult], dict[tuple[str, str, int], float | None]]


class ExecutionReward:
    """The TRL reward function: ``harness_reward`` over the whole batch, with logging.

    Streaming (``grpo.stream_reward``): ``submit`` starts scoring each group on the runner's loop as soon as its
    completions exist (``StreamingTrainer`` calls it when TRL's generation returns); the reward call then waits for
    what is left instead of starting it. Each candidate is scored from the same (parent, completion, task, seed) as
    on the batch path, so the rewards are the same; only identical requests of different groups are no longer
    evaluated once between them."""

    __name__ = "execution_reward"

    def __init__(self, runner: LoopThread, executor: HarnessExecutor, tasks: dict[str, Any], sink: RolloutSink, *,
                 n_score: int, budgets: Budgets | None, fmt: ProposerFormat, max_completion_length: int = 10**9,
                 clock: PhaseClock | None = None, step_offset: int = 0, score_parent: bool = False) -> None:
        self.runner, self.executor, self.tasks, self.sink, self.fmt = runner, executor, tasks, sink, fmt
        self.score_parent = score_parent  # each context's parent on the same problems, beside its candidates
        self.step_offset = step_offset  # updates done before this process (a resumed run)
        self.max_completion_length = max_completion_length
        self.n_score, self.budgets = n_score, budgets
        self.clock = clock or PhaseClock(GRPOHooks())
        self.pending: dict[tuple[str, ...], tuple[float, list[Future[Scored]]]] = {}  # completions -> submitted

    def _requests(self, prompts: list[str], completions: list[str], ids: list[Any], task_spec: list[str],
                  seed: list[int], parent_source: list[str]) -> tuple[list[str], list[Harness], list[RewardRequest]]:
        proposals = [self.fmt.decode(c, p, hit_max_tokens=ci is not None and len(ci) >= self.max_completion_length,
                                     source=s)
                     for c, p, ci, s in zip(completions, prompts, ids, parent_source, strict=True)]
        parents = [Harness(source=s) for s in parent_source]
        requests = [RewardRequest(p, text, self.tasks[spec], int(sd))
                    for p, text, spec, sd in zip(parents, proposals, task_spec, seed, strict=True)]
        return proposals, parents, requests

    def submit(self, rows: list[dict[str, Any]], prompts: list[str], completions: list[str],
               completion_ids: list[Any], group_size: int) -> None:
        """Start scoring the batch's groups now, one future per group of ``group_size`` consecutive rows (TRL's
        order), on the runner's loop; the reward call for these completions collects them."""
        t = self.clock.reward_started()
        _, _, requests = self._requests(prompts, completions, list(completion_ids), [r["task_spec"] for r in rows],
                                        [r["seed"] for r in rows], [r["parent_source"] for r in rows])
        futures = [asyncio.run_coroutine_threadsafe(self._score(requests[i:i + group_size]), self.runner.loop)
                   for i in range(0, len(requests), group_size)]
        for _t, old in self.pending.values():  # a batch whose reward call never came: nothing will collect it
            for f in old:
                f.cancel()
        self.pending = {tuple(completions): (t, futures)}

    def _collect(self, completions: list[str]) -> tuple[float | None, Scored | None]:
        """The submitted scores of exactly these completions, waited for; (None, None) when none were submitted."""
        started, futures = self.pending.pop(tuple(completions), (None, None))
        if futures is None:
            return None, None
        results: list[RewardResult] = []
        bars: dict[tuple[str, str, int], float | None] = {}
        for f in futures:
            r, b = f.result()
            results += r
            bars |= b
        return started, (results, bars)

    def __call__(self, prompts: list[str], completions: list[str], context_id: list[str], task_spec: list[str],
                 seed: list[int], parent_source: list[str], trainer_state: Any = None,
                 log_metric: Any = None, log_extra: Any = None, **_: Any) -> list[float | None]:
        ids = _.get("completion_ids") or [None] * len(completions)
        proposals, parents, requests = self._requests(prompts, completions, ids, task_spec, seed, parent_source)
        started, scored = self._collect(completions)
        if started is not None and scored is not None:  # submitted when generation returned (streaming)
            results, bars = scored
            self.clock.reward_ended(started)
        else:
            with self.clock.reward():
                results, bars = self.runner.run(self._score(requests))
        step = self.step_offset + int(getattr(trainer_state, "global_step", 0) or 0)
        cands = [Candidate(cid, spec, int(sd), par.id, pr, comp, prop, res,
                           bars.get((par.id, self.tasks[spec].spec, int(sd))), _child_source(par, prop, res))
                 for cid, spec, sd, par, pr, comp, prop, res
                 in zip(context_id, task_spec, seed, parents, prompts, completions, proposals, results, strict=True)]
        comps = self.sink.write(step, cands)
        if log_metric is not None:
            for name, value in comps.items():
                if not math.isnan(value):
                    log_metric(f"reward_parts/{name}", value)
        if log_extra is not None:
            log_extra("J", [r.J for r in results])
            log_extra("parsed", [r.parsed for r in results])
            log_extra("produced", [r.produced for r in results])
            log_extra("completion_rate", [r.completion_rate for r in results])
        print(f"harnesslearn: step {step} rewards " + " ".join(f"{k}={v:.3f}" for k, v in comps.items()),
              file=sys.stderr)
        return [r.reward for r in results]

    async def _score(self, requests: list[RewardRequest]
                     ) -> tuple[list[RewardResult], dict[tuple[str, str, int], float | None]]:
        """The candidates' rewards and, with ``score_parent``, their parents' J, evaluated side by side."""
        rewards = harness_rewards(requests, self.executor, n=self.n_score, budgets=self.budgets)
        if not self.score_parent:
            return await rewards, {}
        bars = parent_scores(requests, self.executor, n=self.n_score, budgets=self.budgets)
        results, scored = await asyncio.gather(rewards, bars)
        return results, scored


def trainer_class(stream: ExecutionReward | None) -> Any:
    """TRL's GRPOTrainer, or (``stream``: the reward to stream to) a subclass that hands each generation batch's
    completions to ``stream.submit`` as soon as TRL's ``_generate`` returns them.

    What TRL's structure allows (trl 1.16): a generation batch (an update's ``contexts_per_update x G`` rows) is
    sampled in one ``_generate`` call (one ``generate`` or one vLLM request), so every group's completions exist
    at the same moment and no group can be scored while a later one is still sampled; splitting the call per
    group would change the sampled text for one seed and, under vLLM, give up batching. What it does allow: the
    scoring starts before TRL's own work between sampling and its reward call (padding; the logprob pass of
    ``old_per_token_logps`` under vLLM's importance-sampling correction; the reference pass when ``beta > 0``),
    and overlaps it. Overrides two private methods of TRL's trainer; a TRL that renames them leaves streaming
    inert (the reward call then scores the batch as today)."""
    from trl import GRPOTrainer

    if stream is None:
        return GRPOTrainer
    reward = stream

    class StreamingTrainer(GRPOTrainer):  # type: ignore[misc]
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            self._harnesslearn_rows = inputs
            return super()._generate_and_score_completions(inputs)

        def _generate(self, prompts: list[Any]) -> Any:
            out = super()._generate(prompts)
            rows = getattr(self, "_harnesslearn_rows", None)
            model: Any = self.model
            if model.training and rows is not None and len(rows) == len(prompts):
                reward.submit(rows, list(prompts), list(out[3]), list(out[1]), int(self.num_generations or 1))
            return out

    return StreamingTrainer


def _child_source(parent: Harness, proposal: str, result: RewardResult) -> str | None:
    """The candidate harness a proposal produced (the reward applied the same edit), None where it produced none."""
    if not result.produced:
        return None
    from harnesslearn.propose.edits import apply_proposal

    ed = apply_proposal(parent.source, proposal)
    return ed.source if ed.valid else None


def updates_layout(cfg: GRPOTrainConfig) -> tuple[int, int]:
    """(per-device micro batch, gradient accumulation steps) for contexts_per_update x G."""
    g, micro = cfg.grpo.num_generations, cfg.trainer.micro_batch
    per_update = cfg.grpo.contexts_per_update * g
    if per_update % micro:
        raise UserError(f"grpo.contexts_per_update x grpo.num_generations ({per_update}) must be a multiple of "
                        f"trainer.micro_batch ({micro})")
    if micro % g and g % micro:
        raise UserError(f"trainer.micro_batch ({micro}) and grpo.num_generations ({g}) must divide one another")
    return micro, per_update // micro


def _open_runtime(cfg: GRPOTrainConfig, runner: LoopThread) -> SolverRuntime:
    """The solver and the executor, opened through the one runtime on the runner's loop, where every
    evaluation of the run happens (closed by ``run_grpo`` on any exit)."""
    rt = SolverRuntime.of(cfg.solver, cfg.runtime, base_url=cfg.solver_base_url)
    runner.run(rt.__aenter__())
    return rt


def open_store(run_dir: str | None, run_id: str, config: dict[str, Any]) -> Any:
    if run_dir is None:
        return None
    from harnesslearn.store import Store

    store = Store.open(run_dir, lock=True)  # one writer at a time, as adapt's
    try:
        if store.run(run_id) is None:
            store.create_run(run_id, config, strategy="grpo")
    except BaseException:
        store.close()
        raise
    return store


def training_format(cfg: GRPOTrainConfig) -> ProposerFormat:
    """The proposer format the policy is trained in (``proposer.format``; a chat prompt is rendered with
    the policy's chat template and continued from that text, as the in-process engine does at test time)."""
    return by_name(cfg.format_name)


def context_stream(cfg: GRPOTrainConfig, runner: LoopThread, executor: HarnessExecutor, tasks: dict[str, Any],
                   policy: Any = None, render: Any = None, *, first: int = 0) -> ContextStream:
    """The run's contexts from plan position ``first`` on (epoch after epoch of the planned
    ``grpo.contexts_per_epoch``), realised as the trainer reads them, two updates' worth ahead on the
    runner's loop (multistep: each when read, since its rounds run the policy being trained); those
    longer than ``grpo.max_prompt_chars`` are skipped."""
    g, p = cfg.grpo, cfg.proposer
    check_seed_harnesses(g.seed_harnesses, tasks)
    epoch = plan_contexts(cfg.families, g.seed_harnesses, g.contexts_per_epoch, seed=cfg.seed,
                          multistep_max_rounds=g.multistep_max_rounds if g.multistep else 0)
    builder = Builder(executor, cfg.splits.n_feedback, cfg.splits.n_score, training_format(cfg), p.n_traces, p.style,
                      cfg.budgets, proposer=policy, candidates=g.multistep_candidates,
                      temperature=p.sampling.temperature, max_tokens=p.sampling.max_tokens, render=render)
    limit = g.max_prompt_chars
    return ContextStream(lambda i: epoch[i % len(epoch)], lambda plan: builder.realise(plan, tasks), runner.loop,
                         first=first, ahead=0 if g.multistep else 2 * g.contexts_per_update,
                         keep=lambda c: limit is None or len(c.prompt) <= limit, max_skips=len(epoch),
                         refused=f"every context prompt is longer than grpo.max_prompt_chars ({limit})")


def end_token_ids(tok: Any, model: Any) -> list[int]:
    """The ids that end a completion: the model's own end tokens, plus ChatML's ``<|im_end|>`` and
    ``<|endoftext|>`` where the vocabulary has them (a GGUF-converted Qwen may name only one of them)."""
    ids: list[int] = []
    own = getattr(model.generation_config, "eos_token_id", None)
    for t in [tok.eos_token_id, *(own if isinstance(own, list) else [own])]:
        if isinstance(t, int) and t not in ids:
            ids.append(t)
    vocab = tok.get_vocab()
    for name in ("<|im_end|>", "<|endoftext|>"):
        if name in vocab and vocab[name] not in ids:
            ids.append(vocab[name])
    return ids


def iterable_dataset(rows: Callable[[], Iterator[dict[str, Any]]]) -> Any:
    """A ``datasets.IterableDataset`` over ``rows()``, made without ``from_generator`` (which fingerprints
    the generator by pickling it, and ours holds the runner's loop)."""
    from datasets.iterable_dataset import ExamplesIterable, IterableDataset

    return IterableDataset(ExamplesIterable(lambda: enumerate(rows()), {}))


def total_updates(cfg: GRPOTrainConfig) -> int:
    """Optimizer updates of the whole run (across resumes): ``trainer.max_steps``, else the epochs' contexts."""
    if cfg.trainer.max_steps > 0:
        return cfg.trainer.max_steps
    return max(1, math.ceil(cfg.grpo.contexts_per_epoch * cfg.trainer.epochs / cfg.grpo.contexts_per_update))


def generation_args(cfg: GRPOTrainConfig, ends: list[int]) -> dict[str, Any]:
    """GRPOConfig's generation fields: TRL's colocated vLLM engine when ``vllm.use``."""
    v = cfg.vllm
    if not v.use:
        return {}
    return {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": v.gpu_memory_utilization,
            "vllm_enable_sleep_mode": v.sleep, "vllm_max_model_length": v.max_model_length,
            "generation_kwargs": {"stop_token_ids": ends}}


def run_grpo(cfg: GRPOTrainConfig, *, hooks: GRPOHooks | None = None) -> dict[str, Any]:
    """Train; returns a summary (steps, contexts, reward parts per logged batch, paths, timings).

    After every update the compact state (``grpo_state.py``) is saved under ``OUTPUT_DIR/state``;
    ``resume: true`` continues from it (the next contexts of the plan, the saved adapter).
    ``hooks`` (optional) observe the run (see ``GRPOHooks``)."""
    from trl import GRPOConfig

    from harnesslearn.training.grpo_state import GRPOState, recorder

    micro, accum = updates_layout(cfg)
    out = check_output_dir(cfg.output_dir)
    prompts = load_prompt_dir(cfg.proposer.prompt_dir) if cfg.proposer.prompt_dir else {}
    state = GRPOState(out / "state")
    settings = cfg.record()
    recorded = state.read() if cfg.resume is True else None
    if recorded is not None:
        state.check(recorded, settings)
    step0, contexts0 = (int(recorded["updates"]), int(recorded["contexts"])) if recorded else (0, 0)
    left = total_updates(cfg) - step0
    if left <= 0:
        print(f"harnesslearn: GRPO already ran its {step0} updates ({state.dir})", file=sys.stderr)
        return {"command": "grpo", "contexts": 0, "steps": step0, "new_steps": 0, "reward_parts": [], "resumed_from": step0,
                "adapter": str(state.adapter), "state": str(state.dir), "output_dir": cfg.output_dir,
                "run_dir": cfg.run_dir}
    t0 = time.perf_counter()
    model, tok = load_policy(cfg.model, adapter=str(state.adapter) if recorded else cfg.adapter,
                             bf16=cfg.trainer.bf16, targets=cfg.lora.target_modules)
    ends = end_token_ids(tok, model)
    model.generation_config.eos_token_id = ends
    t_model = time.perf_counter() - t0
    store = open_store(cfg.run_dir, "grpo", settings)  # a refused run_dir: before the runtime is opened
    runner = LoopThread()
    try:
        rt = _open_runtime(cfg, runner)
    except BaseException:
        runner.close()
        if store is not None:
            store.close()
        raise
    executor = rt.sandbox
    try:
        tasks = load_tasks([task_spec(f) for f in cfg.families])
        policy = None
        if cfg.grpo.multistep:
            from harnesslearn.training.policy import PolicyBackend

            policy = PolicyBackend(model, tok)
        render = (lambda msgs: chat_text(tok, msgs)) if training_format(cfg).chat else None
        stream = context_stream(cfg, runner, executor, tasks, policy, render, first=contexts0)
        sink = RolloutSink(Path(cfg.rollouts) if cfg.rollouts else out / "rollouts.jsonl", store,
                           prompt_dir=cfg.proposer.prompt_dir)
        hooks = hooks or GRPOHooks()
        clock = PhaseClock(hooks)
        sampling = cfg.proposer.sampling
        scorer: HarnessExecutor = executor
        if cfg.grpo.reward_cap_s is not None:
            from harnesslearn.sandbox.executor import default_concurrency
            from harnesslearn.training.tailcap import TailCap

            width = cfg.runtime.concurrency or executor.stats().get("slots") or default_concurrency()
            scorer = TailCap(executor, cfg.grpo.reward_cap_s, int(width))
        reward = ExecutionReward(runner, scorer, tasks, sink, n_score=cfg.splits.n_score, budgets=cfg.budgets,
                                 fmt=training_format(cfg), max_completion_length=sampling.max_tokens,
                                 clock=clock, step_offset=step0, score_parent=cfg.grpo.score_parent)
        args = GRPOConfig(
            **{"output_dir": cfg.output_dir, "seed": cfg.seed, **cfg.trainer.kwargs(),
               "max_steps": left},
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=accum,
            num_generations=cfg.grpo.num_generations,
            max_completion_length=sampling.max_tokens,
            temperature=sampling.temperature,
            beta=cfg.grpo.beta,
            shuffle_dataset=False,  # contexts come in the plan's order, so a resumed run sees the ones that follow
            lr_scheduler_type="constant",  # a schedule that does not depend on where a stretch starts
            **generation_args(cfg, ends),
        )
        trainer = trainer_class(reward if cfg.grpo.stream_reward else None)(
            model=model,
            reward_funcs=[reward],
            args=args,
            train_dataset=iterable_dataset(stream.rows),
            processing_class=tok,
            peft_config=None if (cfg.adapter or recorded) else lora_config(cfg.lora.r, cfg.lora.alpha,
                                                                           cfg.lora.dropout, cfg.lora.target_modules),
        )
        trainer.add_callback(clock.callback())
        trainer.add_callback(recorder(state, trainer.model, clock, sink, step0=step0, positions=stream.positions,
                                      contexts_per_update=cfg.grpo.contexts_per_update,
                                      group_size=cfg.grpo.num_generations,
                                      settings=settings, waited=stream.take_waited))
        assert rt.solver is not None
        hooks.on_start(GRPORun(trainer, rt.solver, sink, executor.isolation))
        t2 = time.perf_counter()
        with use_prompts(prompts):  # the user's templates (proposer.prompt_dir), if any, for the contexts' prompts
            result = trainer.train(resume_from_checkpoint=resume_arg(cfg.resume, cfg.output_dir)
                                   if isinstance(cfg.resume, str) else None)
        t_train = time.perf_counter() - t2
        final = out / "adapter"
        trainer.save_model(str(final))
        summary = {
            "command": "grpo",
            "contexts": int(result.global_step) * cfg.grpo.contexts_per_update,  # trained on (the stream read ahead)
            "steps": step0 + int(result.global_step),
            "new_steps": int(result.global_step),
            "resumed_from": step0,
            "train_loss": float(result.training_loss),
            "reward_parts": sink.history,
            "adapter": str(final),
            "state": str(state.dir),
            "output_dir": cfg.output_dir,
            "rollouts": str(sink.path),
            "run_dir": cfg.run_dir,
            "end_token_ids": ends,
            "seconds": {"load_model": round(t_model, 2), "contexts_waited": round(stream.waited_total, 2),
                        "train": round(t_train, 2), "total": round(time.perf_counter() - t0, 2)},
        }
        if store is not None:
            store.finish_run("grpo", {k: v for k, v in summary.items() if k != "reward_parts"})
        return summary
    finally:
        runner.run(rt.aclose())
        runner.close()
        if store is not None:
            store.close()
