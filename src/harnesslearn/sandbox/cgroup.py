"""Per-slot cgroup v1 limits (memory and pids), best effort.

rlimits are per process: RLIMIT_AS does not stop 60 forked children from each filling their own
address space, and RLIMIT_NPROC counts per uid inside each user namespace. A cgroup caps the
whole slot (the worker, everything it forks, its python-tool sandboxes, and the tmpfs pages they
write). It is used only when the v1 ``memory`` and ``pids`` hierarchies are writable (as root on
this kind of machine); otherwise ``SlotCgroup.create`` returns None and the slot runs with
rlimits only (docs/SANDBOX.md says so). cgroup v2-only hosts are not handled yet.

The pids cgroup is also the slot's process list: a worker spawned with ``launcher.start_worker``
as root joins it before it execs anything (``join_argv``), so everything of the slot is inside
from birth, and the sweep after a run reads ``members`` instead of walking all of /proc. No
process can leave: inside bwrap there is no /sys, and the cgroup files are root's.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
SHELL = "/bin/sh"


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

    def attach(self, pids: list[int], *, pids_cgroup: bool = True) -> None:
        """Move processes into the memory cgroup, and into the pids cgroup unless ``pids_cgroup`` is
        False (they were born there). Best effort: a process that is gone is skipped."""
        for d in (self.memory, self.pids) if pids_cgroup else (self.memory,):
            for pid in pids:
                with contextlib.suppress(OSError):
                    (d / "cgroup.procs").write_text(str(pid))

    def join_argv(self, argv: list[str]) -> list[str]:
        """``argv`` run by a root shell that first writes its own pid into the pids cgroup (the
        exec keeps the pid), so the process and all it will start are inside from birth; exit
        status 125 and nothing run when the write fails."""
        return [SHELL, "-c", 'echo $$ > "$1" || exit 125; shift; exec "$@"', "hl-join",
                str(self.pids / "cgroup.procs"), *argv]

    def members(self) -> list[int]:
        """Pids of the processes in the slot's pids cgroup (a zombie may be among them: callers
        check). Raises OSError when the cgroup cannot be read."""
        return [int(x) for x in (self.pids / "cgroup.procs").read_bytes().split()]

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
