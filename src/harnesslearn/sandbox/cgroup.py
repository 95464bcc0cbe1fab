"""Per-slot cgroup v1 limits (memory and pids), best effort.

rlimits are per process: RLIMIT_AS does not stop 60 forked children from each filling their own
address space, and RLIMIT_NPROC counts per uid inside each user namespace. A cgroup caps the
whole slot (the worker, everything it forks, its python-tool sandboxes, and the tmpfs pages they
write). It is used only when the v1 ``memory`` and ``pids`` hierarchies are writable (as root on
this kind of machine); otherwise ``SlotCgroup.create`` returns None and the slot runs with
rlimits only (docs/SANDBOX.md says so). cgroup v2-only hosts are not handled yet.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _own(controller: str) -> Path | None:
    """This process's cgroup directory in a v1 hierarchy, if that hierarchy is mounted."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            if controller in names.split(","):
                d = ROOT / controller / path.lstrip("/")
                return d if d.is_dir() else None
    except (OSError, ValueError):
        pass
    return None


class SlotCgroup:
    """A memory cgroup and a pids cgroup for one slot, named after its uid."""

    def __init__(self, memory: Path, pids: Path) -> None:
        self.memory, self.pids = memory, pids
        self._limit = -1

    @classmethod
    def create(cls, name: str) -> SlotCgroup | None:
        mem_parent, pids_parent = _own("memory"), _own("pids")
        if mem_parent is None or pids_parent is None or not os.access(mem_parent, os.W_OK):
            return None
        dirs = (mem_parent / f"harnesslearn-{name}", pids_parent / f"harnesslearn-{name}")
        try:
            for d in dirs:
                d.mkdir(exist_ok=True)
        except OSError:
            return None
        return cls(*dirs)

    def set_limits(self, memory_bytes: int, max_pids: int) -> None:
        """Cap the slot's memory (RSS + page cache + tmpfs) and process count."""
        if memory_bytes != self._limit:
            with contextlib.suppress(OSError):
                (self.memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
                (self.pids / "pids.max").write_text(str(max_pids))
                self._limit = memory_bytes

    def attach(self, pids: list[int]) -> None:
        for d in (self.memory, self.pids):
            for pid in pids:
                with contextlib.suppress(OSError):
                    (d / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in this cgroup so far."""
        try:
            for line in (self.memory / "memory.oom_control").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> None:
        """Remove the cgroups (only possible once no process is left in them)."""
        for d in (self.memory, self.pids):
            with contextlib.suppress(OSError):
                d.rmdir()
