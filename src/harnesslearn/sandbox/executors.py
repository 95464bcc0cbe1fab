"""Choosing where harness runs execute, from one option string (``--executor`` on the CLI,
``executor:`` in training configs, ``build_executor`` in the API).

    local            this machine's sandboxed Executor (the default)
    ray              a new local Ray instance (or this process's, if already initialised)
    ray:auto         the Ray cluster this machine belongs to (``ray start`` was run here)
    ray:HOST:PORT    a Ray cluster by its GCS address (the head's ``--port``, 6379 by default)
    ray://HOST:PORT  a Ray cluster through Ray Client (the head's client server, 10001 by default)
    shards:K         K trusted processes on this machine (a local Ray instance with K executor actors),
                     each with its own event loop, sandbox slots and solver client, built from the solver's
                     spec (openai: or python: only): the trusted side's work (spawns, sweeps, frames, the
                     broker, HTTP calls) spreads over K cores instead of one
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harnesslearn.errors import UserError
from harnesslearn.models.base import ModelBackend
from harnesslearn.sandbox.executor import Executor, ExecutorConfig
from harnesslearn.sandbox.protocol import HarnessExecutor

if TYPE_CHECKING:
    from harnesslearn.sandbox.ray_executor import RayConfig

EXECUTOR_HELP = ("Where harness runs execute: local | ray (a local Ray instance) | ray:auto | ray:HOST:PORT | "
                 "ray://HOST:PORT | shards:K (K trusted processes on this machine, each calling the solver itself).")
SHARDABLE = ("openai", "python")  # solver providers a shard can rebuild: a client, not a model in memory


def parse_executor(option: str) -> tuple[str, str | None]:
    """``(kind, address)``: ``("local", None)``, ``("ray", None)`` for a local instance, or
    ``("ray", ADDRESS)`` with ADDRESS as ``ray.init`` takes it. UserError for anything else."""
    opt = (option or "").strip()
    if opt in ("local", "ray"):
        return opt, None
    if opt.startswith("shards:"):
        k = opt[len("shards:"):]
        if k.isdigit() and 1 <= int(k) <= 256:
            return "shards", k
        raise UserError(f"executor {option!r}: shards:K needs K from 1 to 256")
    if opt.startswith("ray:"):
        address = opt[len("ray:"):]
        hostport = address.removeprefix("//")
        host, sep, port = hostport.rpartition(":")
        if address == "auto" or (sep and host and port.isdigit() and 0 < int(port) < 65536):
            return "ray", "ray://" + hostport if address.startswith("//") else address
    raise UserError(f"unknown executor {option!r}: use local, ray, ray:auto, ray:HOST:PORT, ray://HOST:PORT or shards:K")


def build_executor(option: str, solver: ModelBackend, config: ExecutorConfig | None = None, *,
                   concurrency: int | None = None, ray: RayConfig | None = None,
                   solver_source: tuple[str, dict[str, Any]] | None = None) -> HarnessExecutor:
    """The executor that ``option`` names (see the module docstring), for ``solver``.

    ``config`` is the sandbox configuration (on every node, for Ray). ``concurrency`` is the
    number of problems in flight: in all for ``local`` and ``shards:K`` (split over the shards), per
    node for Ray (None: the default, two per core, at most 16). ``solver_source``: the solver's spec
    and ``load_model`` keywords, which ``shards:K`` needs (each shard builds its own client from them).
    For Ray this connects now, so that an unreachable address or a missing ``ray`` fails here, before
    any work (UserError / MissingExtraError: one line)."""
    kind, address = parse_executor(option)
    config = config or ExecutorConfig()
    if kind == "local":
        if concurrency is not None:
            config.concurrency = concurrency
        return Executor(solver, config)
    import dataclasses

    from harnesslearn.sandbox.ray_executor import RayConfig, RayExecutor

    rc = ray or RayConfig()
    if kind == "shards":
        k = int(str(address))
        if solver_source is None or solver_source[0].split(":", 1)[0] not in SHARDABLE:
            raise UserError(f"executor {option}: each shard builds its own solver client, so the solver must be an "
                            f"{' or '.join(p + ':' for p in SHARDABLE)} model spec")
        per = -(-(concurrency or config.concurrency) // k)
        rc = dataclasses.replace(rc, address=None, actors=k, slots_per_actor=per, node_solver=solver_source,
                                 actor_cpus=0.0)
        ex = RayExecutor(solver, config, rc)
        ex.connect()
        return ex
    rc = dataclasses.replace(rc, address=address if address is not None else rc.address,
                             slots_per_actor=concurrency if concurrency is not None else rc.slots_per_actor)
    ex = RayExecutor(solver, config, rc)
    ex.connect()
    return ex
