"""The execution reward: one framework-independent async function.

    r = J + 0.05 * parsed + 0.10 * produced + 0.15 * completion_rate

J is the revised harness's mean score on the score split (partial credit), ``parsed`` whether
the completion's edit blocks parsed, ``produced`` whether applying them produced a valid harness,
``completion_rate`` the share of scored runs that ended with status ``ok``. An unparsed proposal
gets a real 0.0 (it is invalid). The reward is ``None`` -- "could not score", never 0 -- when an
infrastructure failure prevents scoring: the executor raised ``InfraError`` or every run of the
candidate ended with status ``infra_error``. Runs with ``infra_error`` are left out of J and of the
completion rate (as ``evaluate`` leaves them out of J), so a partly failed evaluation is scored on
the runs that did happen.

Any stack can call ``harness_reward`` (TRL here; a larger RL stack elsewhere): it only needs a
parent ``Harness``, the completion text, a ``Task`` and an ``Executor``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from harnesslearn.errors import InfraError
from harnesslearn.harness import Harness
from harnesslearn.sandbox.protocol import HarnessExecutor
from harnesslearn.sandbox.records import Budgets
from harnesslearn.tasks.base import Task

W_PARSED = 0.05
W_PRODUCED = 0.10
W_COMPLETION = 0.15


@dataclass(frozen=True)
class RewardResult:
    reward: float | None  # None: an infrastructure failure prevented scoring
    J: float | None  # mean score on the score split (None when not evaluated because of infra)
    parsed: bool
    produced: bool
    completion_rate: float | None
    valid: bool
    reason: str | None  # the edit's invalid reason, or "infra_error"
    harness_id: str | None = None  # the candidate harness, when produced
    n_scored: int = 0  # runs that counted (not infra_error)
    n_infra: int = 0
    # where a reward's time goes (the rollout log's view of the reward phase): the evaluation's wall seconds,
    # its slowest run, its solver calls, and its runs by status (timeouts are the tail to look for)
    seconds: float = 0.0
    slowest_run_s: float = 0.0
    solver_calls: int = 0
    statuses: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def reward_value(J: float, parsed: bool, produced: bool, completion_rate: float) -> float:
    """r = J + 0.05*parsed + 0.10*produced + 0.15*completion_rate; 0.0 when not parsed."""
    if not parsed:
        return 0.0
    return J + W_PARSED * float(parsed) + W_PRODUCED * float(produced) + W_COMPLETION * completion_rate


async def harness_reward(
    parent: Harness,
    completion: str,
    task: Task,
    executor: HarnessExecutor,
    *,
    n: int,
    seed: int,
    budgets: Budgets | None = None,
) -> RewardResult:
    """Apply ``completion`` to ``parent``, evaluate the candidate on ``n`` score-split problems of
    ``task`` (problem seed ``seed``) through ``executor``, and return the reward with its parts.

    Raises nothing for a bad proposal or a failing harness (those are rewards); exceptions other
    than ``InfraError`` from the evaluation propagate, since they are bugs, not outcomes.
    """
    from harnesslearn.evaluation import evaluate
    from harnesslearn.propose.edits import apply_proposal

    edit = apply_proposal(parent.source, completion)
    if not edit.parsed:
        return RewardResult(0.0, 0.0, False, False, 0.0, False, edit.reason)
    if not (edit.valid and edit.produced and edit.source is not None):
        return RewardResult(reward_value(0.0, True, False, 0.0), 0.0, True, False, 0.0, False, edit.reason)
    child = Harness(source=edit.source, parent_id=parent.id, edit=completion)
    try:
        ev = await evaluate(child, task, "score", n, seed, executor, budgets=budgets, progress=False)
    except InfraError as e:
        return RewardResult(None, None, True, True, None, True, f"infra_error: {e}", child.id)
    n_infra = ev.infra_failures
    timing = (round(ev.wall_s, 3), round(max((p.wall_s for p in ev.problems), default=0.0), 3), ev.solver_calls,
              ev.status_counts())
    if ev.J is None or ev.completion_rate is None:  # every run was an infrastructure failure
        return RewardResult(None, None, True, True, None, True, "infra_error", child.id, 0, n_infra, *timing)
    J, completion_rate = ev.J, ev.completion_rate
    r = reward_value(J, True, True, completion_rate)
    return RewardResult(r, J, True, True, completion_rate, True, None, child.id, len(ev.problems) - n_infra, n_infra,
                        *timing)


async def parent_scores(
    requests: Sequence[RewardRequest],
    executor: HarnessExecutor,
    *,
    n: int,
    budgets: Budgets | None = None,
) -> dict[tuple[str, str, int], float | None]:
    """The J of each request's parent harness on the same ``n`` score-split problems as its candidates
    (problem seed ``seed``), once per (parent, task spec, seed): the bar a candidate must clear to beat what
    it was shown. None where infrastructure failures left nothing scored. Not part of any reward."""
    from harnesslearn.evaluation import evaluate

    async def one(rq: RewardRequest) -> float | None:
        try:
            ev = await evaluate(rq.parent, rq.task, "score", n, rq.seed, executor, budgets=budgets, progress=False)
        except InfraError:
            return None
        return ev.J

    unique = {(rq.parent.id, rq.task.spec, rq.seed): rq for rq in requests}
    done = await asyncio.gather(*(one(rq) for rq in unique.values()))
    return dict(zip(unique.keys(), done, strict=True))


@dataclass(frozen=True)
class RewardRequest:
    """One candidate to score: the parent harness, the proposer's completion, the task and the
    problem seed of the score split used for its context."""

    parent: Harness
    completion: str
    task: Task
    seed: int


async def harness_rewards(
    requests: Sequence[RewardRequest],
    executor: HarnessExecutor,
    *,
    n: int,
    budgets: Budgets | None = None,
) -> list[RewardResult]:
    """Score a whole batch concurrently (one ``asyncio.gather``). Identical requests (same parent,
    completion text, task spec and seed) are evaluated once and share the result."""
    unique: dict[tuple[str, str, str, int], asyncio.Task[RewardResult]] = {}
    order: list[tuple[str, str, str, int]] = []
    for rq in requests:
        key = (rq.parent.id, rq.completion, rq.task.spec, rq.seed)
        order.append(key)
        if key not in unique:
            unique[key] = asyncio.ensure_future(
                harness_reward(rq.parent, rq.completion, rq.task, executor, n=n, seed=rq.seed, budgets=budgets)
            )
    done = await asyncio.gather(*unique.values())
    by_key = dict(zip(unique.keys(), done, strict=True))
    return [by_key[k] for k in order]
