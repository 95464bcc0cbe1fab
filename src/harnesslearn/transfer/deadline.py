"""Hard deadlines for a stage's work: jobs run until the clock says stop, then in-flight jobs are
cancelled, what finished is kept, and the stage says how far it got.

``run_until`` starts up to ``concurrency`` jobs at once (all of them by default), records each as it
finishes (``on_done`` runs in the event loop, so it may append rows to a file), and at ``deadline``
cancels the rest. Once three jobs have finished (not failed) it starts no new one that the median of their durations
says would end after the deadline (a cancelled job's work is lost: the H200's SFT-data stage cancelled
32 contexts at its deadline, each minutes into its work). ``StageCounts.partial`` is True when any job did not finish: the stage is then
marked ``partial`` with these counts rather than ``done``. ``DeadlineCallback`` does the same for a
training loop: it stops transformers' Trainer at the deadline (after the step in progress; the
adapter of the steps done is still saved).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

J = TypeVar("J")
R = TypeVar("R")


@dataclass
class StageCounts:
    jobs: int = 0
    finished: int = 0
    failed: int = 0  # raised an exception (logged), not cancelled
    cancelled: int = 0  # in flight at the deadline
    not_started: int = 0  # never started: the deadline came first

    @property
    def partial(self) -> bool:
        return self.finished + self.failed < self.jobs

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _log(msg: str) -> None:
    print(f"[transfer {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


async def run_until(jobs: Sequence[J], deadline: float, run_one: Callable[[J], Awaitable[R]],
                    on_done: Callable[[J, R], None], *, concurrency: int | None = None,
                    label: str = "jobs") -> StageCounts:
    """Run ``jobs`` until ``deadline`` (a ``time.time()``); see the module docstring."""
    counts = StageCounts(jobs=len(jobs))
    todo = list(jobs)
    limit = concurrency or len(todo) or 1
    running: dict[asyncio.Future[R], J] = {}
    started: dict[asyncio.Future[R], float] = {}
    took: list[float] = []

    def may_start() -> bool:
        now = time.time()
        typical = sorted(took)[len(took) // 2] if len(took) >= 3 else 0.0
        return now + typical < deadline

    try:
        while todo or running:
            while todo and len(running) < limit and may_start():
                job = todo.pop(0)
                new = asyncio.ensure_future(run_one(job))
                running[new], started[new] = job, time.time()
            left = deadline - time.time()
            if left <= 0 or not running:
                break
            done, _ = await asyncio.wait(running, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                job, t_start = running.pop(fut), started.pop(fut)
                if fut.exception() is not None:
                    counts.failed += 1
                    _log(f"{label}: {job} failed: {fut.exception()!r}")
                    continue
                on_done(job, fut.result())
                counts.finished += 1
                took.append(time.time() - t_start)  # finished jobs only: a quick failure is not a duration
    finally:
        counts.not_started = len(todo)
        counts.cancelled = len(running)
        for fut in running:
            fut.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
            _log(f"{label}: deadline: {len(running)} in flight cancelled, {len(todo)} not started")
    return counts


def deadline_callback(deadline: float) -> Any:
    """A transformers ``TrainerCallback`` that stops training once the next step would end after
    ``deadline`` (judged by the last step's duration). ``.stopped`` and ``.steps`` say what happened."""
    from transformers import TrainerCallback

    class DeadlineCallback(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.t = time.time()
            self.stopped = False
            self.steps: list[float] = []

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.t = time.time()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            now = time.time()
            self.steps.append(round(now - self.t, 2))
            self.t = now
            if now + self.steps[-1] > deadline:
                control.should_training_stop = True
                self.stopped = True

    return DeadlineCallback()
