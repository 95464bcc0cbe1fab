"""User code and slow services off the event loop, under a deadline: a user's scorer, a tracking client.

Code that blocks the event loop also blocks Ctrl-C: the loop's SIGINT handler runs only when the loop
gets control back (``aio.run``). Such calls run here in a daemon thread, so the loop (and Ctrl-C) stays
live and the process can exit while one is still stuck; past its deadline the caller stops waiting
(``TimeoutError``) and the thread is left behind, never joined. A thread cannot be killed: a call
that never returns keeps its thread until the process ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _start(fn: Callable[..., T], args: tuple[Any, ...], done: Callable[[concurrent.futures.Future[T]], None] | None,
           name: str) -> concurrent.futures.Future[T]:
    fut: concurrent.futures.Future[T] = concurrent.futures.Future()

    def target() -> None:
        try:
            result = fn(*args)
        except BaseException as e:  # noqa: BLE001 - SystemExit too: it is the caller's to judge
            fut.set_exception(e)
        else:
            fut.set_result(result)
        if done is not None:
            done(fut)

    threading.Thread(target=target, name=name, daemon=True).start()
    return fut


def call_sync(fn: Callable[..., T], *args: Any, timeout_s: float, name: str = "harnesslearn-offloop") -> T:
    """``fn(*args)`` in a daemon thread; its result or its exception (any ``BaseException``), or
    ``TimeoutError`` after ``timeout_s`` (the thread goes on, abandoned)."""
    fut = _start(fn, args, None, name)
    try:
        return fut.result(timeout_s)
    except concurrent.futures.TimeoutError:
        raise TimeoutError(f"no return in {timeout_s:g} s") from None


async def call(fn: Callable[..., T], *args: Any, timeout_s: float, name: str = "harnesslearn-offloop") -> T:
    """``call_sync`` awaited: the event loop (and Ctrl-C, which cancels the awaiting task) stays live."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not waiter.done():
            waiter.set_result(None)

    def wake(_: concurrent.futures.Future[T]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle)

    fut = _start(fn, args, wake, name)
    try:
        await asyncio.wait_for(waiter, timeout_s)
    except TimeoutError:
        raise TimeoutError(f"no return in {timeout_s:g} s") from None
    return fut.result()
