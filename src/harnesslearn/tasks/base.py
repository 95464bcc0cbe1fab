"""The Task interface: a named source of problems with a scorer.

Tasks and scorers know nothing of the executor. A ``Problem`` carries its gold answer; the
executor only ever sends ``problem.question`` into a sandboxed worker.
"""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

SPLITS = ("feedback", "score", "test")
# A question travels to its sandboxed worker in one frame (8 MiB) with the harness (at most 1 MiB):
# a larger one could never run, so it is refused when the task is read, not failed at run time.
MAX_QUESTION_BYTES = 4 << 20


def check_question(where: str, qid: object, question: str) -> None:
    """A one-line UserError when ``question`` is too large to send to a worker."""
    size = len(question.encode("utf-8", "surrogatepass"))
    if size > MAX_QUESTION_BYTES:
        from harnesslearn.errors import UserError

        raise UserError(f"{where}: question of id {qid!r} is {size / (1 << 20):.1f} MiB; "
                        f"at most {MAX_QUESTION_BYTES >> 20} MiB can be sent to a sandboxed worker")


@dataclass(frozen=True)
class Problem:
    id: str
    question: str
    answer: Any  # gold answer (str, or a list of aliases for QA); never leaves the trusted process
    metadata: dict[str, Any] = field(default_factory=dict)  # e.g. family, paragraphs for search


@dataclass(frozen=True)
class Score:
    value: float  # in [0, 1]; this is what J averages
    details: dict[str, float] = field(default_factory=dict)  # e.g. {"em": 1.0, "f1": 1.0}


@dataclass(frozen=True)
class SplitSizes:
    """Fractions of the problem space given to each split (by a hash of the problem key)."""

    feedback: float = 0.2
    score: float = 0.3
    test: float = 0.5


def split_of(task_name: str, key: str, sizes: SplitSizes = SplitSizes()) -> str:
    """Deterministic split assignment from a problem's content key: identical keys always land
    in the same split, so the three splits are disjoint by construction."""
    h = int.from_bytes(hashlib.sha256(f"{task_name}\0{key}".encode()).digest()[:8], "big")
    u = h / 2**64
    if u < sizes.feedback:
        return "feedback"
    if u < sizes.feedback + sizes.score:
        return "score"
    return "test"


class Task(ABC):
    """A named, deterministic source of problems: ``problems(split, n, seed)``."""

    spec: str  # the spec string it was built from, e.g. "rg:basic_arithmetic"
    name: str  # short name, e.g. "basic_arithmetic"
    family: str  # family for per-family reports ("basic_arithmetic", "musique", ...)
    tools: tuple[str, ...] = ("python",)  # tools reachable from the model handle
    split_sizes: SplitSizes = SplitSizes()
    # the sha256 of a user scorer's source file (None: a scorer of the package): an input of a run, as the
    # prompt templates are, so that a resume refuses to compare J of one metric with J of another
    scorer_digest: str | None = None

    @property
    @abstractmethod
    def description(self) -> str:
        """A short description of the task for the proposer prompt."""

    @abstractmethod
    def candidates(self, seed: int) -> Iterator[Problem]:
        """All problems in a deterministic order for ``seed`` (may be infinite)."""

    @abstractmethod
    def score(self, answer: str, problem: Problem) -> Score:
        """Score an answer string against the problem's gold answer, in [0, 1]."""

    def problem_key(self, problem: Problem) -> str:
        return problem.question

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        """The first ``n`` problems of ``split`` for ``seed``. Deterministic."""
        if split not in SPLITS:
            from harnesslearn.errors import UserError

            raise UserError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        out: list[Problem] = []
        seen: set[str] = set()
        for p in self.candidates(seed):
            key = self.problem_key(p)
            if key in seen or split_of(self.name, key, self.split_sizes) != split:
                continue
            seen.add(key)
            check_question(self.spec, p.id, p.question)
            out.append(p)
            if len(out) >= n:
                break
        return out

    def search_documents(self, problem: Problem) -> list[dict[str, str]] | None:
        """Documents for the ``search`` tool ({"title", "text"}), or None if not a QA task."""
        return None

    def search(self, problem: Problem, query: str, k: int) -> list[dict[str, str]]:
        """The ``search`` tool (trusted side): BM25 over ``search_documents(problem)``, indexes
        kept by this task. LookupError when the task has no documents for the problem."""
        searcher = self.__dict__.get("_searcher")
        if searcher is None:
            from harnesslearn.tools.search import DocumentSearch

            searcher = self.__dict__["_searcher"] = DocumentSearch(self.search_documents)
        return list(searcher(problem, query, k))


class FileTask(Task):
    """A task over a finite list of problems read from a file: candidates are the list shuffled
    by ``Random(seed)``; splits are assigned by problem id (so a question keeps its split)."""

    _problems: Sequence[Problem]

    def candidates(self, seed: int) -> Iterator[Problem]:
        order = list(range(len(self._problems)))
        random.Random(seed).shuffle(order)
        for i in order:
            yield self._problems[i]

    def problem_key(self, problem: Problem) -> str:
        return problem.id
