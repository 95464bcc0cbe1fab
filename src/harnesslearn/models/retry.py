"""Retries with exponential backoff and full jitter, for transient infrastructure faults.

``retry_async(attempt, classify, ...)`` calls ``attempt()`` until it succeeds, the fault is
not transient, or ``max_retries`` retries are spent; then it raises ``InfraError`` (a
transient fault that persisted) or re-raises (a permanent one). It never catches
``BaseException`` (cancellation and KeyboardInterrupt pass straight through).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from harnesslearn.errors import InfraError

T = TypeVar("T")


def backoff_delay(retry: int, base: float, cap: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**retry)] (AWS architecture blog)."""
    return rng.uniform(0.0, min(cap, base * (2**retry)))


async def retry_async(
    attempt: Callable[[], Awaitable[T]],
    classify: Callable[[Exception], tuple[bool, float | None]],
    *,
    max_retries: int,
    base_delay: float = 0.5,
    max_delay: float = 8.0,
    on_fault: Callable[[Exception, bool], None] | None = None,
    rng: random.Random | None = None,
    what: str = "model call",
) -> T:
    """Run ``attempt`` with retries.

    ``classify(exc) -> (transient, retry_after_s)`` decides whether to retry and may give a
    server-requested delay (``Retry-After``), which is used when longer than the backoff
    (capped at ``max_delay``). ``on_fault(exc, will_retry)`` is called for every failed
    attempt, for counting.
    """
    rng = rng or random.Random()
    retry = 0
    while True:
        try:
            return await attempt()
        except Exception as e:
            transient, retry_after = classify(e)
            will_retry = transient and retry < max_retries
            if on_fault is not None:
                on_fault(e, will_retry)
            if not transient:
                raise
            if not will_retry:
                raise InfraError(f"{what} failed after {retry + 1} attempt(s): {type(e).__name__}: {e}") from e
            delay = backoff_delay(retry, base_delay, max_delay, rng)
            if retry_after is not None:
                delay = max(delay, min(retry_after, max_delay))
            retry += 1
            await asyncio.sleep(delay)
