"""Evaluation across machines on Ray: ``RayExecutor`` spreads problems over Ray actors, each
running the ordinary sandboxed ``Executor`` on its node.

    from harnesslearn.sandbox import build_executor
    async with build_executor("ray:auto", solver) as ex:      # or RayExecutor(solver, config, RayConfig(...))
        ev = await evaluate(harness, task, "score", 256, 0, ex)

It has the ``Executor`` interface (``start``, ``run``, ``aclose``, ``async with``), so evaluation,
adaptation and training use it unchanged.

Nodes. One actor (``NodeExecutor``) per node by default (``RayConfig.actors`` asks for a number
instead, spread over the nodes). Each runs our ``Executor`` on its node: the same bwrap/Landlock
isolation, seccomp, rlimits and per-slot uids (leased with file locks, so several actors on one
machine never share a slot), and the same preflight self-test when it starts. An actor whose
preflight fails does not take work: the driver names the node on stderr and leaves it out; with no
node left, starting fails with ``IsolationError``. An actor also refuses to serve when its node's
harnesslearn code differs from the driver's (same check, by a hash of the package sources).

Trust split, as locally: the driver sends a problem's id and question (never its answer or
metadata), the harness source, the task's tool names and, for a QA task, the documents its search
tool reads (a large corpus goes once into Ray's object store). The actor sends back the
``RunRecord``; scoring stays in the driver (``evaluation.py``).

Where the solver lives: in the driver. A harness's model calls are brokered on its node (budgets
and the call log, as locally), and the node's broker forwards each call to the driver, which
calls the one solver it has. Why: (1) one solver object means one response cache, one set of
stats, and one view of outstanding requests for the endpoint pool's least-outstanding routing
(per-node solvers would each balance only their own share and keep their own counts); (2) a
``python:`` callable or an in-process model need not exist on every node, and results equal the
local executor's by construction; (3) the solver's credentials never leave the driver. The cost is
two extra hops per model call (about a millisecond on a LAN, small beside an LLM call) and the
driver's network carries prompts and completions; a driver saturated by model traffic is the
limit of this design, far above what the model servers behind it generate. The forwarding uses
plain actor calls, so it works over Ray Client too (which has no streaming generators): each
actor keeps an outbox of pending calls, the driver long-polls it (``poll``) and answers each call
(``respond``).

Faults. A node that dies takes its actor with it: the driver's pending calls to that actor raise
``RayActorError``, and each problem that was in flight there is dispatched again to another actor
(explicit re-dispatch, at most ``RayConfig.redispatch`` times; ``stats()["redispatched"]`` counts
them). Ray restarts the lost actor on a live node when there is room (``max_restarts``); the driver
starts it again (preflight included) and takes it back. A problem that finds no actor left ends
with status ``infra_error``: never scored, kept out of J. Ray notices a dead node through its
health checks (about 15-30 s with Ray's defaults; a crashed actor process is noticed at once).

Dispatch: each problem goes to the actor with the lowest share of its slots in use. Ray places the
actors and carries the calls; the driver only chooses which actor takes the next problem.

Output: Ray prints some notices (a dead raylet's last log lines) on the driver's stdout. While this
executor holds a Ray connection it made itself, ``sys.stdout`` points at stderr, so that a
command's stdout stays one JSON object; it is restored by ``aclose``.

What it does not do: it does not move a problem off a node that is alive but slow, it does not
ship harnesslearn to the nodes (install the same version on each: the driver checks), and the
driver must stay up for the whole run (it holds the answers, the solver and the results).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import socket
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnesslearn.errors import InfraError, MissingExtraError, UserError
from harnesslearn.models.base import Completion, GenerateRequest, ModelBackend
from harnesslearn.sandbox.executor import Executor, ExecutorConfig, IsolationError, default_concurrency
from harnesslearn.sandbox.records import Budgets, RunRecord, Status, Tools
from harnesslearn.tasks.base import Problem

INLINE_DOCS = 64  # search documents up to this many travel with each problem; more go to the object store once
POLL_S = 2.0  # longest wait of one long-poll for model calls
ORPHAN_S = 60.0  # a node's model call with no driver polling for this long fails (InfraError)


@dataclass(frozen=True)
class RayConfig:
    """Where and how wide to run on Ray. Every field has a default that works on one machine."""

    address: str | None = None  # None: this process's Ray if initialised, else a new local instance;
    # "auto" (the cluster this machine belongs to), "HOST:PORT" (a cluster's GCS) or "ray://HOST:PORT" (Ray Client)
    actors: int | None = None  # None: one executor actor per node with CPUs; N: N actors spread over the nodes
    slots_per_actor: int | None = None  # problems in flight per actor (None: the node's default, 2 x cores, <= 16)
    spare_slots: int = 1  # pre-started slots per actor beyond those: a new problem never waits for a worker to spawn
    actor_cpus: float = 1.0  # Ray CPUs reserved by each actor
    redispatch: int = 3  # times one problem is sent again after the actor running it was lost
    actor_restarts: int = 4  # Ray restarts of a lost actor (on a live node, when there is room)
    start_timeout_s: float = 180.0  # an actor not started by then (no room on the cluster, a hung preflight) is dropped
    local_cpus: int | None = None  # CPUs of a new local instance (None: all of this machine's)
    object_store_mb: int = 128  # object store of a new local instance
    # (spec, load_model keywords) of a solver each actor builds for itself and calls directly (``shards:K``);
    # None: the actors forward their model calls to the driver's solver (see "Where the solver lives")
    node_solver: tuple[str, dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if self.actors is not None and self.actors < 1:
            raise UserError("the number of Ray actors must be at least 1")
        if self.slots_per_actor is not None and self.slots_per_actor < 1:
            raise UserError("slots per Ray actor must be at least 1")
        if self.redispatch < 0 or self.actor_cpus < 0 or self.spare_slots < 0:
            raise UserError("redispatch and actor_cpus must not be negative")


# ---------------------------------------------------------------------------------- shared helpers
def import_ray() -> Any:
    """The ``ray`` module, or a one-line MissingExtraError."""
    try:
        import ray
    except ImportError:
        raise MissingExtraError("the Ray executor", "ray", "ray") from None
    return ray


def _ray_exceptions() -> Any:
    return import_ray().exceptions


_FINGERPRINT: str | None = None


def code_fingerprint() -> str:
    """A hash of this harnesslearn's Python sources: driver and nodes must run the same code."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256()
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\1")
        _FINGERPRINT = h.hexdigest()[:16]
    return _FINGERPRINT


async def _get(ref: Any) -> Any:
    """Await an object ref (a native one or a Ray Client one: both have ``future()``). Shielded:
    cancelling the wait must not cancel Ray's own future, which Ray Client later tries to set."""
    inner = asyncio.wrap_future(ref.future())
    inner.add_done_callback(lambda f: f.cancelled() or f.exception())  # an error nobody waits for any more
    return await asyncio.shield(inner)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------------------- the node side
@dataclass(frozen=True)
class Job:
    """What a node receives for one problem: no answer, no metadata."""

    source: str
    problem_id: str
    question: str
    tools: tuple[str, ...]
    budgets: Budgets
    docs: Any = None  # None, a list of {"title", "text"}, or an object ref of a large list (a corpus)


def node_tools(names: tuple[str, ...], docs: list[dict[str, str]] | None, index: Any = None) -> Tools:
    """The tools as a node sees them: the tool names and a search over the shipped documents
    (``index``: a prebuilt index of a shared corpus), nothing to score with."""
    if "search" not in names:
        return Tools(names)
    from harnesslearn.tools.search import index_for_documents

    def search(problem: Problem, query: str, k: int) -> list[dict[str, str]]:
        if docs is None:
            raise LookupError("no documents to search for this problem")
        return list((index or index_for_documents(docs)).search(query, k))

    return Tools(names, search)


class ForwardedSolver(ModelBackend):
    """The node's solver: each call goes into an outbox that the driver long-polls, and waits for
    the driver's answer. Faults come back typed: an ``InfraError`` stays one (the node's executor
    retries the problem), any other error is re-raised under its own type name, so the harness
    and the call log see exactly what they would see locally."""

    spec = "forwarded"

    def __init__(self) -> None:
        self._outbox: deque[tuple[str, GenerateRequest]] = deque()
        self._waiting: dict[str, asyncio.Future[Any]] = {}
        self._ready: asyncio.Event | None = None
        self._polls = 0
        self._last_poll = time.monotonic()

    def _event(self) -> asyncio.Event:
        if self._ready is None:
            self._ready = asyncio.Event()
        return self._ready

    async def generate(self, request: GenerateRequest) -> Completion:
        cid = uuid.uuid4().hex
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[cid] = fut
        self._outbox.append((cid, request))
        self._event().set()
        try:
            while not fut.done():
                await asyncio.wait({fut}, timeout=5.0)
                if not fut.done() and self._polls == 0 and time.monotonic() - self._last_poll > ORPHAN_S:
                    raise InfraError(f"the driver has not collected this node's model calls for {ORPHAN_S:g} s")
        finally:
            self._waiting.pop(cid, None)
            if not fut.done() and any(c == cid for c, _ in self._outbox):  # cancelled before the driver took it
                self._outbox = deque((c, r) for c, r in self._outbox if c != cid)
        return _unwrap(fut.result())

    async def take(self, wait_s: float) -> list[tuple[str, GenerateRequest]]:
        """The pending calls, waiting up to ``wait_s`` for one."""
        self._polls += 1
        try:
            if not self._outbox:
                ev = self._event()
                ev.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ev.wait(), wait_s)
            calls = list(self._outbox)
            self._outbox.clear()
            return calls
        finally:
            self._polls -= 1
            self._last_poll = time.monotonic()

    def resolve(self, replies: Sequence[tuple[str, Any]]) -> None:
        for cid, reply in replies:
            fut = self._waiting.get(cid)
            if fut is not None and not fut.done():
                fut.set_result(reply)


def _unwrap(reply: Any) -> Completion:
    if isinstance(reply, Completion):
        return reply
    kind, type_name, message = reply
    if kind == "infra":
        raise InfraError(message)
    raise type(str(type_name), (Exception,), {"__module__": "harnesslearn.remote"})(message)


class NodeExecutor:
    """The Ray actor: the sandboxed ``Executor`` of one node, its model calls forwarded to the driver."""

    def __init__(self, config: ExecutorConfig, slots: int | None, spare: int = 0,
                 node_solver: tuple[str, dict[str, Any]] | None = None) -> None:
        self.slots = slots or default_concurrency()  # problems the driver sends at once
        # ``spare`` more slots, each with its pre-started worker: the executor takes free slots in
        # turn, so the slot of a problem that just ended respawns its worker while the next
        # problem already runs in a spare one (the spawn leaves the critical path)
        self.config = dataclasses.replace(config, concurrency=self.slots, spare_slots=config.spare_slots + spare)
        self.solver: ModelBackend
        if node_solver is not None:  # a shard: its harnesses' model calls go straight to the engine from here
            from harnesslearn.models import load_model

            self.solver = load_model(node_solver[0], **node_solver[1])
        else:
            self.solver = ForwardedSolver()
        self.executor = Executor(self.solver, self.config)
        self._corpora: dict[str, tuple[list[dict[str, str]], Any]] = {}  # corpus, its index

    async def start(self) -> dict[str, Any]:
        """Start the node's pool (preflight included; IsolationError when isolation does not
        hold here) and describe the node."""
        await self.executor.start()
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
                "pid": os.getpid(), "isolation": self.executor.isolation, "slots": self.slots,
                "uids": self.executor.slot_uids, "code": code_fingerprint()}

    async def run_problem(self, job: Job) -> RunRecord:
        docs, index = job.docs, None
        if docs is not None and not isinstance(docs, list):  # an object ref: a corpus many problems share
            key = docs.hex()
            if key not in self._corpora:
                from harnesslearn.tools.search import SearchIndex

                corpus = await _get(docs)
                self._corpora[key] = (corpus, await asyncio.to_thread(SearchIndex, corpus))
                while len(self._corpora) > 4:
                    self._corpora.pop(next(iter(self._corpora)))
            docs, index = self._corpora[key]
        tools = node_tools(job.tools, docs, index)
        (rec,) = await self.executor.run(job.source, [Problem(job.problem_id, job.question, None)], tools,
                                         job.budgets, settle=False)
        return rec

    async def poll(self, wait_s: float) -> list[tuple[str, GenerateRequest]]:
        assert isinstance(self.solver, ForwardedSolver)
        return await self.solver.take(wait_s)

    async def respond(self, replies: list[tuple[str, Any]]) -> None:
        assert isinstance(self.solver, ForwardedSolver)
        self.solver.resolve(replies)

    async def close(self) -> None:
        await self.executor.aclose()
        if not isinstance(self.solver, ForwardedSolver):
            await self.solver.aclose()


_REMOTE_CLASS: Any = None


def _actor_class() -> Any:
    global _REMOTE_CLASS
    if _REMOTE_CLASS is None:
        _REMOTE_CLASS = import_ray().remote(NodeExecutor)
    return _REMOTE_CLASS


# ---------------------------------------------------------------------------------- the driver side
def _check_reachable(address: str) -> None:
    """Fail fast (one line) when nothing listens at HOST:PORT, instead of Ray's long retries."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"bad Ray address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5.0):
            pass
    except OSError as e:
        raise UserError(f"cannot reach a Ray cluster at {address}: {e.strerror or e}") from None


def connect_ray(config: RayConfig) -> bool:
    """Connect this process to Ray as ``config`` says; True when it started a new connection
    (which ``RayExecutor.aclose`` then shuts down). UserError (one line) when it cannot."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    common: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR", "namespace": "harnesslearn"}
    try:
        if config.address is None:
            ray.init(num_cpus=config.local_cpus, include_dashboard=False,
                     object_store_memory=config.object_store_mb << 20, **common)
        else:
            if config.address != "auto":
                _check_reachable(config.address)
            for attempt in range(3):
                try:
                    ray.init(address=config.address, **common)
                    break
                except ConnectionError as e:  # a Ray client server that did not start in time: a
                    if "Initialization failure" not in str(e) or attempt == 2:  # transient fault, seen
                        raise  # on 2 busy cores; the client proxy starts a fresh one on the next try
                    ray.shutdown()
                    time.sleep(2.0)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at {config.address}" if config.address else "a local Ray instance"
        raise UserError(f"cannot connect to {where}: {_first_line(e)}") from None
    return True


@dataclass
class _Actor:
    """The driver's view of one executor actor."""

    index: int
    handle: Any
    info: dict[str, Any] = field(default_factory=dict)
    up: bool = False
    inflight: int = 0
    done: int = 0
    lost: int = 0
    dispatched: int = 0
    pump: asyncio.Task[None] | None = None
    revive: asyncio.Task[None] | None = None

    @property
    def slots(self) -> int:
        return int(self.info.get("slots") or 1)

    @property
    def where(self) -> str:
        node = str(self.info.get("node_id") or "?")[:8]
        return f"actor {self.index} on {self.info.get('host', '?')} (node {node})"


class RayExecutor:
    """Runs harness source on problems over Ray actors (see the module docstring). Use as
    ``async with RayExecutor(solver, config, RayConfig(...))``; ``config`` is what each node's
    executor uses, except ``concurrency`` (that is ``RayConfig.slots_per_actor``)."""

    def __init__(self, solver: ModelBackend, config: ExecutorConfig | None = None,
                 ray_config: RayConfig | None = None) -> None:
        self.solver = solver
        self.config = config or ExecutorConfig()
        self.ray_config = ray_config or RayConfig()
        self.redispatched = 0
        self.refused: list[str] = []
        self._connected = False
        self._owns_ray = False
        self._stdout: Any = None  # the real sys.stdout while Ray's notices are sent to stderr
        self._actors: list[_Actor] = []
        self._retired: list[_Actor] = []
        self._nodes_used: set[str] = set()  # every node an actor of this executor ran on  # the actors of the last run, for stats() after aclose()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Condition | None = None
        self._started: asyncio.Task[None] | None = None
        self._serving: set[asyncio.Task[None]] = set()
        self._puts: dict[int, tuple[Any, Any]] = {}  # id(documents) -> (documents, object ref)

    @property
    def isolation(self) -> str | None:
        """The isolation mode(s) of the nodes in use, or None before start."""
        modes = sorted({str(a.info["isolation"]) for a in self._actors or self._retired if a.info})
        return ",".join(modes) or None

    async def __aenter__(self) -> RayExecutor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ start-up
    def connect(self) -> None:
        """Connect to Ray now (synchronously; ``start`` does it otherwise). UserError when the
        address cannot be reached, MissingExtraError when ray is not installed."""
        if not self._connected:
            self._owns_ray = connect_ray(self.ray_config)
            self._connected = True
            if self._owns_ray:  # Ray prints its error notices (a dead raylet, ...) on stdout; a command's
                # stdout must stay one JSON object, so they go to stderr while this connection lasts
                self._stdout, sys.stdout = sys.stdout, sys.stderr

    async def start(self) -> None:
        """Connect, start the actors (each runs its preflight), and serve their model calls
        from this event loop. IsolationError when no node can run harnesses."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._started is None:  # callers that come meanwhile wait for this one
            self._loop, self._changed = loop, asyncio.Condition()
            self._started = loop.create_task(self._start_here())
        await asyncio.shield(self._started)

    async def _start_here(self) -> None:
        self.connect()
        if not self._actors:
            await self._spawn()
        for a in self._actors:
            a.pump = a.revive = None  # tasks of an earlier event loop died with it
            if a.up and self.ray_config.node_solver is None:
                a.pump = asyncio.create_task(self._pump(a))

    def _placements(self) -> list[Any]:
        ray = import_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        rc = self.ray_config
        if rc.actors is not None:
            return ["SPREAD"] * rc.actors
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= rc.actor_cpus]
        if not nodes:
            raise UserError(f"no live Ray node has {rc.actor_cpus:g} CPU(s) for an executor actor")
        return [NodeAffinitySchedulingStrategy(n["NodeID"], soft=True) for n in nodes]

    async def _spawn(self) -> None:
        rc = self.ray_config
        cls = _actor_class()
        for i, placement in enumerate(self._placements()):
            handle = cls.options(num_cpus=rc.actor_cpus, max_restarts=rc.actor_restarts, max_task_retries=0,
                                 scheduling_strategy=placement).remote(self.config, rc.slots_per_actor,
                                                                       rc.spare_slots, rc.node_solver)
            self._actors.append(_Actor(i, handle))
        reasons = await asyncio.gather(*(self._start_actor(a) for a in self._actors))
        for reason in filter(None, reasons):
            self.refused.append(reason)
            _log(f"[ray] {reason}")
        up = [a for a in self._actors if a.up]
        if not up:
            self._retired, self._actors = self._actors, []  # all killed already
            why = "; ".join(self.refused)
            if all("isolation" in r for r in self.refused):
                raise IsolationError(f"no Ray node can run harnesses in a sandbox: {why}")
            raise UserError(f"no executor actor started on the Ray cluster: {why}")
        nodes = {a.info["node_id"] for a in up}
        _log(f"[ray] {len(up)} executor actor(s) on {len(nodes)} node(s): "
             + ", ".join(f"{a.info['host']} {a.info['isolation']} x{a.slots}" for a in up))

    async def _start_actor(self, a: _Actor) -> str | None:
        """Start (or restart) one actor. None when it is up; otherwise why not (the actor is
        then killed for good). Waits while Ray restarts it."""
        rx = _ray_exceptions()
        deadline = time.monotonic() + self.ray_config.start_timeout_s
        reason = None
        while True:
            try:
                info = await asyncio.wait_for(_get(a.handle.start.remote()), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                reason = (f"actor {a.index} did not start within {self.ray_config.start_timeout_s:g} s "
                          "(no room on the cluster?)")
            except rx.ActorUnavailableError:  # restarting: ask again
                if time.monotonic() < deadline:
                    await asyncio.sleep(0.5)
                    continue
                reason = f"actor {a.index} stayed unavailable for {self.ray_config.start_timeout_s:g} s"
            except rx.RayActorError as e:
                reason = f"actor {a.index} died: {_first_line(e)}"
            except rx.RayTaskError as e:
                cause = getattr(e, "cause", None) or e
                kind = "sandbox isolation does not hold" if isinstance(cause, IsolationError) else "cannot start"
                reason = f"a node refuses work ({kind}): {_first_line(cause)}"
            else:
                if info.get("code") == code_fingerprint():
                    a.info, a.up = info, True
                    self._nodes_used.add(str(info.get("node_id")))
                    return None
                reason = (f"node {info.get('host')} refuses work: it runs different harnesslearn code "
                          f"({info.get('code')}, the driver {code_fingerprint()}); install the same version on every node")
            break
        with contextlib.suppress(Exception):  # a dead or half-started actor: nothing left to stop
            import_ray().kill(a.handle, no_restart=True)
        return reason

    # ------------------------------------------------------------------ model calls from the nodes
    async def _pump(self, a: _Actor) -> None:
        """Collect the actor's model calls and serve each from this process's solver."""
        rx = _ray_exceptions()
        while a.up:
            try:
                calls = await _get(a.handle.poll.remote(POLL_S))
            except rx.RayActorError as e:
                await self._lose(a, e)
                return
            for cid, request in calls:
                t = asyncio.create_task(self._serve(a, cid, request))
                self._serving.add(t)
                t.add_done_callback(self._serving.discard)

    async def _serve(self, a: _Actor, cid: str, request: GenerateRequest) -> None:
        reply: Any
        try:
            reply = await self.solver.generate(request)
        except InfraError as e:
            reply = ("infra", "InfraError", str(e))
        except Exception as e:  # the node's broker turns it into the harness's ModelError, as locally
            reply = ("error", type(e).__name__, str(e))
        with contextlib.suppress(_ray_exceptions().RayActorError):  # lost node: its problems go elsewhere
            await _get(a.handle.respond.remote([(cid, reply)]))

    # ------------------------------------------------------------------ faults
    async def _lose(self, a: _Actor, e: BaseException) -> None:
        """Take a lost actor out of the pool and try to get it back (Ray restarts it on a live node)."""
        if not a.up:
            return
        a.up = False
        a.lost += 1
        _log(f"[ray] lost {a.where}: {_first_line(e)}; its problems are dispatched again")
        if a.revive is None or a.revive.done():
            a.revive = asyncio.create_task(self._revive(a))
        await self._notify()

    async def _revive(self, a: _Actor) -> None:
        reason = await self._start_actor(a)
        if reason is None:
            _log(f"[ray] {a.where} is back")
            if self.ray_config.node_solver is None:
                a.pump = asyncio.create_task(self._pump(a))
        else:
            _log(f"[ray] gave up on actor {a.index}: {reason}")
        await self._notify()

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------ running
    async def _acquire(self) -> _Actor | None:
        """The up actor with the lowest share of its slots in use (waits for a free slot);
        None when no actor is up and none is coming back."""
        assert self._changed is not None
        async with self._changed:
            while True:
                free = [a for a in self._actors if a.up and a.inflight < a.slots]
                if free:
                    a = min(free, key=lambda x: (x.inflight / x.slots, x.dispatched))
                    a.inflight += 1
                    a.dispatched += 1
                    return a
                if not any(a.up or (a.revive is not None and not a.revive.done()) for a in self._actors):
                    return None
                await self._changed.wait()

    async def _release(self, a: _Actor) -> None:
        assert self._changed is not None
        async with self._changed:
            a.inflight -= 1
            self._changed.notify_all()

    def _docs(self, tools: Tools, problem: Problem) -> Any:
        if "search" not in tools.names or tools.documents is None:
            return None
        docs = tools.documents(problem)
        if docs is None or len(docs) <= INLINE_DOCS:
            return None if docs is None else [{"title": str(d.get("title") or ""), "text": str(d.get("text") or "")}
                                              for d in docs]
        hit = self._puts.get(id(docs))
        if hit is None or hit[0] is not docs:
            hit = self._puts[id(docs)] = (docs, import_ray().put(list(docs)))
        return hit[1]

    async def _run_job(self, job: Job) -> RunRecord:
        rx = _ray_exceptions()
        errors: list[str] = []
        for attempt in range(self.ray_config.redispatch + 1):
            a = await self._acquire()
            if a is None:
                errors.append("no executor actor is up on the Ray cluster")
                break
            try:
                rec: RunRecord = await _get(a.handle.run_problem.remote(job))
            except rx.RayActorError as e:
                errors.append(f"lost {a.where}: {_first_line(e)}")
                await self._lose(a, e)
                if attempt < self.ray_config.redispatch:
                    self.redispatched += 1
                continue
            finally:
                await self._release(a)
            a.done += 1
            return rec
        return RunRecord(job.problem_id, Status.INFRA_ERROR, error=" | ".join(errors)[-2000:])

    async def run(self, source: str, problems: Sequence[Problem], tools: Tools | None = None,
                  budgets: Budgets | None = None, on_record: Callable[[RunRecord], None] | None = None,
                  settle: bool = True) -> list[RunRecord]:
        """One RunRecord per problem, in order. Never raises for a harness failure or a lost node.
        ``tools``: as for ``Executor.run`` (``evaluation.task_tools(task)``); ``settle`` is
        accepted for the ``HarnessExecutor`` protocol (the actors' pools settle on their nodes)."""
        await self.start()
        if self.config.isolation == "none":
            _log("WARNING: harnesslearn is running harness code WITHOUT a sandbox on every Ray node "
                 "(--unsafe-no-sandbox): it can read, write and reach anything the Ray workers can.")
        budgets = budgets or Budgets()
        tools = tools or Tools()

        async def one(p: Problem) -> RunRecord:
            job = Job(source, p.id, p.question, tools.names, budgets, self._docs(tools, p))
            rec = await self._run_job(job)
            if on_record is not None:
                on_record(rec)
            return rec

        return list(await asyncio.gather(*(one(p) for p in problems)))

    # ------------------------------------------------------------------ reporting and shutdown
    def stats(self) -> dict[str, Any]:
        """Where runs executed: the actors, their nodes, and the problems dispatched again (also
        after ``aclose``: then it describes the last actors)."""
        actors = self._actors or self._retired
        return {
            "executor": "ray",
            "address": self.ray_config.address or "local",
            "solver": "each actor's own" if self.ray_config.node_solver else "the driver's",
            "isolation": self.isolation,
            "nodes": len(self._nodes_used),
            "actors": [{"host": a.info.get("host"), "node_id": a.info.get("node_id"), "pid": a.info.get("pid"), "up": a.up,
                        "isolation": a.info.get("isolation"), "slots": a.info.get("slots"), "uids": a.info.get("uids"),
                        "problems": a.done, "lost": a.lost} for a in actors],
            "redispatched": self.redispatched,
            "refused": list(self.refused),
        }

    async def aclose(self) -> None:
        """Stop the actors (each kills its sandbox pool) and disconnect if this executor connected."""
        same_loop = self._loop is not None and self._loop is asyncio.get_running_loop()
        tasks = [t for a in self._actors for t in (a.pump, a.revive) if t is not None] + list(self._serving)
        if same_loop:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._actors:
            ray = import_ray()
            closing = [_get(a.handle.close.remote()) for a in self._actors if a.up]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True), 30.0)
            for a in self._actors:
                with contextlib.suppress(Exception):  # already dead
                    ray.kill(a.handle, no_restart=True)
        self._retired = self._actors or self._retired
        self._actors, self._serving, self._puts = [], set(), {}
        self._loop = self._changed = self._started = None
        if self._owns_ray:
            import_ray().shutdown()
            self._owns_ray = self._connected = False
            if self._stdout is not None:
                sys.stdout, self._stdout = self._stdout, None
