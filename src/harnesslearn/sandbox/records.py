"""What one harness run on one problem produces (trusted side)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

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


MAX_TIMEOUT_S = 86_400.0  # one solve() call: a day


def _limit(default: float, help: str, lo: float, hi: float, option: str | None = None) -> Any:
    """A budget field, declared as ``harnesslearn.settings`` declares a setting (this floor does not import it)."""
    return Field(default, description=help, ge=lo, le=hi,
                 json_schema_extra={"option": option, "affects_results": True, "lo": lo, "hi": hi})


class Budgets(BaseModel):
    """Per-problem limits enforced by the broker in the trusted process. A settings group (strict, frozen;
    validated on construction; the settings tree composes it and names its errors)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    timeout_s: float = _limit(60.0, "Wall-clock seconds of one solve() call (model waits not counted).", 0.001,
                              MAX_TIMEOUT_S, "--timeout")
    max_calls: int = _limit(16, "Solver calls allowed per problem.", 1, 1_000_000)
    max_tokens: int = _limit(8192, "Solver tokens (prompt + completion, all calls) allowed per problem.", 1, 10**9)
    memory_mb: int = _limit(1024, "Address space of the worker, MiB.", 16, 1_048_576)
    tool_calls: int = _limit(16, "python / search tool calls allowed per problem.", 0, 1_000_000)


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
