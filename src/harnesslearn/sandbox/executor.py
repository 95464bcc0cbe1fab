"""The executor: runs ``solve(model, question)`` of one harness on many problems in sandboxed
workers, brokers their model and tool calls, and returns one ``RunRecord`` per problem.

Trust split: the ``Problem`` objects (with gold answers), the tools (the task's search), the
solver and the budgets stay in this process. A worker receives the harness source, the question
and its limits, and nothing else. Scoring is not done here (see ``harnesslearn.evaluation``),
and the executor knows nothing of tasks: it gets the tool names and the search function
(``Tools``, built by ``evaluation.task_tools``).

Pool: one slot per concurrent problem. Each slot keeps one pre-started FRESH worker that waits
for a single job; it is used once and never reused. After the job everything running as the
slot's uid is killed and the next worker is spawned in the background, so the spawn cost
(~40 ms under bwrap) is off the critical path.

Failures: a harness failure is a record with a status, never an exception. An infrastructure
failure (solver unreachable after its own retries, a sandbox that would not start) makes the
executor retry the whole problem run ``infra_retries`` times; if it still fails the record has
status ``infra_error`` (never scored).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from harnesslearn.errors import InfraError, UserError
from harnesslearn.models.base import ModelBackend
from harnesslearn.sandbox import preflight
from harnesslearn.sandbox.broker import Broker, InvalidRequest, Outcome
from harnesslearn.sandbox.cgroup import SlotCgroup
from harnesslearn.sandbox.launcher import (
    LaunchSpec,
    Limits,
    ProtocolError,
    Worker,
    children_of,
    find_bwrap,
    find_python,
    kill_uid,
    kill_uids,
    start_worker,
)
from harnesslearn.sandbox.records import Budgets, RunRecord, Status, Tools
from harnesslearn.sandbox.uids import UidLease, lease_uid, release_all
from harnesslearn.tasks.base import Problem

Isolation = Literal["auto", "bwrap", "landlock", "none"]
ISOLATIONS: tuple[Isolation, ...] = typing.get_args(Isolation)


def _ended_how(sig: int | None) -> str:
    if sig is None:
        return "exited"
    try:
        return f"was killed by {signal.Signals(sig).name}"
    except ValueError:
        return f"was killed by signal {sig}"


def _kill_orphan(spawn: asyncio.Future[Worker]) -> None:
    """Done-callback of a spawn whose caller went away: kill the worker it made (synchronously)."""
    if spawn.cancelled() or spawn.exception() is not None:
        return
    w = spawn.result()
    for child in children_of(w.proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)
    w.send_signal(signal.SIGKILL)
    if w.uid is not None:
        kill_uid(w.uid, within=w.cgroup)


def _use_pidfd_watcher() -> None:
    """On Python 3.11, wait for children through pidfds in the event loop instead of asyncio's default
    ThreadedChildWatcher, which starts one thread per child: with a fresh worker per problem, those
    thread starts (about 6 ms each under load, waiting for the GIL) were the event loop's largest
    cost after fork. Python 3.12 already uses pidfds on Linux."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        watcher = asyncio.get_child_watcher()
        if not isinstance(watcher, asyncio.PidfdChildWatcher):
            watcher = asyncio.PidfdChildWatcher()
            asyncio.set_child_watcher(watcher)
        watcher.attach_loop(asyncio.get_running_loop())  # 3.11's pidfd watcher serves one loop at a time


def default_concurrency() -> int:
    return max(1, min(16, 2 * (os.cpu_count() or 1)))


class IsolationError(UserError):
    """The sandbox does not hold on this machine (the preflight self-test failed)."""


@dataclass
class ExecutorConfig:
    """How the executor runs workers. Every field has a safe default."""

    concurrency: int = field(default_factory=default_concurrency)  # problems in flight, one slot uid each
    # pre-started slots beyond ``concurrency``: free slots are taken in turn (oldest first), so the slot of a
    # problem that just ended rebuilds (kill, sweeps, spawn) while the next problem runs in a spare one
    spare_slots: int = 0
    isolation: str = "auto"  # "auto" (bwrap, else landlock) | "bwrap" | "landlock" | "none" (unsafe, loud)
    python: str | None = None  # worker interpreter; default: first world-executable python3.11/python3 in /usr
    infra_retries: int = 2  # extra attempts of a problem run after an infrastructure failure
    preflight: bool = True  # run the hostile self-test before the first run
    model_concurrency: int | None = None  # concurrent solver calls over all problems (None: = concurrency)
    output_max_bytes: int = 64 * 1024  # stdout / stderr kept per run (the rest is drained and dropped)
    answer_max_chars: int = 100_000  # longer answers are bad_result
    max_frame_bytes: int = 8 * 1024 * 1024  # larger frames from a worker are a protocol violation
    workdir_mb: int = 64  # tmpfs work dir (bwrap)
    nproc: int = 64  # RLIMIT_NPROC (processes + threads of the slot uid)
    nofile: int = 64  # RLIMIT_NOFILE
    fsize_mb: int = 16  # RLIMIT_FSIZE (largest file a worker can write)
    python_tool_timeout_s: float = 5.0  # cap on the python tool's timeout
    python_tool_memory_mb: int = 256
    python_tool_output_chars: int = 10_000
    start_timeout_s: float = 20.0  # a worker not ready by then is an infrastructure failure
    slot_uid_base: int = 61000  # as root: each slot leases two free uids >= this (worker, python tool)

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATIONS:
            raise UserError(f"unknown isolation {self.isolation!r}; choose one of {', '.join(ISOLATIONS)}")
        if self.concurrency < 1:
            raise UserError("concurrency must be at least 1")
        if self.spare_slots < 0:
            raise UserError("spare slots must not be negative")


async def _first_frame(w: Worker, abandon: asyncio.Event, timeout: float) -> dict[str, Any] | None:
    """The worker's next frame; TimeoutError after ``timeout`` s or as soon as ``abandon`` is set."""
    recv = asyncio.ensure_future(w.recv())
    stop = asyncio.ensure_future(abandon.wait())
    try:
        await asyncio.wait({recv, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if not recv.done():
        recv.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await recv
        raise TimeoutError
    return recv.result()


class _Slot:
    """One concurrent lane: a uid (as root) and at most one pre-started worker."""

    def __init__(self, index: int, uid: int | None, tool_uid: int | None, cgroup: SlotCgroup | None = None) -> None:
        self.index, self.uid, self.tool_uid, self.cgroup = index, uid, tool_uid, cgroup
        self.pending: asyncio.Task[Worker] | None = None
        self.tool_lock = asyncio.Lock()


class Executor:
    """Runs harness source on problems in sandboxed workers. Use as ``async with Executor(...)``."""

    def __init__(self, solver: ModelBackend, config: ExecutorConfig | None = None) -> None:
        self.solver = solver
        self.config = config or ExecutorConfig()
        self.spec: LaunchSpec | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: list[_Slot] = []
        self._free: asyncio.Queue[_Slot] | None = None  # FIFO: the slot that waited longest comes first
        self._inflight: asyncio.Semaphore | None = None  # problems in flight (``concurrency``)
        self._model_sem: asyncio.Semaphore | None = None
        self._leases: list[UidLease] = []
        self._cgroups: list[SlotCgroup] = []
        self._tool_runs: set[asyncio.Future[str]] = set()  # python tool runs, abandoned ones included

    @property
    def isolation(self) -> str | None:
        """The isolation mode in use (resolved from "auto" at start), or None before start."""
        return self.spec.isolation if self.spec else None

    @property
    def slot_uids(self) -> list[int]:
        """The uids leased by this executor's slots now (worker and python-tool uid of each; as
        root only). Leases are file locks, so no two executors on a machine ever hold the same."""
        return [lease.uid for lease in self._leases]

    def stats(self) -> dict[str, Any]:
        """Where runs execute: this machine, the isolation mode and the number of slots."""
        return {"executor": "local", "isolation": self.isolation, "slots": self.config.concurrency,
                "spare_slots": self.config.spare_slots}

    async def __aenter__(self) -> Executor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ start-up
    def _new_slot(self, index: int) -> _Slot:
        """A slot with two leased uids (worker, python tool) as root; the current uid otherwise
        (contained by bwrap's user and pid namespaces; nothing to sweep by uid)."""
        if os.geteuid() != 0:
            return _Slot(index, None, None)
        leases = [lease_uid(self.config.slot_uid_base), lease_uid(self.config.slot_uid_base)]
        self._leases += leases
        for lease in leases:
            kill_uid(lease.uid)  # a crashed earlier holder may have left processes behind
        cgroup = SlotCgroup.create(str(leases[0].uid))
        if cgroup is not None:
            self._cgroups.append(cgroup)
        return _Slot(index, leases[0].uid, leases[1].uid, cgroup)

    def _resolve_spec(self, isolation: str) -> LaunchSpec:
        python = find_python(self.config.python)
        bwrap = find_bwrap()
        if isolation == "bwrap" and bwrap is None:
            raise IsolationError("bubblewrap is not installed (apt-get install bubblewrap), or use isolation 'landlock'")
        return LaunchSpec(isolation, python, bwrap, self.config.workdir_mb)

    async def start(self) -> None:
        """Choose and check the isolation mode (preflight), then pre-start one worker per slot.
        Raises IsolationError when no mode holds (isolation 'none' skips every check)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None:
            self._kill_stale_pool()
        self._loop = loop
        _use_pidfd_watcher()
        self._model_sem = asyncio.Semaphore(self.config.model_concurrency or self.config.concurrency)
        if self.spec is None:
            self.spec = await self._choose_spec()
        self._slots = [self._new_slot(i) for i in range(self.config.concurrency + self.config.spare_slots)]
        self._inflight = asyncio.Semaphore(self.config.concurrency)
        self._free = asyncio.Queue()
        for s in self._slots:
            self._refill(s)
            self._free.put_nowait(s)

    async def _choose_spec(self) -> LaunchSpec:
        wanted = self.config.isolation
        if wanted == "none":
            return self._resolve_spec("none")
        modes = [m for m in ("bwrap", "landlock") if wanted in (m, "auto")]
        if wanted == "auto" and find_bwrap() is None:
            modes = ["landlock"]
        reasons = []
        for mode in modes:
            spec = self._resolve_spec(mode)
            if not self.config.preflight:
                return spec
            failures = await self._preflight(spec)
            if not failures:
                return spec
            reasons.append(f"{mode}: {'; '.join(failures)}")
        raise IsolationError(
            "sandbox isolation does not hold on this machine (" + " | ".join(reasons)
            + "); fix it, or run without isolation with --unsafe-no-sandbox (isolation='none')"
        )

    async def _preflight(self, spec: LaunchSpec) -> list[str]:
        self.spec = spec
        n_leases = len(self._leases)
        slot = self._new_slot(0)
        canary = preflight.Canary()
        problem = Problem(id="preflight", question=canary.question(), answer=None)
        try:
            rec = await self._attempt(slot, preflight.PROBE, problem, Tools(), Budgets(timeout_s=15.0), refill=False)
            return preflight.check(spec.isolation, rec.answer, str(rec.status), rec.error, canary)
        except InfraError as e:
            return [f"sandbox would not start: {e}"]
        finally:
            if slot.pending is not None:  # cancelled while its worker was starting: kill that worker too
                await asyncio.shield(self._kill_pending(slot.pending))
            self.spec = None
            canary.cleanup()
            if slot.cgroup is not None:
                slot.cgroup.remove()
                self._cgroups.remove(slot.cgroup)
            release_all(self._leases[n_leases:])
            del self._leases[n_leases:]

    def _refill(self, slot: _Slot, used: Worker | None = None) -> None:
        """Start the slot's next fresh worker in the background, after tearing down ``used``
        (kill it and sweep the slot's uids) so that nothing of the last run can touch it."""
        assert self.spec is not None
        slot.pending = asyncio.create_task(self._recycle(slot, used, spawn=True))  # type: ignore[arg-type]

    async def _recycle(self, slot: _Slot, used: Worker | None, spawn: bool) -> Worker | None:
        if used is not None:
            await used.kill(sweep=False)
            uids = tuple(u for u in (used.uid, slot.tool_uid) if u is not None)
            if uids:  # the run's uid and the slot's python-tool uid, in one sweep: of the slot's cgroup
                # when the worker was born in it (its python-tool workers were then too: same launch)
                await asyncio.to_thread(kill_uids, uids, 50, used.cgroup)
        if not spawn:
            return None
        assert self.spec is not None
        starting = asyncio.ensure_future(start_worker(
            self.spec, slot.uid, output_cap=self.config.output_max_bytes,
            max_frame=self.config.max_frame_bytes, start_timeout_s=self.config.start_timeout_s, cgroup=slot.cgroup,
        ))
        try:
            worker = await asyncio.shield(starting)
        except asyncio.CancelledError:
            # Cancelled mid-spawn (the loop's final sweep when nobody closed the executor, or a
            # caller that gave up): asyncio's subprocess creation, cancelled between fork and its
            # pipes, waits for the pipes to close, which the sandboxed process keeps open, so the
            # sweep never ended (issue 19). Kill the slot's processes now and the worker, if the
            # spawn still completes, then.
            if slot.uid is not None:
                kill_uid(slot.uid)
            starting.add_done_callback(_kill_orphan)
            raise
        return worker

    def _kill_stale_pool(self) -> None:
        """Kill pre-started workers left from another event loop (synchronously)."""
        for s in self._slots:
            t, s.pending = s.pending, None
            if t is not None and t.done() and not t.cancelled() and t.exception() is None:
                worker = t.result()
                for child in children_of(worker.proc.pid):  # first, so that the launcher reaps it
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(child, signal.SIGKILL)
                time.sleep(0.05)
                worker.send_signal(signal.SIGKILL)
                if worker.pidfd is not None:
                    os.close(worker.pidfd)
                    worker.pidfd = None
            for uid in (s.uid, s.tool_uid):
                if uid is not None:
                    kill_uid(uid)
        self._remove_cgroups()
        release_all(self._leases)
        self._leases = []

    def _remove_cgroups(self) -> None:
        for cg in self._cgroups:
            cg.remove()
        self._cgroups = []

    async def aclose(self) -> None:
        """Kill the pool; afterwards nothing started by this executor is running."""
        if self._loop is not asyncio.get_running_loop():
            self._kill_stale_pool()
            self._slots, self._loop = [], None
            return
        if self._tool_runs:  # abandoned python tool runs end by themselves, soon
            await asyncio.gather(*self._tool_runs, return_exceptions=True)
        pending = []
        for s in self._slots:
            t, s.pending = s.pending, None
            if t is not None:
                pending.append(t)
        # all slots at once: one at a time, a pool of 128 took over a minute to close
        await asyncio.gather(*(self._kill_pending(t) for t in pending))
        self._remove_cgroups()
        release_all(self._leases)
        self._slots, self._loop, self._leases = [], None, []

    @staticmethod
    async def _kill_pending(t: asyncio.Task[Worker]) -> None:
        try:
            w = await t
        except (InfraError, asyncio.CancelledError):
            return
        await w.kill()

    # ------------------------------------------------------------------ running
    async def run(self, source: str, problems: Sequence[Problem], tools: Tools | None = None,
                  budgets: Budgets | None = None, on_record: Callable[[RunRecord], None] | None = None,
                  settle: bool = True) -> list[RunRecord]:
        """One RunRecord per problem, in order. Never raises for a harness failure. ``tools``:
        what the harnesses may call besides the solver (``evaluation.task_tools(task)``).
        ``settle``: wait for the slots' next workers to finish spawning before returning (needed
        when the caller's event loop may end right after; a long-lived loop can skip it)."""
        await self.start()
        assert self._free is not None and self.spec is not None
        if self.spec.isolation == "none":
            sys.stderr.write("WARNING: harnesslearn is running harness code WITHOUT a sandbox "
                             "(--unsafe-no-sandbox): it can read, write and reach anything you can.\n")
        budgets = budgets or Budgets()
        tools = tools or Tools()
        free, inflight = self._free, self._inflight
        assert inflight is not None

        async def one(problem: Problem) -> RunRecord:
            async with inflight:
                slot = await free.get()
                try:
                    rec = await self._run_problem(slot, source, problem, tools, budgets)
                finally:
                    free.put_nowait(slot)
            if on_record is not None:
                on_record(rec)
            return rec

        tasks = [asyncio.ensure_future(one(p)) for p in problems]
        try:
            records = list(await asyncio.gather(*tasks))
        except BaseException:
            # cancelled (Ctrl-C) or failed: end every problem's task before the caller closes
            # the pool, so that none of them refills a slot after ``aclose``
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        # Let the background refills finish spawning: a process creation cancelled half-way
        # (when the caller's event loop ends right after this call) can hang asyncio's shutdown.
        refills = [s.pending for s in self._slots if s.pending is not None]
        if refills and settle:
            await asyncio.wait(refills)
        return records

    async def _run_problem(
        self, slot: _Slot, source: str, problem: Problem, tools: Tools, budgets: Budgets
    ) -> RunRecord:
        errors = []
        for _ in range(self.config.infra_retries + 1):
            try:
                return await self._attempt(slot, source, problem, tools, budgets)
            except InfraError as e:
                errors.append(str(e))
        return RunRecord(problem.id, Status.INFRA_ERROR, error=" | ".join(errors)[-2000:])

    async def _take(self, slot: _Slot) -> Worker:
        """The slot's pre-started worker. A caller cancelled while waiting for it (Ctrl-C, a deadline)
        leaves it with the slot, to be closed by ``aclose`` like any pre-started worker: cancelling the
        spawn itself would leave a process and its pipes behind."""
        if slot.pending is None:
            self._refill(slot)
        t = slot.pending
        assert t is not None
        try:
            worker = await asyncio.shield(t)
        except asyncio.CancelledError:
            raise
        except BaseException:  # the spawn failed: the next attempt starts a fresh one
            if slot.pending is t:
                slot.pending = None
            raise
        if slot.pending is t:
            slot.pending = None
        return worker

    async def _attempt(
        self, slot: _Slot, source: str, problem: Problem, tools: Tools, budgets: Budgets, refill: bool = True,
    ) -> RunRecord:
        """One run of ``source`` on ``problem`` in the slot's fresh worker. Raises InfraError."""
        cfg = self.config
        worker = await self._take(slot)
        broker = Broker(
            solver=self.solver, budgets=budgets, model_semaphore=self._model_sem or asyncio.Semaphore(1),
            python_tool=lambda code, timeout: self._python_tool(slot, code, timeout),
            search_tool=lambda query, k: self._search(tools, problem, query, k),
            tools=tools.names, answer_max_chars=cfg.answer_max_chars,
        )
        limits = Limits(cpu_s=budgets.timeout_s + 1, memory_mb=budgets.memory_mb, nproc=cfg.nproc,
                        fsize_mb=cfg.fsize_mb, nofile=cfg.nofile)
        job = {"type": "job", "mode": "solve", "source": source, "question": problem.question,
               "limits": limits.job_dict(), "answer_max_chars": cfg.answer_max_chars}
        oom_before = 0
        if slot.cgroup is not None:
            slot.cgroup.set_limits((2 * budgets.memory_mb + cfg.python_tool_memory_mb + cfg.workdir_mb) << 20,
                                   2 * cfg.nproc)
            oom_before = slot.cgroup.oom_kills()
        t0 = time.perf_counter()
        try:
            try:
                await worker.send(job)
            except (ConnectionError, OSError) as e:
                raise InfraError(f"worker died before receiving its job: {e}") from None
            outcome = await self._serve_until_deadline(broker, worker, t0, budgets.timeout_s)
            wall = time.perf_counter() - t0
            if outcome.status is None:  # channel closed: give the process a moment to end
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(worker.proc.wait(), 1.0)
                outcome = self._from_exit(worker)
                if outcome.status == Status.CRASH and slot.cgroup and slot.cgroup.oom_kills() > oom_before:
                    outcome = Outcome(Status.MEMORY, error="killed by the out-of-memory killer (slot memory cap)")
            if outcome.status != Status.TIMEOUT:
                # A worker exits right after its final frame, which ends its pid namespace: the
                # output pipes then reach EOF and the captured evidence is complete.
                await asyncio.wait(worker.drains, timeout=0.2)
            stdout, stderr = worker.stdout.text(), worker.stderr.text()
        finally:
            # Teardown (kill, uid sweeps) and the next spawn run in the background; the slot's
            # next job waits for them, so nothing of this run can touch it.
            if refill:
                self._refill(slot, worker)
            else:
                await self._recycle(slot, worker, spawn=False)
        return RunRecord(
            problem_id=problem.id, status=outcome.status or Status.NO_RESULT,
            answer=outcome.answer if outcome.status == Status.OK else None, error=outcome.error,
            calls=broker.calls, wall_s=wall, stdout=stdout, stderr=stderr,
        )

    @staticmethod
    async def _serve_until_deadline(broker: Broker, worker: Worker, t0: float, timeout_s: float) -> Outcome:
        """Serve the worker until its final frame or until ``timeout_s`` of the harness's own
        time has passed. Time spent waiting on the solver model (``broker.model_wait_s()``) does
        not count: a call in flight keeps pushing the deadline out; calls are bounded by the
        call and token budgets and by the backend's own timeouts and retries."""
        serve = asyncio.ensure_future(broker.serve(worker))
        try:
            while True:
                remaining = t0 + timeout_s + broker.model_wait_s() - time.perf_counter()
                if remaining <= 0:
                    return Outcome(Status.TIMEOUT, error=f"no result within {timeout_s:g} s (not counting model calls)")
                done, _ = await asyncio.wait({serve}, timeout=remaining)
                if done:
                    return serve.result()
        finally:
            if not serve.done():
                serve.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serve

    @staticmethod
    def _from_exit(worker: Worker) -> Outcome:
        """Status of a worker whose channel closed without a final frame (exit code is never success)."""
        if worker.proc.returncode is None:
            return Outcome(Status.NO_RESULT, error="closed its result channel without a result")
        sig = worker.exit_signal()
        if sig == signal.SIGXCPU:
            return Outcome(Status.TIMEOUT, error="CPU time limit exceeded")
        if sig is not None:
            return Outcome(Status.CRASH, error=f"worker {_ended_how(sig)}")
        return Outcome(Status.NO_RESULT, error=f"worker exited (code {worker.proc.returncode}) without a result")

    # ------------------------------------------------------------------ tools
    async def _python_tool(self, slot: _Slot, code: str, timeout: float) -> str:
        """Run model-written code in a NEW sandbox with tighter limits; its output or 'Error: ...'.

        The tool run (worker start, job, teardown) is a task of its own, shielded from the caller:
        when the harness's run ends mid-call (its timeout cancels the broker), cancelling a
        process creation or a teardown half-way would make asyncio reap the child behind its
        child watcher's back (the stray "Unknown child process pid N, will report returncode
        255" line) or wait forever for pipes that never connected (a hung run). Instead the
        cancelled caller only marks the run abandoned: it stops waiting for a result, kills its
        worker and ends by itself; ``aclose`` waits for such runs."""
        abandon = asyncio.Event()
        run = asyncio.ensure_future(self._tool_run(slot, code, timeout, abandon))
        self._tool_runs.add(run)
        run.add_done_callback(self._tool_runs.discard)
        try:
            return await asyncio.shield(run)
        except asyncio.CancelledError:
            abandon.set()
            raise

    async def _tool_run(self, slot: _Slot, code: str, timeout: float, abandon: asyncio.Event) -> str:
        assert self.spec is not None
        cfg = self.config
        timeout = max(0.1, min(timeout, cfg.python_tool_timeout_s))
        limits = Limits(cpu_s=timeout + 1, memory_mb=cfg.python_tool_memory_mb, nproc=16, fsize_mb=4, nofile=32)
        async with slot.tool_lock:
            if abandon.is_set():
                return "Error: abandoned"
            try:
                w = await start_worker(self.spec, slot.tool_uid, output_cap=4096, max_frame=1 << 20,
                                       start_timeout_s=cfg.start_timeout_s, cgroup=slot.cgroup)
            except InfraError:
                if abandon.is_set():  # nobody waits for it: the slot's sweep may have killed it
                    return "Error: abandoned"
                raise
            try:
                await w.send({"type": "job", "mode": "code", "code": code, "limits": limits.job_dict(),
                              "output_max_chars": cfg.python_tool_output_chars})
                frame = await _first_frame(w, abandon, timeout)
            except TimeoutError:
                return f"Error: timed out after {timeout:g} s"
            except ProtocolError as e:
                return f"Error: {e}"
            except (ConnectionError, OSError):
                frame = None
            finally:
                await w.kill()  # sweeps the tool worker's uid (slot.tool_uid) until nothing of it is left
        if frame and frame.get("type") == "result" and type(frame.get("answer")) is str:
            return str(frame["answer"])[: cfg.python_tool_output_chars]
        return f"Error: the code {_ended_how(w.exit_signal())} without finishing"

    @staticmethod
    async def _search(tools: Tools, problem: Problem, query: str, k: int) -> list[dict[str, str]]:
        """The task's search (its indexes live with the task), in a thread: it may build an index."""
        if tools.search is None:
            raise InvalidRequest("search is not available for this task")
        try:
            return list(await asyncio.to_thread(tools.search, problem, query, k))
        except LookupError as e:
            raise InvalidRequest(str(e) or "search is not available for this task") from None
