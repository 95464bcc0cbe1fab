"""Where a machine's CPU goes, from /proc (Linux): per process and for the whole host.

The benchmarks use it to say which process is the cap when the GPU is not (``benchmarks/gpu_eval.py``:
the trusted shards, the sandboxes, the inference server's API and engine processes), and
``benchmarks/harness_throughput.py`` for the trusted side's CPU per run. Two snapshots around a window
give each process's CPU seconds in it; a process that started or ended inside the window is not in both,
so short-lived sandboxes show up in the host total and in their reaper's ``reaped`` seconds instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_cpu(pid: int) -> tuple[float, float]:
    """(own CPU s, reaped children's CPU s) of a process, from /proc/PID/stat; OSError if it is gone."""
    f = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(f[11]) + int(f[12])) / _TICK, (int(f[13]) + int(f[14])) / _TICK


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


@dataclass
class Snapshot:
    """Every process's own CPU seconds and command line, and the host's busy and total CPU ticks."""

    cpu: dict[int, float]
    cmd: dict[int, str]
    busy_ticks: int
    total_ticks: int


def snapshot() -> Snapshot:
    cpu: dict[int, float] = {}
    cmd: dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pid = int(d)
        try:
            cpu[pid] = proc_cpu(pid)[0]
        except (OSError, ValueError, IndexError):
            continue
        cmd[pid] = _cmd(pid)
    # /proc/stat's first line: user nice system idle iowait irq softirq steal ...
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return Snapshot(cpu, cmd, total - idle, total)


def between(a: Snapshot, b: Snapshot, span_s: float, *, top: int = 12,
            groups: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """What the window from ``a`` to ``b`` (``span_s`` seconds) used: the host's busy cores (of how many),
    the ``top`` processes by cores used (those alive at both ends), and per group (a name and the command-line
    substrings that put a process in it) the cores its processes used."""
    used = {pid: b.cpu[pid] - a.cpu[pid] for pid in b.cpu.keys() & a.cpu.keys()
            if b.cmd.get(pid) == a.cmd.get(pid)}  # same pid, same command: the same process
    span = max(span_s, 1e-9)
    ticks = max(b.total_ticks - a.total_ticks, 1)
    cores = os.cpu_count() or 1
    out: dict[str, Any] = {
        "host_cores": cores,
        "host_busy_cores": round((b.busy_ticks - a.busy_ticks) / ticks * cores, 2),
        "cpu_top": [{"pid": pid, "cores": round(s / span, 2), "cmd": b.cmd[pid][:100]}
                    for pid, s in sorted(used.items(), key=lambda kv: -kv[1])[:top] if s / span >= 0.005],
    }
    for name, needles in (groups or {}).items():
        out[f"{name}_cores"] = round(sum(s for pid, s in used.items()
                                         if any(n in b.cmd[pid] for n in needles)) / span, 2)
    return out
