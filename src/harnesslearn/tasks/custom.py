"""Bring your own task and metric: a task built from a list of problems (or a JSONL file of them) and a
scoring function ``score(answer, problem) -> float`` in [0, 1] (partial credit allowed).

    from harnesslearn.tasks.custom import custom_task

    def grade(answer: str, problem) -> float:
        return 1.0 if answer.strip() == problem.answer else 0.0

    task = custom_task("units", [{"id": "q1", "question": "...", "answer": "42"}, ...], grade)

From the command line the same is ``jsonl:FILE?scorer=MODULE:FUNCTION`` or ``jsonl:FILE?scorer=score.py:grade``.
The scorer runs in the trusted process, after the sandboxed harness has returned its answer: the answer
key never enters the sandbox. A scorer that raises, or returns anything but a number in [0, 1], stops the
evaluation with one line naming the scorer and the problem (never a silent 0: a broken metric would look
like a harness that never works).
"""

from __future__ import annotations

import decimal
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError
from harnesslearn.tasks.base import FileTask, Problem, Score, SplitSizes, check_question

ScoreFn = Callable[[str, Problem], float]


def checked_score(fn: ScoreFn, name: str, answer: str, problem: Problem) -> Score:
    """``fn(answer, problem)`` as a Score; a raise or a value outside [0, 1] is a UserError (one line)."""
    try:
        value = fn(answer, problem)
    except (Exception, SystemExit, KeyboardInterrupt) as e:  # noqa: BLE001 - the user's metric: its failure, even
        # sys.exit(0) (which would end the command with exit 0 and nothing said), is theirs to see
        raise UserError(f"the scorer {name} raised {type(e).__name__}: {str(e)[:200]} (problem {problem.id!r})") from None
    # any real number will do (numpy's float32, a Decimal), not a bool (True is no score) nor a str
    number = isinstance(value, numbers.Real | decimal.Decimal) and not isinstance(value, bool) and \
        type(value).__name__ not in ("bool_", "bool")
    as_float = float(value) if number else math.nan
    if not number or not math.isfinite(as_float) or not 0 <= as_float <= 1:
        raise UserError(f"the scorer {name} returned {value!r} for problem {problem.id!r}: a score is a number in "
                        "[0, 1]")
    return Score(as_float)


def _problem(row: Problem | Mapping[str, Any], where: str) -> Problem:
    if isinstance(row, Problem):
        return row
    if not isinstance(row, Mapping) or "id" not in row or "question" not in row:
        raise UserError(f"{where}: a problem needs an 'id' and a 'question' (and usually an 'answer')")
    qid, question = row["id"], row["question"]
    if not isinstance(question, str) or not question.strip():
        raise UserError(f"{where}: 'question' must be a non-empty string")
    check_question(where, qid, question)
    meta = {k: v for k, v in row.items() if k not in ("id", "question", "answer")}
    return Problem(id=str(qid), question=question, answer=row.get("answer"), metadata=meta)


class CustomTask(FileTask):
    """A finite list of problems scored by a function of the user's."""

    def __init__(self, name: str, problems: Iterable[Problem | Mapping[str, Any]], score: ScoreFn, *,
                 description: str | None = None, spec: str | None = None, tools: tuple[str, ...] = ("python",),
                 split_sizes: SplitSizes | None = None) -> None:
        if not callable(score):
            raise UserError(f"task {name!r}: score must be a function score(answer, problem) -> float")
        self.name = self.family = name
        self.spec = spec or f"custom:{name}"
        self.tools = tools
        self._score = score
        self._score_name = getattr(score, "__qualname__", repr(score))
        from harnesslearn.pyref import source_digest

        self.scorer_digest = source_digest(score)
        self._description = description
        probs = [_problem(r, f"{name}: problem {i}") for i, r in enumerate(problems)]
        ids = [p.id for p in probs]
        if not probs:
            raise UserError(f"task {name!r} has no problems")
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise UserError(f"task {name!r}: duplicate problem id {dup!r}")
        self._problems = probs
        if split_sizes is not None:
            self.split_sizes = split_sizes

    def __len__(self) -> int:
        return len(self._problems)

    @property
    def description(self) -> str:
        return self._description or (f"Task '{self.name}' ({len(self._problems)} problems); answers are scored by "
                                     f"{self._score_name}, from 0 to 1.")

    def score(self, answer: str, problem: Problem) -> Score:
        return checked_score(self._score, self._score_name, answer, problem)


def custom_task(name: str, problems: Iterable[Problem | Mapping[str, Any]] | str | Path, score: ScoreFn, *,
                description: str | None = None) -> CustomTask:
    """A task from a list of problems (dicts with ``id``, ``question``, ``answer`` and any other fields, kept
    as metadata; or ``Problem`` objects), or from a JSONL file of them, scored by ``score(answer, problem)``."""
    if isinstance(problems, str | Path):
        from harnesslearn.tasks.files import read_records, resolve_path

        path = resolve_path(str(problems), what=name)
        problems = [row for _, row in read_records(path)]
    return CustomTask(name, problems, score, description=description)
