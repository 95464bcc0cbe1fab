"""User tasks from a JSONL file: ``jsonl:PATH?scorer=exact|f1|numeric|MODULE:FUNCTION|FILE.py:FUNCTION``.

One JSON object a line with ``id``, ``question`` and ``answer`` (a string, a number, or a list of
acceptable answers); other fields go to the problem's metadata. A JSON list of such objects is
read too. Ids must be unique: the split of a problem is decided by its id.

Scorers (each the best over the acceptable answers):
- ``exact`` (default): equal after collapsing white space and lower-casing. Nothing else is
  forgiven: "Paris." does not match "Paris".
- ``f1``: SQuAD token F1 (lower-case, no punctuation, no articles); details also hold ``em``.
- ``numeric``: the whole answer must spell one number (see ``textmatch.parse_number``: "1,000",
  "3/4", "$5", "2.5e3"); equal within relative tolerance 1e-6. A number inside prose scores 0:
  extracting the answer is the harness's job. Every gold answer must parse, checked at load time.
- your own, ``MODULE:FUNCTION`` or ``FILE.py:FUNCTION``: ``score(answer, problem) -> float`` in [0, 1]
  (``tasks.custom``: a raise or a value out of range is a UserError, never a silent 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError
from harnesslearn.tasks.base import FileTask, Problem, Score, SplitSizes, check_question
from harnesslearn.tasks.files import read_records, resolve_path
from harnesslearn.tasks.textmatch import best_em_f1, numbers_match, parse_number

SCORERS = ("exact", "f1", "numeric")


def _norm_ws(s: str) -> str:
    return " ".join(s.split()).lower()


def _golds(value: Any, where: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    out = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, str | int | float):
            raise UserError(f"{where}: 'answer' must be a string, a number, or a list of them")
        out.append(str(a))
    if not out:
        raise UserError(f"{where}: 'answer' is an empty list")
    return out


def load_jsonl_problems(path: Path, scorer: str) -> list[Problem]:
    name = path.name
    problems: list[Problem] = []
    seen: set[str] = set()
    for where, row in read_records(path):
        at = f"{name}: {where}"
        missing = [k for k in ("id", "question", "answer") if k not in row]
        if missing:
            raise UserError(f"{at}: missing field(s) {', '.join(missing)}")
        qid, question = row["id"], row["question"]
        if not isinstance(qid, str | int) or isinstance(qid, bool) or str(qid) == "":
            raise UserError(f"{at}: 'id' must be a non-empty string or an integer")
        if not isinstance(question, str) or not question.strip():
            raise UserError(f"{at}: 'question' must be a non-empty string")
        check_question(at, qid, question)
        if str(qid) in seen:
            raise UserError(f"{at}: duplicate id {qid!r}")
        golds = _golds(row["answer"], at)
        if scorer == "numeric":
            bad = [g for g in golds if parse_number(g) is None]
            if bad:
                raise UserError(f"{at}: answer {bad[0]!r} is not a number (scorer=numeric)")
        seen.add(str(qid))
        meta = {k: v for k, v in row.items() if k not in ("id", "question", "answer")}
        meta["family"] = path.stem
        answer: str | list[str] = golds[0] if len(golds) == 1 else golds
        problems.append(Problem(id=str(qid), question=question, answer=answer, metadata=meta))
    if not problems:
        raise UserError(f"{name}: no problems in the file")
    return problems


class JsonlTask(FileTask):
    """Problems from a user's JSONL file, with a chosen scorer."""

    def __init__(
        self,
        path: str,
        *,
        scorer: str = "exact",
        spec: str | None = None,
        split_sizes: SplitSizes | None = None,
    ) -> None:
        self._fn = None
        if scorer not in SCORERS:
            if ":" not in scorer:
                raise UserError(f"jsonl: unknown scorer {scorer!r}; choose one of {', '.join(SCORERS)}, or your own "
                                "as MODULE:FUNCTION or FILE.py:FUNCTION")
            from harnesslearn import pyref

            self._fn = pyref.load(scorer, "scorer")  # score(answer, problem) -> float in [0, 1]
            self.scorer_digest = pyref.source_digest(self._fn)
        self.path = resolve_path(path, what="jsonl")
        self.scorer = scorer
        self.name = self.family = self.path.stem
        self.spec = spec or f"jsonl:{path}"
        if split_sizes is not None:
            self.split_sizes = split_sizes
        self._problems = load_jsonl_problems(self.path, scorer)

    def __len__(self) -> int:
        return len(self._problems)

    @property
    def description(self) -> str:
        if self._fn is not None:
            return (f"User task '{self.name}' ({len(self._problems)} problems from {self.path.name}); scored from 0 "
                    f"to 1 by {self.scorer}.")
        how = {
            "exact": "exact match after collapsing white space and ignoring case",
            "f1": "token F1 against the gold answer (lower-cased, punctuation and articles removed)",
            "numeric": "numeric equality (relative tolerance 1e-6); the answer must be just the number",
        }[self.scorer]
        return f"User task '{self.name}' ({len(self._problems)} problems from {self.path.name}); scored by {how}."


    def score(self, answer: str, problem: Problem) -> Score:
        golds = problem.answer if isinstance(problem.answer, list) else [problem.answer]
        if not isinstance(answer, str):
            return Score(0.0)
        if self._fn is not None:
            from harnesslearn.tasks.custom import checked_score

            return checked_score(self._fn, self.scorer, answer, problem)
        if self.scorer == "exact":
            return Score(float(any(_norm_ws(answer) == _norm_ws(g) for g in golds)))
        if self.scorer == "f1":
            em, f1 = best_em_f1(answer, golds)
            return Score(f1, {"em": em, "f1": f1})
        got = parse_number(answer)
        if got is None:
            return Score(0.0, {"parsed": 0.0})
        ok = any(numbers_match(got, g) for g in (parse_number(s) for s in golds) if g is not None)
        return Score(float(ok), {"parsed": 1.0})
