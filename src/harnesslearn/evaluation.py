"""Evaluation: run a harness on one split of a task and score it in the trusted process.

J(h) is the mean score over the problems whose run was not an infrastructure failure;
completion rate is the share of those whose run ended with status ``ok``. Problems hit by an
infrastructure failure (status ``infra_error``) get ``score=None`` and are kept out of both
averages; if every problem failed that way, J is None ("could not score", never 0).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from harnesslearn.harness import Harness
from harnesslearn.sandbox.records import Budgets, CallRecord, RunRecord, Status, Tools
from harnesslearn.tasks.base import Problem, Task

if TYPE_CHECKING:
    from harnesslearn.sandbox.protocol import HarnessExecutor


def pick(obj: Any, *names: str) -> dict[str, Any]:
    """The named attributes of ``obj`` as a dict, in that order (the JSON of a record)."""
    return {n: getattr(obj, n) for n in names}


@dataclass
class ProblemResult:
    id: str
    question: str
    gold: Any
    score: float | None  # None: infrastructure failure, not scored
    details: dict[str, float]
    status: str
    answer: str | None
    calls: int
    tokens: int
    wall_s: float
    error: str | None
    record: RunRecord = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        out = pick(self, "id", "score", "status", "answer", "calls", "tokens", "wall_s", "error", "details")
        out["wall_s"] = round(self.wall_s, 4)
        out["model_calls"] = [_call_json(c) for c in self.record.calls]
        return out


def clip(x: Any, n: int = 400) -> Any:
    """A value shortened for a trace: long strings keep their head and tail, lists their first 8 items."""
    if isinstance(x, str):
        return x if len(x) <= n else x[: n // 2] + " ... " + x[-n // 2 :]
    if isinstance(x, list):
        return [clip(v, n) for v in x[:8]]
    return x


def _call_json(c: CallRecord) -> dict[str, Any]:
    """One model or tool call of a run, clipped: the evidence of what the solver really said."""
    req = c.request or {}
    return {
        "kind": c.kind,
        "prompt": clip(req.get("prompt", req.get("code", req.get("query")))),
        "completion": clip(c.response),
        "tokens": c.prompt_tokens + c.completion_tokens,
        "latency_s": round(c.latency_s, 4),
        "error": c.error,
    }


@dataclass
class EvaluationSummary:
    """What one evaluation of a harness on a split comes to (``Evaluation`` adds its problems; the
    store's ``EvaluationRow`` adds its row's id, run, round and purpose)."""

    harness_id: str
    task: str
    split: str
    n: int
    seed: int
    J: float | None
    completion_rate: float | None
    solver_calls: int
    tokens: int
    wall_s: float


@dataclass
class Evaluation(EvaluationSummary):
    problems: list[ProblemResult]

    @property
    def infra_failures(self) -> int:
        return sum(1 for p in self.problems if p.score is None)

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for p in self.problems:
            counts[p.status] = counts.get(p.status, 0) + 1
        return counts

    def to_json(self) -> dict[str, Any]:
        out = pick(self, *(f.name for f in fields(EvaluationSummary)))
        out.update(wall_s=round(self.wall_s, 3), infra_failures=self.infra_failures,
                   status_counts=self.status_counts(), problems=[p.to_json() for p in self.problems])
        return out


def task_tools(task: Task) -> Tools:
    """The tools a harness may call on ``task``: its tool names and, when it allows ``search``,
    the task's own search (its indexes stay with the task, across evaluations)."""
    if "search" not in task.tools:
        return Tools(tuple(task.tools))
    return Tools(tuple(task.tools), task.search, task.search_documents)


def improves(candidate_J: float | None, parent_J: float | None) -> bool:
    """Whether a harness scoring ``candidate_J`` replaces one scoring ``parent_J``: strictly
    higher (a tie keeps the parent). None means "could not score": it never replaces anything,
    and anything scored replaces it. The one selection rule of adaptation, multistep training
    contexts and the report."""
    return candidate_J is not None and (parent_J is None or candidate_J > parent_J)


SCORE_TIMEOUT_S = 60.0  # one answer's scoring, in the trusted process: a scorer past it is the scorer's error


def score_record(task: Task, prob: Problem, rec: RunRecord) -> ProblemResult:
    """One run record scored in the trusted process (the worker is gone by now)."""
    score: float | None
    details: dict[str, float] = {}
    if rec.status == Status.INFRA_ERROR:
        score = None
    elif rec.status == Status.OK and rec.answer is not None:
        s = task.score(rec.answer, prob)
        score, details = min(1.0, max(0.0, float(s.value))), dict(s.details)
    else:
        score = 0.0
    return ProblemResult(id=prob.id, question=prob.question, gold=prob.answer, score=score, details=details,
                         status=str(rec.status), answer=rec.answer, calls=rec.n_calls, tokens=rec.tokens,
                         wall_s=rec.wall_s, error=rec.error, record=rec)


def score_records(task: Task, problems: list[Problem], records: list[RunRecord]) -> list[ProblemResult]:
    """Score each run record in the trusted process, here (``score_off_loop``: the same, off the event loop)."""
    return [score_record(task, prob, rec) for prob, rec in zip(problems, records, strict=True)]


async def score_off_loop(task: Task, problems: list[Problem], records: list[RunRecord],
                         timeout_s: float = SCORE_TIMEOUT_S) -> list[ProblemResult]:
    """``score_records`` with each answer scored off the event loop (``offloop``) under ``timeout_s``: a
    scorer (a user's code, in this process) that hangs never blocks Ctrl-C, and one past the deadline is a
    UserError naming it and the problem."""
    from harnesslearn.errors import UserError
    from harnesslearn.offloop import call

    out = []
    for prob, rec in zip(problems, records, strict=True):
        try:
            out.append(await call(score_record, task, prob, rec, timeout_s=timeout_s, name="harnesslearn-scorer"))
        except TimeoutError:
            raise UserError(f"the scorer of {task.spec} did not return within {timeout_s:g} s on problem {prob.id!r} "
                            "(a scorer runs in the trusted process, under that deadline per answer)") from None
    return out


def summarise(
    harness: Harness, task: Task, split: str, seed: int, results: list[ProblemResult], wall_s: float
) -> Evaluation:
    scored = [p for p in results if p.score is not None]
    J = sum(p.score for p in scored if p.score is not None) / len(scored) if scored else None
    completion = sum(1 for p in scored if p.status == Status.OK) / len(scored) if scored else None
    return Evaluation(
        harness_id=harness.id,
        task=task.spec,
        split=split,
        n=len(results),
        seed=seed,
        J=J,
        completion_rate=completion,
        solver_calls=sum(p.calls for p in results),
        tokens=sum(p.tokens for p in results),
        wall_s=wall_s,
        problems=results,
    )


async def evaluate(
    harness: Harness,
    task: Task,
    split: str,
    n: int,
    seed: int,
    executor: HarnessExecutor,
    budgets: Budgets | None = None,
    progress: bool = True,
    problems: list[Problem] | None = None,
) -> Evaluation:
    """Run ``harness`` on the first ``n`` problems of ``split`` and score them."""
    probs = problems if problems is not None else task.problems(split, n, seed)
    t0 = time.perf_counter()
    if progress:
        from harnesslearn.progress import ProgressBar

        with ProgressBar(f"{split} {harness.short_id}", total=len(probs)) as bar:
            records = await executor.run(harness.source, probs, task_tools(task), budgets,
                                         on_record=lambda r: bar.advance())
    else:
        records = await executor.run(harness.source, probs, task_tools(task), budgets)
    results = await score_off_loop(task, probs, records)
    return summarise(harness, task, split, seed, results, time.perf_counter() - t0)
