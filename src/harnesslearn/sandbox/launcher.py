"""Start one sandboxed worker process and talk to it (trusted side).

A worker is a freshly exec'd ``python3.11 -I -S -c <worker.py source>``: never a fork of this
process, so nothing loaded here (answers, keys, the solver) can leak into it. Three launch modes:

- ``bwrap``: bubblewrap with every namespace unshared (user, pid, net, ipc, uts, cgroup, mount),
  no further user namespaces, a new session, a cleared environment, ``/usr`` read-only (plus the
  ``/lib``/``/bin`` links), a fresh ``/proc`` and minimal ``/dev``, and a size-capped tmpfs as the
  work dir. Nothing of ``/root``, ``/home``, ``/work``, the repository, datasets or caches is
  mounted. When this process is root, bwrap itself runs as a per-slot unprivileged uid.
- ``landlock``: no namespaces; the worker runs as the slot uid in a fresh private work dir with a
  cleared environment and restricts itself with Landlock (see ``worker.py``).
- ``none``: a fresh interpreter with a cleared environment and rlimits, nothing else. Unsafe.

In every mode the worker applies rlimits (and, except ``none``, seccomp) itself before the
harness runs. The answer travels only on a socketpair descriptor as nonce-tagged, length-capped
JSON frames; stdout and stderr are drained with caps and kept as evidence, never parsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnesslearn.errors import InfraError, UserError
from harnesslearn.sandbox.cgroup import SHELL, SlotCgroup
from harnesslearn.untrusted import encodable, lone_surrogate

WORKER_SOURCE = (Path(__file__).parent / "worker.py").read_text(encoding="utf-8")
PYTHON_CANDIDATES = ("/usr/bin/python3.11", "/usr/bin/python3", "/usr/local/bin/python3.11", "/usr/local/bin/python3")
SANDBOX_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "MALLOC_ARENA_MAX": "2"}  # arenas reserve 64 MiB of address space each


class ProtocolError(Exception):
    """The worker sent something that is not a valid frame (oversized, not JSON, wrong nonce)."""


def _world_executable(path: str) -> bool:
    """True when ``path`` is an ELF binary that any uid can traverse to and execute."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        with open(real, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return False  # a shell shim (pyenv) or script: slow and often under a private home
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & stat.S_IXOTH or not st.st_mode & stat.S_IROTH:
        return False
    parent = Path(real).parent
    for d in (parent, *parent.parents):
        if not os.stat(d).st_mode & stat.S_IXOTH:
            return False
    return True


@functools.cache
def _new_enough(python: str) -> bool:
    """Whether ``python`` runs and is Python 3.11 or newer (the worker's requirement)."""
    try:
        out = subprocess.run([python, "-I", "-S", "-c", "import sys; print(sys.version_info >= (3, 11))"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.stdout.strip() == "True"


def find_python(override: str | None = None) -> str:
    """The worker interpreter: ``override``, else the first of ``PYTHON_CANDIDATES`` that an
    unprivileged uid can execute and that is Python 3.11+, else the real path of the interpreter
    running this process when any uid can execute it (a venv's base python). Raises UserError
    when none is usable."""
    if override:
        if _world_executable(override):
            return override
        raise UserError(f"worker interpreter {override} is not an ELF binary executable by any uid")
    for c in (*PYTHON_CANDIDATES, os.path.realpath(sys.executable)):
        if _world_executable(c) and _new_enough(c):
            return c
    raise UserError("no worker interpreter found (need a world-executable python3.11+, e.g. apt-get install python3)")


def find_bwrap() -> str | None:
    return shutil.which("bwrap") or (os.path.exists("/usr/bin/bwrap") and "/usr/bin/bwrap") or None


@functools.cache
def find_setpriv() -> str | None:
    """util-linux ``setpriv``: drops to a slot uid in the child after exec, so that the trusted
    process can spawn with vfork. Python forks (copying the page tables of the whole trusted
    process, ~30 ms at 800 MB, on the event loop) whenever ``user=``/``group=`` are given; through
    setpriv the same spawn took 3.8 ms (issue 19: spawns starved a 192-slot pool on the H200)."""
    return shutil.which("setpriv") or (os.path.exists("/usr/bin/setpriv") and "/usr/bin/setpriv") or None


def as_uid(argv: list[str], uid: int | None) -> tuple[list[str], dict[str, Any]]:
    """The command and the ``subprocess`` keywords that run ``argv`` as ``uid`` (uid and gid ``uid``,
    no supplementary groups); unchanged when ``uid`` is None."""
    if uid is None:
        return argv, {}
    setpriv = find_setpriv()
    if setpriv is not None:
        return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv], {}
    return argv, {"user": uid, "group": uid, "extra_groups": []}


@dataclass(frozen=True)
class Limits:
    """Limits applied by the worker itself (hard rlimits) plus the tmpfs size (bwrap mode)."""

    cpu_s: float
    memory_mb: int
    nproc: int = 64
    fsize_mb: int = 16
    nofile: int = 64
    workdir_mb: int = 64

    def job_dict(self) -> dict[str, int | float]:
        return {
            "cpu_s": self.cpu_s,
            "memory_bytes": self.memory_mb * 1024 * 1024,
            "nproc": self.nproc,
            "fsize_bytes": self.fsize_mb * 1024 * 1024,
            "nofile": self.nofile,
        }


@dataclass(frozen=True)
class LaunchSpec:
    """How to start workers: mode, interpreter, and (as root) the slot uid to run them as."""

    isolation: str  # "bwrap" | "landlock" | "none"
    python: str
    bwrap: str | None = None
    workdir_mb: int = 64

    def _root_binds(self) -> list[str]:
        args = ["--ro-bind", "/usr", "/usr"]
        for top in ("/lib", "/lib64", "/lib32", "/bin", "/sbin"):
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        prefix = str(Path(self.python).resolve().parent.parent)
        if not prefix.startswith("/usr"):
            args += ["--ro-bind", prefix, prefix]
        return args

    def command(self, fd: int, nonce: str) -> list[str]:
        worker = [self.python, "-I", "-S", "-c", WORKER_SOURCE, str(fd), nonce, self.isolation]
        if self.isolation != "bwrap":
            return worker
        assert self.bwrap is not None
        env: list[str] = []
        for k, v in {**SANDBOX_ENV, "HOME": "/tmp", "TMPDIR": "/tmp"}.items():
            env += ["--setenv", k, v]
        return [
            self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--as-pid-1", "--clearenv", *env, *self._root_binds(),
            "--proc", "/proc", "--dev", "/dev",
            "--size", str(self.workdir_mb * 1024 * 1024), "--tmpfs", "/tmp", "--chdir", "/tmp",
            "--hostname", "sandbox", "--", *worker,
        ]


class CappedBuffer:
    """Keeps the first ``cap`` bytes of a stream; counts (and drops) the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.total += len(chunk)

    def text(self) -> str:
        s = self.data.decode("utf-8", errors="replace")
        if self.total > len(self.data):
            s += f"\n[... {self.total - len(self.data)} more bytes dropped]"
        return s


async def _drain(stream: asyncio.StreamReader | None, buf: CappedBuffer) -> None:
    if stream is None:
        return
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return
        buf.feed(chunk)


_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")  # CONFIG_PROC_CHILDREN


def children_of(pid: int) -> list[int]:
    """Pids whose parent is ``pid``: read from ``/proc/PID/task/*/children`` where the kernel
    has it (a few microseconds), else found by scanning every ``/proc/*/stat`` (milliseconds
    under load, twice per problem). Either view can miss a child forked at that very moment;
    the slot-uid sweeps after a run (``kill_uids``) are what guarantees that nothing survives."""
    if _CHILDREN_FILE:
        out: list[int] = []
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(FileNotFoundError):  # a thread that just ended
                    out += [int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):  # the process is gone: so are its child links
            return []
        return out
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat_line = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            fields = stat_line.rpartition(")")[2].split()
            if len(fields) > 1 and fields[1] == str(pid):
                out.append(int(entry.name))
    return out


def _uid_and_zombie(pid: str) -> tuple[int, bool] | None:
    """(real uid, is a zombie) of a process from ``/proc/PID/status``; None if it is gone. Bytes and
    two ``find`` calls: a full parse of every status file made each sweep of a 192-slot pool cost
    tens of milliseconds of the event loop's GIL on the H200 (issue 19)."""
    try:
        fd = os.open(f"/proc/{pid}/status", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 8192)
    except OSError:
        return None
    finally:
        os.close(fd)
    i = data.find(b"\nUid:\t")
    if i < 0:
        return None
    j = data.find(b"\t", i + 6)
    s = data.find(b"\nState:\t")
    return int(data[i + 6:j]), s >= 0 and data[s + 8:s + 9] == b"Z"


def processes_of_uid(uid: int) -> list[int]:
    """Pids of live (non-zombie) processes whose real uid is ``uid`` (walks /proc)."""
    return processes_of_uids((uid,))


def processes_of_uids(uids: tuple[int, ...]) -> list[int]:
    """Pids of live (non-zombie) processes whose real uid is one of ``uids``: one walk of /proc."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            got = _uid_and_zombie(name)
            if got is not None and got[0] in uids and not got[1]:
                out.append(int(name))
    return out


def kill_uid(uid: int, rounds: int = 50, within: SlotCgroup | None = None) -> bool:
    """SIGKILL every process whose real uid is ``uid`` until none is left; True when none is (``kill_uids``)."""
    return kill_uids((uid,), rounds, within)


def kill_uids(uids: tuple[int, ...], rounds: int = 50, within: SlotCgroup | None = None) -> bool:
    """SIGKILL every process whose real uid is one of ``uids`` until none is left; True when none is.
    One walk of /proc a round serves all the uids (a slot's worker and python-tool uid are swept together).

    ``within``: the slot cgroup that every process of ``uids`` was born in (``Worker.cgroup``): each
    round lists that cgroup's members instead of walking /proc (a few microseconds instead of
    milliseconds that grow with the host's process count). Only the caller can promise that no
    process of ``uids`` lives outside it; when the cgroup cannot be read, /proc is walked.

    Race-free against pid reuse: each pid is pinned with a pidfd before its uid is checked.
    Only meaningful as root, for uids used by nothing else (the slot uids). A fork bomb cannot
    outrun it for long because RLIMIT_NPROC (and the pids cgroup) caps each uid's processes.
    Blocking (reads /proc or the cgroup)."""
    for _ in range(rounds):
        pids = _live_processes(uids, within)
        if not pids:
            return True
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if _live_of(pid, uids):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os.close(fd)
        time.sleep(0.001)
    return not _live_processes(uids, within)


def _live_processes(uids: tuple[int, ...], within: SlotCgroup | None) -> list[int]:
    if within is not None:
        try:
            return [pid for pid in within.members() if _live_of(pid, uids)]
        except OSError:  # the cgroup is gone or unreadable: the walk of /proc finds them all
            pass
    return processes_of_uids(uids)


def _live_of(pid: int, uids: tuple[int, ...]) -> bool:
    got = _uid_and_zombie(str(pid))
    return got is not None and got[0] in uids and not got[1]


@dataclass
class Worker:
    """One started worker: the process, the trusted end of the frame channel, captured output."""

    proc: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    nonce: str
    uid: int | None
    max_frame: int
    workdir: str | None = None
    stdout: CappedBuffer = field(default_factory=lambda: CappedBuffer(0))
    stderr: CappedBuffer = field(default_factory=lambda: CappedBuffer(0))
    drains: list[asyncio.Task[None]] = field(default_factory=list)
    killed: bool = False
    pidfd: int | None = None  # pins the process: signals through it never reach a reused pid
    # the slot cgroup the worker was born in (so is everything it starts): its uid sweeps list that
    # cgroup instead of walking /proc; None when it has none or was moved in only after its start
    cgroup: SlotCgroup | None = None

    async def send(self, obj: dict[str, Any]) -> None:
        text = json.dumps(obj, ensure_ascii=False)
        # a solver's text with a lone surrogate goes to the harness as an escape (UTF-8 cannot carry it)
        data = (text if encodable(text) else json.dumps(obj)).encode("utf-8")
        self.writer.write(struct.pack(">I", len(data)) + data)
        await self.writer.drain()

    async def recv(self) -> dict[str, Any] | None:
        """The next frame, or None at end of stream. Raises ProtocolError for a bad frame."""
        try:
            head = await self.reader.readexactly(4)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        (n,) = struct.unpack(">I", head)
        if n > self.max_frame:
            raise ProtocolError(f"frame of {n} bytes exceeds the cap of {self.max_frame}")
        try:
            data = await self.reader.readexactly(n)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        try:
            obj = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: nested too deep
            raise ProtocolError(f"frame is not valid JSON: {type(e).__name__ if isinstance(e, RecursionError) else e}"
                                ) from None
        if not isinstance(obj, dict) or obj.get("nonce") != self.nonce:
            raise ProtocolError("frame without the run's nonce")
        where = lone_surrogate(obj)
        if where is not None:  # no UTF-8 file, SQLite row or terminal takes it: refused here, whole
            raise ProtocolError(f"frame carries a lone surrogate (not UTF-8) in {where or 'its value'}")
        return obj

    async def kill(self, sweep: bool = True) -> None:
        """Kill the worker and everything it started; wait for it; close the channel. ``sweep=False``: the
        caller sweeps the worker's uid itself (together with another uid, in one sweep).

        The launcher's children (bwrap's pid-namespace init, or the worker's own children) die
        first so that the launcher reaps them and exits by itself: killing the launcher first
        would leave its child to be re-parented (a zombie where PID 1 does not reap)."""
        self.killed = True
        if self.proc.returncode is None:
            children = children_of(self.proc.pid)
            for child in children:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(child, signal.SIGKILL)
            if children:  # give the launcher a moment to reap them and exit; with no children
                # (landlock / none: the worker is the process itself) there is nothing to wait for
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.proc.wait(), 0.5)
        self.send_signal(signal.SIGKILL)
        if self.uid is not None and sweep:
            await asyncio.to_thread(kill_uid, self.uid, 50, self.cgroup)
        await self.proc.wait()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        self.writer.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self.drains, return_exceptions=True), 2.0)
        for t in self.drains:
            t.cancel()
        transport = getattr(self.proc, "_transport", None)  # asyncio's subprocess transport: its pipes too
        if transport is not None:
            transport.close()
        if self.workdir:
            # in a thread: a work dir full of the harness's files takes milliseconds to remove, off the event loop
            await asyncio.to_thread(shutil.rmtree, self.workdir, True)

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the worker's process group and to the worker, through its pidfd.

        Never ``self.proc.kill()``: Popen.send_signal first polls, and that poll reaps an exited
        child before asyncio's child watcher does, which then logs "Unknown child process pid N,
        will report returncode 255" (the stray line seen before). Nothing here waits for or reaps
        the child: only the watcher does (``await self.proc.wait()``)."""
        if self.pidfd is None:
            return
        try:
            signal.pidfd_send_signal(self.pidfd, 0)  # still unreaped, so its pid (= its group) is its own
        except ProcessLookupError:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)  # a new session: the group is the worker and what it started
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, sig)

    def exit_signal(self) -> int | None:
        """The signal that ended the worker (bwrap reports it as 128+N), if any."""
        rc = self.proc.returncode
        if rc is None:
            return None
        if rc < 0:
            return -rc
        return rc - 128 if rc > 128 else None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not plain JSON")


def _private_workdir(uid: int | None) -> str:
    d = tempfile.mkdtemp(prefix="hl-work-")
    if uid is not None:
        os.chown(d, uid, uid)
    os.chmod(d, 0o700)
    return d


def _born_inside(cgroup: SlotCgroup | None, uid: int | None, ids: dict[str, Any]) -> bool:
    """Whether a worker can be spawned inside ``cgroup`` from birth: only by a root shell that joins
    and then execs ``setpriv`` (``ids`` empty); with ``user=``, Python drops the uid before exec and
    the shell could no longer write to the cgroup."""
    return cgroup is not None and uid is not None and not ids and os.access(SHELL, os.X_OK)


async def start_worker(
    spec: LaunchSpec, uid: int | None, *, output_cap: int, max_frame: int, start_timeout_s: float,
    cgroup: SlotCgroup | None = None,
) -> Worker:
    """Spawn a fresh worker and wait for its ``ready`` frame. Raises InfraError if it does not
    come up within ``start_timeout_s``.

    ``cgroup``: the slot's cgroup. As root with ``setpriv``, the worker is born in its pids cgroup
    (``SlotCgroup.join_argv``) and ``Worker.cgroup`` is set, so its sweeps list that cgroup;
    otherwise it is moved into the pids cgroup once ready (before any harness code runs) and its
    sweeps walk /proc. Either way it is moved into the memory cgroup once ready, so that its start
    is charged where it always was (the trusted side's cgroup)."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    nonce = secrets.token_hex(16)
    workdir = None if spec.isolation == "bwrap" else _private_workdir(uid)
    env = dict(SANDBOX_ENV, HOME=workdir or "/tmp", TMPDIR=workdir or "/tmp")
    argv, ids = as_uid(spec.command(child.fileno(), nonce), uid)
    inside = _born_inside(cgroup, uid, ids)
    if inside:
        assert cgroup is not None
        argv = cgroup.join_argv(argv)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(child.fileno(),), env=env, cwd=workdir or "/", start_new_session=True, **ids,
        )
    except OSError as e:
        parent.close()
        raise InfraError(f"sandbox would not start: {e}") from None
    finally:
        child.close()
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
    except ProcessLookupError:  # already gone (and reaped): nothing left to signal
        pidfd = None
    reader, writer = await asyncio.open_connection(sock=parent, limit=2**16)
    w = Worker(proc, reader, writer, nonce, uid, max_frame, workdir, CappedBuffer(output_cap), CappedBuffer(output_cap),
               pidfd=pidfd, cgroup=cgroup if inside else None)
    w.drains = [asyncio.create_task(_drain(proc.stdout, w.stdout)), asyncio.create_task(_drain(proc.stderr, w.stderr))]
    try:
        ready = await asyncio.wait_for(w.recv(), start_timeout_s)
    except (TimeoutError, ProtocolError) as e:
        await w.kill()
        raise InfraError(f"sandbox did not become ready: {e or 'timeout'}") from None
    if ready is None or ready.get("type") != "ready":
        await w.kill()
        raise InfraError(f"sandbox did not start ({spec.isolation}): {w.stderr.text()[-500:].strip()}")
    if cgroup is not None:  # before its job, so everything the harness starts is inside
        # (in a thread: a write to cgroup.procs takes about a millisecond, off the event loop)
        await asyncio.to_thread(cgroup.attach, [proc.pid, *children_of(proc.pid)], pids_cgroup=not inside)
    return w
