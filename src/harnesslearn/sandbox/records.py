"""What one harness run on one problem produces (trusted side)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harnesslearn.tasks.base import Problem


class Status(StrEnum):
    OK = "ok"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    CRASH = "crash"
    HARNESS_ERROR = "harness_error"
    NO_RESULT = "no_result"
    BAD_RESULT = "bad_result"
    BUDGET_EXCEEDED = "budget_exceeded"
    INFRA_ERROR = "infra_error"  # not a harness failure: never scored, kept out of averages


@dataclass(frozen=True)
class Budgets:
    """Per-problem limits enforced by the broker in the trusted process."""

    timeout_s: float = 60.0  # wall clock of one solve() call
    max_calls: int = 16  # model calls
    max_tokens: int = 8192  # prompt + completion tokens over all calls
    memory_mb: int = 1024  # address space of the worker
    tool_calls: int = 16  # python/search tool calls


@dataclass(frozen=True)
class Tools:
    """What a harness may call besides the solver: the tool names its task allows, and the
    task's ``search`` (trusted side; blocking, so the executor runs it in a thread). The executor
    needs nothing else of the task."""

    names: tuple[str, ...] = ()
    search: Callable[[Problem, str, int], list[dict[str, str]]] | None = None
    # the documents ``search`` reads for a problem (a Ray executor ships them to its nodes)
    documents: Callable[[Problem], list[dict[str, str]] | None] | None = None


@dataclass
class CallRecord:
    kind: str  # "model" | "python" | "search"
    request: dict[str, Any]
    response: Any
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    error: str | None = None


@dataclass
class RunRecord:
    problem_id: str
    status: Status
    answer: str | None = None
    error: str | None = None  # short traceback / reason
    calls: list[CallRecord] = field(default_factory=list)
    wall_s: float = 0.0
    stdout: str = ""
    stderr: str = ""

    @property
    def n_calls(self) -> int:
        return sum(1 for c in self.calls if c.kind == "model")

    @property
    def tokens(self) -> int:
        return sum(c.prompt_tokens + c.completion_tokens for c in self.calls)
