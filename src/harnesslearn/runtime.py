"""The solver runtime: the one place that opens the solver (and its engine) and the sandboxed executor.

    async with SolverRuntime("vllm:/models/qwen", concurrency=192) as rt:
        ev = await evaluate(harness, task, "score", 16, 0, rt.executor)

On entry it loads the solver (``load_model``: an in-process engine, or a server it starts, such as
``vllm:``), warms it (weights loaded, server answering) in a thread, and starts the executor (local
or Ray), whose pre-started workers are then ready. On ANY exit (normal, exception, cancellation,
Ctrl-C) it closes the executor and then the solver, each within ``close_timeout_s``, shielded from a
second cancellation, so the process can end: a pool whose spawns were cancelled half-way by
``asyncio.run``'s final sweep used to hang the interpreter at exit (issue 19). A failure while
opening closes what was already opened before the exception goes on.

The CLI, training and the experiments open the solver and the sandbox through this class; nothing
else starts an executor by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from harnesslearn.models.base import ModelBackend
from harnesslearn.sandbox.executor import ExecutorConfig
from harnesslearn.sandbox.executors import build_executor, parse_executor
from harnesslearn.sandbox.protocol import HarnessExecutor

if TYPE_CHECKING:
    from harnesslearn.settings.groups import RuntimeSettings


def raise_fd_limit(wanted: int = 65536) -> int:
    """Raise the soft limit of open files towards the hard limit (each sandbox slot holds uid lease
    files and a pre-started worker's pipes: 192 slots need well over the common default of 1024).
    Returns the soft limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return int(soft)


def served_limit(spec: str, concurrency: int | None) -> int | None:
    """The solver's own limit on calls in flight: for a served model (``openai:``, whose default is 32)
    as many as the runs in flight, so that the limit is the executor's and the engine's, not the
    client's (stretch 4 on the H200: 32 solver calls running of 96 contexts in flight, the engine 20 %
    busy); other providers keep their defaults (a local engine sizes its batch by it)."""
    return concurrency if concurrency and spec.split(":", 1)[0] == "openai" else None


def _say(msg: str) -> None:
    sys.stderr.write(f"harnesslearn: {msg}\n")
    sys.stderr.flush()


class SolverRuntime:
    """Solver + executor as one async context (see the module docstring).

    ``solver``: a model spec or an already built backend (then it is closed on exit too, unless
    ``own_solver=False``). ``executor``: ``local`` | ``ray`` | ``ray:auto`` | ... (``--executor``).
    ``config``: the sandbox configuration; ``concurrency``: problems in flight (per node for Ray).
    ``log``: a callable for progress lines (default: stderr when ``verbose``)."""

    def __init__(self, solver: str | ModelBackend, *, executor: str = "local", config: ExecutorConfig | None = None,
                 concurrency: int | None = None, base_url: str | Sequence[str] | None = None, warm: bool = True,
                 own_solver: bool = True, close_timeout_s: float = 60.0, verbose: bool = False,
                 log: Callable[[str], None] | None = None) -> None:
        from harnesslearn.models import load_model

        parse_executor(executor)  # a bad option fails before anything is loaded
        self._executor_opt, self._concurrency = executor, concurrency
        self._warm, self._own = warm, own_solver
        self.close_timeout_s = close_timeout_s
        self._log = log or (_say if verbose else (lambda _m: None))
        self.timings: dict[str, float] = {}
        # Built here, in the caller's thread and before any event loop: a bad spec fails at once, and a
        # Ray executor connects now (Ray Client initialising inside a running loop failed under load).
        # Nothing runs yet: weights, servers and sandbox workers start on entry.
        self.solver: ModelBackend | None = (load_model(solver, base_url=base_url, concurrency=served_limit(solver, concurrency))
                                            if isinstance(solver, str) else solver)
        self._spec = solver if isinstance(solver, str) else solver.spec
        source = (solver, {"base_url": base_url} if base_url is not None else {}) if isinstance(solver, str) else None
        self.executor: HarnessExecutor | None = build_executor(executor, self.solver, config, concurrency=concurrency,
                                                               solver_source=source)

    @classmethod
    def of(cls, solver: str | ModelBackend, runtime: RuntimeSettings, **kw: Any) -> SolverRuntime:
        """The runtime a settings tree's ``runtime`` group describes (executor, isolation, slots, worker
        interpreter); ``kw``: the other arguments of the constructor."""
        config = ExecutorConfig(isolation=runtime.isolation, spare_slots=runtime.spare_slots,
                                python=runtime.worker_python)
        return cls(solver, executor=runtime.executor, config=config, concurrency=runtime.concurrency, **kw)

    # ------------------------------------------------------------------ open
    async def __aenter__(self) -> SolverRuntime:
        try:
            await self._open()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _open(self) -> None:
        if self.solver is None or self.executor is None:
            raise RuntimeError("a SolverRuntime is opened once")
        t0 = time.monotonic()
        raise_fd_limit()
        warm = getattr(self.solver, "warm", None)
        if self._warm and callable(warm):
            self._log(f"runtime: loading the solver {self._spec}")
            await asyncio.to_thread(warm)
        self.timings["solver_s"] = round(time.monotonic() - t0, 2)
        t1 = time.monotonic()
        self._log(f"runtime: solver ready in {self.timings['solver_s']} s; starting the executor "
                  f"({self._executor_opt}, {self._concurrency or 'default'} slots)")
        await self.executor.start()
        self.timings["executor_s"] = round(time.monotonic() - t1, 2)
        self._log(f"runtime: executor ready in {self.timings['executor_s']} s "
                  f"(isolation {self.executor.stats().get('isolation')})")

    # ------------------------------------------------------------------ close
    async def aclose(self) -> None:
        """Close the executor, then the solver; each bounded by ``close_timeout_s`` and shielded from
        cancellation (a cancelled caller still gets CancelledError once both are closed)."""
        ex, self.executor = self.executor, None
        solver, self.solver = self.solver, None
        cancelled = False
        for what, closer in (("executor", ex.aclose if ex is not None else None),
                             ("solver", solver.aclose if solver is not None and self._own else None)):
            if closer is None:
                continue
            task = asyncio.ensure_future(closer())
            try:
                await asyncio.wait_for(asyncio.shield(task), self.close_timeout_s)
            except asyncio.CancelledError:
                cancelled = True
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(task, self.close_timeout_s)
            except TimeoutError:
                self._log(f"runtime: closing the {what} took over {self.close_timeout_s:g} s; left behind")
                task.cancel()
            except Exception as e:  # noqa: BLE001 - a failed close must not hide the run's own outcome
                self._log(f"runtime: closing the {what} failed: {type(e).__name__}: {e}")
        if cancelled:
            raise asyncio.CancelledError

    # ------------------------------------------------------------------ helpers
    @property
    def sandbox(self) -> HarnessExecutor:
        """The executor, while the runtime is open (RuntimeError outside ``async with``)."""
        if self.executor is None:
            raise RuntimeError("the solver runtime is not open")
        return self.executor

    @property
    def base_url(self) -> str | None:
        """The solver server's URL where the runtime started one (``vllm:``), for other clients."""
        inner: Any = getattr(self.solver, "inner", self.solver)
        server = getattr(inner, "server", None)
        return getattr(server, "base_url", None)

    def stats(self) -> dict[str, Any]:
        return {"solver": self.solver.stats() if self.solver else None,
                "executor": self.executor.stats() if self.executor else None, "timings": dict(self.timings)}
