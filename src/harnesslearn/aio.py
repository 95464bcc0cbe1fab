"""Running a command's coroutine: ``asyncio.run`` with a Ctrl-C that ends cleanly.

The first SIGINT cancels the command's task: whatever it opened through ``runtime.SolverRuntime``
closes (the sandbox pool, the model engine), and ``run`` raises KeyboardInterrupt, which the CLI turns
into one ``interrupted`` line and exit 130. Then every task still pending is cancelled and awaited
(bounded), callbacks still queued run, and the loop closes: no "Task was destroyed but it is pending"
pages, no transports finalised after their loop. A second Ctrl-C interrupts at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], *, cleanup_s: float = 30.0) -> T:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    task = loop.create_task(coro)
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()
        loop.remove_signal_handler(signal.SIGINT)  # a second Ctrl-C: the default, at once

    with contextlib.suppress(ValueError, NotImplementedError, RuntimeError):  # not the main thread
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        with contextlib.suppress(ValueError, NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
        try:
            _drain(loop, cleanup_s)
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _drain(loop: asyncio.AbstractEventLoop, timeout: float) -> None:
    """Cancel what is still pending, wait for it (at most ``timeout`` s), let queued callbacks run."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in pending:
        t.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=timeout))
    for _ in range(3):  # connection_lost and pipe callbacks scheduled by the closes above
        loop.run_until_complete(asyncio.sleep(0))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
