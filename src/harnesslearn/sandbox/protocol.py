"""What the rest of the package needs of an executor, local or Ray: one Protocol, so callers are typed
against it rather than a union of the two classes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from harnesslearn.sandbox.records import Budgets, RunRecord, Tools
from harnesslearn.tasks.base import Problem


@runtime_checkable
class HarnessExecutor(Protocol):
    """Runs ``solve(model, question)`` of one harness on problems in sandboxes (``Executor``,
    ``RayExecutor``)."""

    @property
    def isolation(self) -> str | None: ...

    async def start(self) -> None: ...

    async def run(self, source: str, problems: Sequence[Problem], tools: Tools | None = None,
                  budgets: Budgets | None = None, on_record: Callable[[RunRecord], None] | None = None,
                  settle: bool = True) -> list[RunRecord]: ...

    async def aclose(self) -> None: ...

    def stats(self) -> dict[str, Any]: ...
