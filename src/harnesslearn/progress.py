"""Progress bars on stderr (counts and rates), quiet when stderr is not a terminal-like sink."""

from __future__ import annotations

import os
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

_console = Console(stderr=True)


def _enabled() -> bool:
    return os.environ.get("HARNESSLEARN_PROGRESS", "1") != "0"


class ProgressBar:
    """``with ProgressBar("label", total=n) as bar: bar.advance()`` -- a bar with count and rate."""

    def __init__(self, label: str, total: int) -> None:
        self.label = label
        self.total = total
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[cyan]{task.fields[rate]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=_console,
            disable=not _enabled(),
            transient=False,
        )
        self._task = self._progress.add_task(label, total=total, rate="")

    def __enter__(self) -> ProgressBar:
        self._progress.start()
        return self

    def advance(self, n: int = 1) -> None:
        self._progress.advance(self._task, n)
        t = self._progress.tasks[0]
        speed = t.speed
        self._progress.update(self._task, rate=f"{speed:.2f}/s" if speed else "")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._progress.stop()
