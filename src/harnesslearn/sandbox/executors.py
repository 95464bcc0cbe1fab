"""Choosing where harness runs execute, from one option string (``--executor`` on the CLI,
``executor:`` in training configs, ``build_executor`` in the API).

    local            this machine's sandboxed Executor (the default)
    ray              a new local Ray instance (or this process's, if already initialised)
    ray:auto         the Ray cluster this machine belongs to (``ray start`` was run here)
    ray:HOST:PORT    a Ray cluster by its GCS address (the head's ``--port``, 6379 by default)
    ray://HOST:PORT  a Ray cluster through Ray Client (the head's client server, 10001 by default)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harnesslearn.errors import UserError
from harnesslearn.models.base import ModelBackend
from harnesslearn.sandbox.executor import Executor, ExecutorConfig
from harnesslearn.sandbox.protocol import HarnessExecutor

if TYPE_CHECKING:
    from harnesslearn.sandbox.ray_executor import RayConfig

EXECUTOR_HELP = "Where harness runs execute: local | ray (a local Ray instance) | ray:auto | ray:HOST:PORT | ray://HOST:PORT."


def parse_executor(option: str) -> tuple[str, str | None]:
    """``(kind, address)``: ``("local", None)``, ``("ray", None)`` for a local instance, or
    ``("ray", ADDRESS)`` with ADDRESS as ``ray.init`` takes it. UserError for anything else."""
    opt = (option or "").strip()
    if opt in ("local", "ray"):
        return opt, None
    if opt.startswith("ray:"):
        address = opt[len("ray:"):]
        hostport = address.removeprefix("//")
        host, sep, port = hostport.rpartition(":")
        if address == "auto" or (sep and host and port.isdigit() and 0 < int(port) < 65536):
            return "ray", "ray://" + hostport if address.startswith("//") else address
    raise UserError(f"unknown executor {option!r}: use local, ray, ray:auto, ray:HOST:PORT or ray://HOST:PORT")


def build_executor(option: str, solver: ModelBackend, config: ExecutorConfig | None = None, *,
                   concurrency: int | None = None, ray: RayConfig | None = None) -> HarnessExecutor:
    """The executor that ``option`` names (see the module docstring), for ``solver``.

    ``config`` is the sandbox configuration (on every node, for Ray). ``concurrency`` is the
    number of problems in flight: in all for ``local``, per node for Ray (None: the default, two
    per core, at most 16). For Ray this connects now, so that an unreachable address or a
    missing ``ray`` fails here, before any work (UserError / MissingExtraError: one line)."""
    kind, address = parse_executor(option)
    config = config or ExecutorConfig()
    if kind == "local":
        if concurrency is not None:
            config.concurrency = concurrency
        return Executor(solver, config)
    import dataclasses

    from harnesslearn.sandbox.ray_executor import RayConfig, RayExecutor

    rc = ray or RayConfig()
    rc = dataclasses.replace(rc, address=address if address is not None else rc.address,
                             slots_per_actor=concurrency if concurrency is not None else rc.slots_per_actor)
    ex = RayExecutor(solver, config, rc)
    ex.connect()
    return ex
