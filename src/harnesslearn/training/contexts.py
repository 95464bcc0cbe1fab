"""GRPO contexts: proposer prompts built exactly as at test time.

A context is (training family, harness state, feedback): the harness is evaluated on the
feedback split through the executor and ``proposer.build_prompt`` renders the prompt, the same
call test-time adaptation makes. Variants:

- format-varied: ``style="varied"`` in ``build_prompt`` (section order, trace and aggregate
  formats chosen per context) and several seed-harness styles (``seed_harnesses``, see
  ``seed_styles.py``);
- multistep: the harness of a context is the best after ``k`` revision rounds of a proposer
  (the current policy, through ``PolicyBackend``), ``k`` drawn in ``[0, max_rounds]``; each round
  proposes ``candidates`` revisions of the current best with ``proposer.propose``, scores them on
  the score split, and keeps one only if it is strictly better (the ``sequential`` rule); the
  prompt then carries those rounds as history.

``plan_contexts`` is a pure function (which family, seed harness, problem seed and round count
each context gets); ``realise_contexts`` runs the evaluations, all contexts concurrently.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError
from harnesslearn.evaluation import improves
from harnesslearn.harness import SEEDS, Harness, check_source, load_harness, normalise
from harnesslearn.proposer import Prime, Style
from harnesslearn.sandbox.records import Budgets
from harnesslearn.seeding import child_seed


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
        return {
            "prompt": self.prompt,
            "context_id": self.id,
            "task_spec": self.task_spec,
            "seed": self.seed,
            "parent_source": self.harness.source,
            "rounds": self.rounds,
        }


def task_spec(family: str) -> str:
    """``codeio`` -> ``rg:codeio``; a full spec (with a ``:``) is kept as is."""
    return family if ":" in family else f"rg:{family}"


def seed_harness(ref: str) -> Harness:
    """A seed harness from a shipped name, ``style:NAME`` or a ``.py`` path."""
    if ref.startswith("style:"):
        from harnesslearn.training.seed_styles import style_source

        src = normalise(style_source(ref.split(":", 1)[1]))
        if check_source(src) is not None:  # a bug in seed_styles.py, not a user mistake
            raise ValueError(f"seed style {ref} is not a valid harness")
        return Harness(source=src, name=ref)
    if ref not in SEEDS and not Path(ref).is_file():
        raise UserError(f"seed harness {ref!r}: give {', '.join(SEEDS)}, style:NAME or a .py file")
    return load_harness(ref)


def plan_contexts(
    families: list[str], seed_harnesses: list[str], n: int, *, seed: int, multistep_max_rounds: int = 0
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
    """What realising a context needs: the executor (with the solver), split sizes, prompt
    settings, and for multistep the proposer backend and its sampling settings."""

    executor: Any
    n_feedback: int
    n_score: int
    n_traces: int = 4
    style: Style = "canonical"
    prime: Prime = "search"
    budgets: Budgets | None = None
    proposer: Any = None  # a ModelBackend (multistep only)
    candidates: int = 2
    temperature: float = 1.0
    max_tokens: int = 512
    form: str = "plain"  # plain: build_prompt; chat: build_messages rendered by ``render``
    render: Any = None  # chat form: messages -> the prompt text the policy continues (model_io.chat_text)

    def prompt(self, task: Any, harness: Harness, fb: Any, history: list[Any], rng_seed: int) -> str:
        """The context's prompt text in this builder's form (the test-time prompt)."""
        from harnesslearn.proposer import build_messages, build_prompt

        if self.form == "chat":
            if self.render is None:
                raise ValueError("the chat form needs a render function")
            msgs = build_messages(task, harness, fb, history, style=self.style, n_traces=self.n_traces,
                                  rng_seed=rng_seed, prime="rewrite" if self.prime == "rewrite" else "none")
            return str(self.render(msgs))
        return build_prompt(task, harness, fb, history, style=self.style, prime=self.prime,
                            n_traces=self.n_traces, rng_seed=rng_seed)

    async def realise(self, plan: ContextPlan, tasks: dict[str, Any]) -> Context:
        from harnesslearn.edits import apply_proposal
        from harnesslearn.evaluation import evaluate
        from harnesslearn.proposer import Attempt, propose

        task = tasks[plan.task_spec]
        harness = seed_harness(plan.seed_harness)
        history: list[Any] = []
        parent_J: float | None = None

        async def score(h: Harness) -> float | None:
            ev = await evaluate(h, task, "score", self.n_score, plan.seed, self.executor, self.budgets, progress=False)
            return ev.J

        for rnd in range(plan.rounds):
            if self.proposer is None:
                raise ValueError("multistep contexts need a proposer backend")
            fb = await evaluate(harness, task, "feedback", self.n_feedback, plan.seed, self.executor, self.budgets,
                                progress=False)
            if parent_J is None:
                parent_J = await score(harness)
            prompt = self.prompt(task, harness, fb, history, plan.seed + rnd)
            texts = await propose(self.proposer, prompt, self.candidates, temperature=self.temperature,
                                  max_tokens=self.max_tokens, seed=plan.seed * 31 + rnd * 7)
            best: tuple[float, Harness] | None = None
            for i, text in enumerate(texts):
                ed = apply_proposal(harness.source, text)
                J = None
                if ed.valid and ed.source is not None:
                    child = Harness(ed.source, parent_id=harness.id, edit=text)
                    J = await score(child)
                    if J is not None and improves(J, parent_J) and (best is None or J > best[0]):
                        best = (J, child)
                history.append(Attempt(rnd + 1, i, ed.valid, str(ed.reason) if ed.reason else None, parent_J, J, text))
            if best is not None:
                parent_J, harness = best
        fb = await evaluate(harness, task, "feedback", self.n_feedback, plan.seed, self.executor, self.budgets,
                            progress=False)
        prompt = self.prompt(task, harness, fb, history, plan.seed)
        return Context(plan.id, plan.task_spec, plan.seed, harness, prompt, plan.rounds, parent_J)


def load_tasks(specs: list[str]) -> dict[str, Any]:
    from harnesslearn.tasks import load_task

    return {s: load_task(s) for s in dict.fromkeys(specs)}


async def realise_contexts(plans: list[ContextPlan], builder: Builder, tasks: dict[str, Any]) -> list[Context]:
    """Every planned context, evaluated concurrently (the executor bounds the parallelism)."""
    return list(await asyncio.gather(*(builder.realise(p, tasks) for p in plans)))
