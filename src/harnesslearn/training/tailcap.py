"""The reward's cap on the slow tail of harness runs (``grpo.reward_cap_s``).

An update's reward phase lasts as long as its slowest harness run. ``budgets.timeout_s`` does not bound that:
it counts the harness's own time only, and time spent waiting on the solver model (which dominates on a
loaded GPU server) pushes its deadline out. ``TailCap`` wraps the reward's executor and gives each run a
wall-clock cap with the model waits counted: a run still going after ``cap_s`` is stopped (its task is
cancelled, which kills the worker and rebuilds the slot as any run's end does) and recorded as status
``timeout`` -- a harness failure that scores 0 on that problem, as the paper's timeout does, and never
``infra_error`` (the reward stays a number, not None).

Where the cap's clock starts: when the run holds one of ``width`` lanes of this wrapper (the executor's own
slot count, ``runtime.concurrency``), so a run queued behind the batch's other runs is not charged for the
queue. What it does NOT exclude: a slot taken meanwhile by work outside the wrapper (the contexts realised
ahead of the trainer on the same executor), and the wait for the slot's worker to finish spawning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from harnesslearn.sandbox.protocol import HarnessExecutor
from harnesslearn.sandbox.records import Budgets, RunRecord, Status, Tools
from harnesslearn.tasks.base import Problem


class TailCap:
    """A ``HarnessExecutor`` that runs each problem through ``inner`` under a wall-clock cap (see the module)."""

    def __init__(self, inner: HarnessExecutor, cap_s: float, width: int) -> None:
        self.inner, self.cap_s = inner, cap_s
        self.lanes = asyncio.Semaphore(max(1, width))  # bound to the loop of its first use (the reward's)
        self.capped = 0  # runs stopped by the cap so far

    @property
    def isolation(self) -> str | None:
        return self.inner.isolation

    async def start(self) -> None:
        await self.inner.start()

    async def aclose(self) -> None:  # the runtime owns the inner executor and closes it
        return None

    def stats(self) -> dict[str, Any]:
        return {**self.inner.stats(), "reward_cap_s": self.cap_s, "capped_runs": self.capped}

    async def run(self, source: str, problems: Sequence[Problem], tools: Tools | None = None,
                  budgets: Budgets | None = None, on_record: Callable[[RunRecord], None] | None = None,
                  settle: bool = True) -> list[RunRecord]:
        async def one(problem: Problem) -> RunRecord:
            async with self.lanes:
                try:
                    (rec,) = await asyncio.wait_for(self.inner.run(source, [problem], tools, budgets, settle=settle),
                                                    self.cap_s)
                except TimeoutError:
                    self.capped += 1
                    rec = RunRecord(problem.id, Status.TIMEOUT, wall_s=self.cap_s,
                                    error=f"stopped by the reward's cap of {self.cap_s:g} s (wall clock, model waits "
                                          "counted)")
            if on_record is not None:
                on_record(rec)
            return rec

        return list(await asyncio.gather(*(one(p) for p in problems)))
