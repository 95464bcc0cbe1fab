"""GRPO contexts: proposer prompts built exactly as at test time.

A context is (training family, harness state, feedback): the harness is evaluated on the
feedback split through the executor and the proposer format renders the prompt, the same
call test-time adaptation makes. Variants:

- format-varied: ``proposer.style="varied"`` in the prompt (``propose/prompt.py``) (section order, trace
  and aggregate formats chosen per context) and several seed-harness styles (``grpo.seed_harnesses``, see
  ``seed_styles.py``);
- multistep: the harness of a context is the best after ``k`` revision rounds of a proposer
  (the current policy, through ``PolicyBackend``), ``k`` drawn in ``[0, max_rounds]``; each round
  proposes ``candidates`` revisions of the current best with ``propose.rounds.revise``, scores them on
  the score split, and keeps one only if it is strictly better (the ``sequential`` rule); the
  prompt then carries those rounds as history.

``plan_contexts`` is a pure function (which family, seed harness, problem seed and round count
each context gets); ``realise_contexts`` runs the evaluations, all contexts concurrently;
``ContextStream`` realises them as a trainer asks for them, a few ahead (GRPO: a run of 80 updates
does not wait for its 640 contexts before the first update, and a stretch cut at a deadline built
only what it used).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError
from harnesslearn.harness import Harness
from harnesslearn.propose.formats import ProposerFormat
from harnesslearn.propose.prompt import PromptContext, Style
from harnesslearn.sandbox.protocol import HarnessExecutor
from harnesslearn.sandbox.records import Budgets
from harnesslearn.seeding import child_seed
from harnesslearn.zoo import resolve_harness


@dataclass(frozen=True)
class ContextPlan:
    id: str
    task_spec: str
    seed_harness: str
    seed: int  # problem seed of the feedback and score splits (and the trace sampler)
    rounds: int  # multistep: revision rounds before this context (0: the seed itself)


@dataclass(frozen=True)
class Context:
    id: str
    task_spec: str
    seed: int
    harness: Harness
    prompt: str
    rounds: int
    parent_J: float | None  # the harness's score-split J, when it was computed (multistep)

    def row(self) -> dict[str, Any]:
        """The dataset row TRL sees: ``prompt`` plus the columns the reward function needs."""
        return {"prompt": self.prompt, "context_id": self.id, "task_spec": self.task_spec, "seed": self.seed,
                "parent_source": self.harness.source, "rounds": self.rounds}


def task_spec(family: str) -> str:
    """``codeio`` -> ``rg:codeio``; a full spec (with a ``:``) is kept as is."""
    return family if ":" in family else f"rg:{family}"


def seed_harness(ref: str, task: Any = None, seed: int = 0) -> Harness:
    """A seed harness from a shipped name, ``style:NAME``, a ``.py`` path, or ``zoo:NAME`` built for the context's
    ``task`` (``zoo.resolve_harness``): in a context that starts from a zoo harness, a candidate has to beat that
    harness to beat its parent (a copy with the zoo file's syntax tree, however laid out, is ``no_change``)."""
    return resolve_harness(ref, task, seed)


def check_seed_harnesses(refs: Sequence[str], tasks: dict[str, Any]) -> None:
    """UserError, before anything runs, for a seed harness that names nothing or a zoo harness that does not apply
    to one of the training tasks (contexts are realised in the background, where the mistake would surface late)."""
    for ref in refs:
        for task in tasks.values():
            seed_harness(ref, task)


def plan_contexts(
    families: Sequence[str], seed_harnesses: Sequence[str], n: int, *, seed: int, multistep_max_rounds: int = 0
) -> list[ContextPlan]:
    """``n`` contexts cycling over families (and seed harnesses), each with its own problem seed."""
    if not families or not seed_harnesses:
        raise UserError("families and seed_harnesses must not be empty")
    rng = random.Random(seed)
    plans = []
    for i in range(n):
        fam = families[i % len(families)]
        sh = seed_harnesses[(i // len(families)) % len(seed_harnesses)]
        pseed = child_seed(seed, i)
        k = rng.randint(0, multistep_max_rounds) if multistep_max_rounds > 0 else 0
        name = Path(task_spec(fam).split(":", 1)[1].split("?")[0]).stem
        plans.append(ContextPlan(f"c{i:05d}-{name}", task_spec(fam), sh, pseed, k))
    return plans


@dataclass
class Builder:
    """What realising a context needs: the executor (with the solver), split sizes, the proposer format
    and prompt settings, and for multistep the proposer backend and its sampling settings."""

    executor: HarnessExecutor
    n_feedback: int
    n_score: int
    fmt: ProposerFormat
    n_traces: int = 4
    style: Style = "canonical"
    budgets: Budgets | None = None
    proposer: Any = None  # a ModelBackend (multistep only)
    candidates: int = 2
    temperature: float = 1.0
    max_tokens: int = 512
    render: Any = None  # chat formats: messages -> the prompt text the policy continues (model_io.chat_text)

    def prompt(self, task: Any, harness: Harness, fb: Any, history: list[Any], rng_seed: int) -> str:
        """The context's prompt text in this builder's format (the test-time prompt, rendered)."""
        p = self.fmt.render(PromptContext(task, harness, fb, history, style=self.style, n_traces=self.n_traces,
                                          rng_seed=rng_seed))
        if isinstance(p, str):
            return p
        if self.render is None:
            raise ValueError("a chat format needs a render function")
        return str(self.render(p))

    async def realise(self, plan: ContextPlan, tasks: dict[str, Any]) -> Context:
        """The context's harness (for multistep, after ``plan.rounds`` rounds of revision by the policy,
        each through ``rounds.revise``/``rounds.select``) and its prompt."""
        from harnesslearn.evaluation import evaluate
        from harnesslearn.propose.rounds import prompt_seed, revise, sequential

        task = tasks[plan.task_spec]

        async def feedback(h: Harness, _round: int = 0) -> Any:
            return await evaluate(h, task, "feedback", self.n_feedback, plan.seed, self.executor, self.budgets,
                                  progress=False)

        async def score(h: Harness) -> float | None:
            ev = await evaluate(h, task, "score", self.n_score, plan.seed, self.executor, self.budgets, progress=False)
            return ev.J

        async def propose(r: int, parent: Harness, parent_J: float | None, prompt: Any) -> Any:
            return await revise(parent, prompt, self.fmt, self.proposer, self.candidates, score=score, seed=plan.seed,
                                round=r, temperature=self.temperature, max_tokens=self.max_tokens, concurrent=False)

        harness, parent_J = seed_harness(plan.seed_harness, task, plan.seed), None
        history: list[Any] = []
        if plan.rounds:
            if self.proposer is None:
                raise ValueError("multistep contexts need a proposer backend")
            harness, parent_J, history = await sequential(
                harness, await score(harness), plan.rounds, feedback=feedback, propose=propose,
                prompt=lambda h, fb, hist, r: self.prompt(task, h, fb, hist, prompt_seed(plan.seed, r)))
        # the prompt of the round that would come next, as adaptation would render it
        prompt = self.prompt(task, harness, await feedback(harness), history, prompt_seed(plan.seed, plan.rounds + 1))
        return Context(plan.id, plan.task_spec, plan.seed, harness, prompt, plan.rounds, parent_J)


def load_tasks(specs: Sequence[str]) -> dict[str, Any]:
    """The training tasks by spec; a family whose feedback or score split holds no problems (a small file)
    is a UserError here, before any runtime opens: its contexts could show nothing or score nothing."""
    from harnesslearn.errors import UserError
    from harnesslearn.tasks import load_task

    tasks = {s: load_task(s) for s in dict.fromkeys(specs)}
    for spec, task in tasks.items():
        for split in ("feedback", "score"):
            if not task.problems(split, 1, 0):
                raise UserError(f"families: the {split} split of {spec} holds no problems (too few in the task for "
                                "its split fractions)")
    return tasks


async def realise_contexts(plans: list[ContextPlan], builder: Builder, tasks: dict[str, Any]) -> list[Context]:
    """Every planned context, evaluated concurrently (the executor bounds the parallelism)."""
    return list(await asyncio.gather(*(builder.realise(p, tasks) for p in plans)))


class ContextStream:
    """The contexts at plan positions ``first``, ``first + 1``, ... realised as the trainer reads them:
    while it works on one, ``ahead`` more are being realised on ``loop`` (0: each is realised when asked,
    on the caller's thread; multistep contexts need that, as they run the policy being trained).
    A context ``keep`` refuses (e.g. too long a prompt) is skipped; ``max_skips`` refused in a row
    raise ``UserError(refused)``. ``positions``: the plan position of every row handed out, in order
    (where a resumed run goes on); ``take_waited()``: seconds the reader waited since the last call."""

    def __init__(self, plan_at: Callable[[int], ContextPlan], realise: Callable[[ContextPlan], Awaitable[Context]],
                 loop: asyncio.AbstractEventLoop, *, first: int = 0, ahead: int = 0,
                 keep: Callable[[Context], bool] = lambda c: True, max_skips: int = 1000,
                 refused: str = "every context was refused") -> None:
        self.plan_at, self.realise, self.loop = plan_at, realise, loop
        self.first, self.ahead, self.keep, self.max_skips, self.refused = first, ahead, keep, max_skips, refused
        self.positions: list[int] = []
        self.waited_total = 0.0  # seconds the reader waited for contexts, in all
        self._taken = 0.0  # waited_total at the last take_waited()

    def take_waited(self) -> float:
        w, self._taken = self.waited_total - self._taken, self.waited_total
        return w

    def _start(self, pos: int) -> Future[Context]:
        async def one() -> Context:
            return await self.realise(self.plan_at(pos))

        return asyncio.run_coroutine_threadsafe(one(), self.loop)

    def rows(self) -> Iterator[dict[str, Any]]:
        """Training rows (``Context.row``), endlessly (the plan repeats epoch after epoch)."""
        pending: deque[tuple[int, Future[Context]]] = deque()
        nxt, skips = self.first, 0
        try:
            while True:
                while len(pending) <= self.ahead:
                    pending.append((nxt, self._start(nxt)))
                    nxt += 1
                pos, fut = pending.popleft()
                t = time.perf_counter()
                ctx = fut.result()
                self.waited_total += time.perf_counter() - t
                if not self.keep(ctx):
                    skips += 1
                    if skips >= self.max_skips:
                        raise UserError(self.refused)
                    continue
                skips = 0
                self.positions.append(pos)
                yield ctx.row()
        finally:
            for _, fut in pending:
                fut.cancel()
