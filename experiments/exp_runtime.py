"""Runtime helpers shared by the H200 experiment scripts: the record of the sandbox isolation in use,
open-file limits, a GPU utilisation sampler and a phase timeline. On the device the scripts run with
``PYTHONPATH=/tmp/site:src`` (experiments/device/env.sh); here the package is installed in .venv."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harnesslearn.gpu import GpuSampler as _GpuSampler
from harnesslearn.sandbox.executor import ISOLATIONS as ISOLATIONS  # the executor's own choices

ROOT = Path(__file__).resolve().parents[1]
T0 = time.time()

# isolation levels tried in order, from the requested one down to no sandbox at all
FALLBACK = {"auto": ["auto", "none"], "bwrap": ["bwrap", "landlock", "none"], "landlock": ["landlock", "none"],
            "none": ["none"]}


def restart_clock() -> None:
    """Start the clock that logs, timelines and GPU samples count from (each script's main)."""
    global T0
    T0 = time.time()


def log(msg: str) -> None:
    """One progress line on stderr with the seconds since the script started."""
    print(f"[{time.time() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def loud(msg: str) -> None:
    bar = "!" * 78
    print(f"{bar}\n!! {msg}\n{bar}", file=sys.stderr, flush=True)


def write_json(path: Path, obj: Any) -> None:
    from harnesslearn.fsutil import atomic_write_text

    atomic_write_text(path, json.dumps(obj, indent=1, default=str, allow_nan=True), mode=0o644)


def raise_fd_limit(wanted: int = 65536) -> dict[str, int]:
    """Raise the soft limit of open files towards the hard limit: each sandbox slot holds two uid
    lease files and a pre-started worker's pipes, so 128 slots need several hundred descriptors
    (containers often start with a soft limit of 1024)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return {"soft": int(soft), "hard": int(hard)}


def safe_concurrency(wanted: int, fd_soft: int) -> int:
    """``wanted`` sandbox slots, or fewer when the open-files limit is too low for them (about 8
    descriptors a slot, plus a reserve of 256 for the models, the stores and the rest)."""
    fit = max(1, (fd_soft - 256) // 8)
    if wanted > fit:
        loud(f"open-files limit {fd_soft} fits about {fit} sandbox slots: concurrency {wanted} -> {fit}")
        return fit
    return wanted


# ---------------------------------------------------------------------- sandbox
def isolation_record(requested: str, used: str | None, worker_python: str | None) -> dict[str, Any]:
    """What goes into the results about the sandbox: the level asked for, the level the executor's
    preflight settled on (``Executor.isolation``), and the worker interpreter (None: the library's
    own search, ``harnesslearn.sandbox.find_python``). Running without a sandbox is said loudly."""
    from harnesslearn.sandbox import find_python

    if used == "none":
        loud("RUNNING HARNESS CODE WITHOUT A SANDBOX (isolation 'none', as requested); recorded in the results")
    else:
        log(f"sandbox isolation: {used}")
    return {"requested": requested, "used": used, "worker_python": worker_python or find_python()}


# ---------------------------------------------------------------------- GPU sampling
class GpuSampler(_GpuSampler):
    """``harnesslearn.gpu.GpuSampler`` with sample times counted from this script's T0."""

    def __init__(self, interval: float = 0.25) -> None:
        super().__init__(interval, origin=T0)


class Timeline:
    """Named wall-clock intervals (seconds since T0), thread-safe."""

    def __init__(self) -> None:
        self.phases: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def add(self, name: str, start: float, end: float, **extra: Any) -> dict[str, Any]:
        row = {"name": name, "start": round(start - T0, 4), "end": round(end - T0, 4), **extra}
        with self._lock:
            self.phases.append(row)
        return row

    @contextmanager
    def phase(self, name: str, **extra: Any) -> Iterator[dict[str, Any]]:
        t = time.time()
        info: dict[str, Any] = dict(extra)
        try:
            yield info
        finally:
            self.add(name, t, time.time(), **info)

    def named(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [p for p in self.phases if p["name"] == name]
