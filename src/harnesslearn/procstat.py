"""Where a machine's CPU goes, from /proc (Linux): per process and for the whole host.

The benchmarks use it to say which process is the cap when the GPU is not (``benchmarks/gpu_eval.py``:
the trusted shards, the sandboxes, the inference server's API and engine processes), and
``benchmarks/harness_throughput.py`` for the trusted side's CPU per run. Two snapshots around a window
give each process's CPU seconds in it. A process is known by its pid and its start time (a pid reused in
the window is another process; a process that renames itself, as Ray's actors do per task, stays one).
A process that started or ended inside the window is not in both, so short-lived sandboxes show up in the
host total and in their reaper's ``reaped`` seconds instead.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str]:
    # the fields after "(comm)": index 0 is field 3 (state); comm may hold spaces and parentheses
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _seconds(f: list[str]) -> tuple[float, float]:
    """(own, reaped) CPU seconds from the fields of ``_stat``: utime + stime, cutime + cstime."""
    return (int(f[11]) + int(f[12])) / _TICK, (int(f[13]) + int(f[14])) / _TICK


def proc_cpu(pid: int) -> tuple[float, float]:
    """(own CPU s, reaped children's CPU s) of a process, from /proc/PID/stat; OSError if it is gone."""
    return _seconds(_stat(pid))


def host_ticks(line: str) -> tuple[int, int]:
    """(busy, total) CPU ticks of all CPUs from /proc/stat's first line. The total is user..steal (guest time is
    already inside user and nice); idle and iowait are the idle part."""
    f = [int(x) for x in line.split()[1:]]
    f += [0] * (8 - len(f))
    total = sum(f[:8])
    return total - f[3] - f[4], total


@dataclass
class Snapshot:
    """At time ``t``: every process's own and reaped CPU seconds and command line, keyed by (pid, start time),
    and the host's busy and total CPU ticks."""

    t: float
    cpu: dict[tuple[int, int], tuple[float, float]]
    cmd: dict[tuple[int, int], str]
    busy_ticks: int
    total_ticks: int
    pids: dict[int, tuple[int, int]] = field(default_factory=dict)  # pid -> its key

    def key(self, pid: int) -> tuple[int, int] | None:
        return self.pids.get(pid)


def _cmd(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    if not cmd:  # a kernel thread, or a process that rewrote its title to nothing
        try:
            cmd = "[" + Path(f"/proc/{pid}/comm").read_text().strip() + "]"
        except OSError:
            return ""
    return cmd


def snapshot() -> Snapshot:
    cpu: dict[tuple[int, int], tuple[float, float]] = {}
    cmd: dict[tuple[int, int], str] = {}
    pids: dict[int, tuple[int, int]] = {}
    t = time.time()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pid = int(d)
        try:
            f = _stat(pid)
            key = (pid, int(f[19]))  # field 22: start time, in ticks since boot
            cpu[key] = _seconds(f)
        except (OSError, ValueError, IndexError):
            continue
        pids[pid] = key
        cmd[key] = _cmd(pid)
    busy, total = host_ticks(Path("/proc/stat").read_text().split("\n", 1)[0])
    return Snapshot(t, cpu, cmd, busy, total, pids)


def used(a: Snapshot, b: Snapshot, pids: list[int] | None = None) -> tuple[float, float]:
    """(own, reaped) CPU seconds from ``a`` to ``b`` of the processes ``pids`` (all when None) alive at both."""
    keys = b.cpu.keys() & a.cpu.keys()
    if pids is not None:
        keys &= {k for k in (b.key(p) for p in pids) if k is not None}
    own = sum(b.cpu[k][0] - a.cpu[k][0] for k in keys)
    return own, sum(b.cpu[k][1] - a.cpu[k][1] for k in keys)


def between(a: Snapshot, b: Snapshot, *, top: int = 12, groups: dict[str, tuple[str, ...]] | None = None,
            exclude: tuple[int, ...] = ()) -> dict[str, Any]:
    """What the window from ``a`` to ``b`` used, in cores (CPU seconds per second): the host's busy cores and
    the cores /proc/stat counts, the ``top`` processes (alive at both ends), and per group (a name and the
    command-line substrings that put a process in it; pids in ``exclude`` never) the cores its processes used."""
    span = max(b.t - a.t, 1e-9)
    secs = {k: b.cpu[k][0] - a.cpu[k][0] for k in b.cpu.keys() & a.cpu.keys()}
    out: dict[str, Any] = {
        "host_cores": round((b.total_ticks - a.total_ticks) / _TICK / span, 1),
        "host_busy_cores": round((b.busy_ticks - a.busy_ticks) / _TICK / span, 2),
        "cpu_top": [{"pid": k[0], "cores": round(s / span, 2), "cmd": b.cmd[k][:160]}
                    for k, s in sorted(secs.items(), key=lambda kv: -kv[1])[:top] if s / span >= 0.005],
    }
    for name, needles in (groups or {}).items():
        out[f"{name}_cores"] = round(sum(s for k, s in secs.items() if k[0] not in exclude
                                         and any(n in b.cmd[k] for n in needles)) / span, 2)
    return out
