"""The code that runs inside a sandboxed worker. Standard library only; imports nothing of harnesslearn.

It is started as ``python3.11 -I -S -c <this source> FD NONCE ISOLATION`` inside the sandbox
(bubblewrap, or the Landlock fallback) by ``launcher.py``. Steps:

1. apply the in-process guards that do not depend on the job: ``PR_SET_NO_NEW_PRIVS``, a seccomp
   deny-list and, in ``landlock`` mode, a Landlock ruleset (read-only system paths, read-write
   work dir, no TCP, no abstract unix sockets or signals outside the sandbox);
2. send ``{"type": "ready"}`` on the descriptor FD and wait for ONE job frame;
3. apply hard rlimits from the job (address space, CPU, processes, file size, open files,
   core 0), then run the job: ``solve`` mode execs the harness source in a fresh module
   namespace and calls ``solve(model, question)`` with ``model`` an RPC stub to the broker;
   ``code`` mode (the ``python`` tool) execs model-written code with stdout captured;
4. send ``{"type": "result", "answer": str}`` or ``{"type": "error", "kind": ..., "traceback": ...}``
   and exit.

Frames are a 4-byte big-endian length plus UTF-8 JSON carrying the per-run nonce. Nothing here
is trusted by the other side: the harness runs in this very process and can change anything
in it (including these functions). The trusted side re-validates every frame, caps sizes,
enforces the time limit, and never reads the exit code as success.
"""

import ctypes
import io
import json
import linecache
import math
import os
import resource
import signal
import socket
import struct
import sys
import threading
import traceback
import types

MAX_FRAME = 8 * 1024 * 1024

# ----------------------------------------------------------------------------- seccomp
AUDIT_ARCH_X86_64 = 0xC000003E
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
EPERM, ENOSYS, EAFNOSUPPORT = 1, 38, 97
AF_UNIX = 1
CLONE_NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
# x86_64 numbers. ptrace, process_vm_readv/writev, mount family, unshare/setns, chroot/pivot_root,
# keyring, bpf, perf_event_open, userfaultfd, io_uring, kernel modules/kexec, clocks, swap, reboot,
# uid/gid changes, open_by_handle_at.
DENIED_SYSCALLS = (
    101, 310, 311,  # ptrace, process_vm_readv, process_vm_writev
    165, 166, 155, 161, 272, 308,  # mount, umount2, pivot_root, chroot, unshare, setns
    428, 429, 430, 431, 432, 433, 442,  # open_tree, move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr
    248, 249, 250,  # add_key, request_key, keyctl
    321, 298, 323,  # bpf, perf_event_open, userfaultfd
    425, 426, 427,  # io_uring_setup, io_uring_enter, io_uring_register
    175, 176, 313, 246, 320,  # init_module, delete_module, finit_module, kexec_load, kexec_file_load
    169, 167, 168, 163, 164, 227, 159, 305,  # reboot, swapon, swapoff, acct, settimeofday, clock_settime, adjtimex, clock_adjtime
    105, 106, 113, 114, 117, 119, 116, 122, 123,  # setuid, setgid, setreuid, setregid, setresuid, setresgid, setgroups, setfsuid, setfsgid
    303, 304,  # name_to_handle_at, open_by_handle_at
    135, 139, 312,  # personality, sysfs, kcmp
)
SYS_SOCKET, SYS_SOCKETPAIR, SYS_CLONE, SYS_CLONE3 = 41, 53, 56, 435


def _ins(code, k, jt=0, jf=0):
    return struct.pack("HBBI", code, jt, jf, k)


def seccomp_program():
    """A classic-BPF filter: wrong arch -> kill; x32 and the deny-list -> EPERM; socket() and
    socketpair() of any family but AF_UNIX -> EAFNOSUPPORT; clone() with namespace flags -> EPERM;
    clone3 -> ENOSYS (so libc falls back to clone, whose flags we can see); else allow."""
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
    p = [_ins(LD, 4), _ins(JEQ, AUDIT_ARCH_X86_64, 1, 0), _ins(RET, RET_KILL_PROCESS), _ins(LD, 0)]
    p += [_ins(JGE, 0x40000000, 0, 1), _ins(RET, 0x00050000 | EPERM)]
    for nr in DENIED_SYSCALLS:
        p += [_ins(JEQ, nr, 0, 1), _ins(RET, 0x00050000 | EPERM)]
    p += [_ins(JEQ, SYS_CLONE3, 0, 1), _ins(RET, 0x00050000 | ENOSYS)]
    for nr in (SYS_SOCKET, SYS_SOCKETPAIR):
        p += [_ins(JEQ, nr, 0, 4), _ins(LD, 16), _ins(JEQ, AF_UNIX, 1, 0),
              _ins(RET, 0x00050000 | EAFNOSUPPORT), _ins(RET, RET_ALLOW)]
    p += [_ins(JEQ, SYS_CLONE, 0, 4), _ins(LD, 16), _ins(JSET, CLONE_NS_FLAGS, 0, 1),
          _ins(RET, 0x00050000 | EPERM), _ins(RET, RET_ALLOW)]
    p.append(_ins(RET, RET_ALLOW))
    return b"".join(p)


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.syscall.restype = ctypes.c_long
    return libc


def apply_seccomp(libc):
    prog = seccomp_program()
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = struct.pack("HxxxxxxQ", len(prog) // 8, ctypes.addressof(buf))
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    if libc.prctl(22, 2, ctypes.addressof(fbuf), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


# ----------------------------------------------------------------------------- landlock
FS_READ = 1 | 4 | 8  # execute, read_file, read_dir
FS_ALL_V1 = (1 << 13) - 1
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FS_FILE_ONLY = 1 | 2 | 4 | FS_TRUNCATE | FS_IOCTL_DEV  # rights that apply to a file (not a dir)


def apply_landlock(libc, read_paths, write_paths):
    """Restrict the filesystem to ``read_paths`` (read/execute) and ``write_paths`` (everything),
    TCP bind/connect to nothing (ABI >= 4), and abstract unix sockets and signals to this
    sandbox (ABI >= 6). Raises OSError when Landlock is unavailable."""
    abi = libc.syscall(444, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        raise OSError(ctypes.get_errno(), "landlock unavailable")
    fs = FS_ALL_V1 | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0)
    fs |= FS_IOCTL_DEV if abi >= 5 else 0
    attr = struct.pack("QQQ", fs, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    abuf = ctypes.create_string_buffer(attr, 24)
    rfd = libc.syscall(444, abuf, size, 0)
    if rfd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    for paths, access in ((read_paths, FS_READ), (write_paths, fs)):
        for path in paths:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            allowed = access if os.path.isdir(path) else access & FS_FILE_ONLY
            rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, pfd), 12)
            if libc.syscall(445, rfd, 1, rule, 0) != 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule {path} failed")
            os.close(pfd)
    if libc.syscall(446, rfd, 0) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    os.close(rfd)


# ----------------------------------------------------------------------------- framing
class Channel:
    """Length-prefixed JSON frames on a socket; sends are serialised by a lock."""

    def __init__(self, fd, nonce):
        self.sock = socket.socket(fileno=fd)
        self.nonce = nonce
        self.lock = threading.Lock()

    def send(self, obj):
        obj["nonce"] = self.nonce
        data = json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf-8")
        with self.lock:
            self.sock.sendall(struct.pack(">I", len(data)) + data)

    def _exact(self, n):
        chunks = []
        while n:
            b = self.sock.recv(min(n, 1 << 20))
            if not b:
                raise EOFError("broker closed the channel")
            chunks.append(b)
            n -= len(b)
        return b"".join(chunks)

    def recv(self):
        (n,) = struct.unpack(">I", self._exact(4))
        if n > MAX_FRAME:
            raise EOFError("oversized frame from broker")
        return json.loads(self._exact(n).decode("utf-8"))


# ----------------------------------------------------------------------------- the model handle
class ModelError(RuntimeError):
    """A model or tool call failed (the broker said so, or the channel is gone)."""


class _Calls:
    """Request ids and a reader thread that hands each response to the thread waiting for it."""

    def __init__(self, chan):
        self.chan = chan
        self.cond = threading.Condition()
        self.responses = {}
        self.next_id = 0
        self.closed = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            try:
                msg = self.chan.recv()
            except (OSError, EOFError, ValueError) as e:
                with self.cond:
                    self.closed = str(e) or type(e).__name__
                    self.cond.notify_all()
                return
            with self.cond:
                self.responses[msg.get("id")] = msg
                self.cond.notify_all()

    def call(self, kind, request):
        with self.cond:
            self.next_id += 1
            rid = self.next_id
        try:
            self.chan.send({"type": "call", "id": rid, "kind": kind, "request": request})
        except OSError as e:
            raise ModelError(f"{kind} call failed: channel closed ({e})") from None
        with self.cond:
            while rid not in self.responses and self.closed is None:
                self.cond.wait()
            msg = self.responses.pop(rid, None)
        if msg is None:
            raise ModelError(f"{kind} call failed: {self.closed}")
        if not msg.get("ok"):
            raise ModelError(str(msg.get("error") or f"{kind} call failed"))
        return msg.get("value")


def _sampling(n=1, temperature=0.0, max_tokens=256, stop=None, top_p=1.0, seed=None):
    if isinstance(stop, str):
        stop = [stop]
    return {"n": n, "temperature": temperature, "max_tokens": max_tokens, "stop": stop, "top_p": top_p, "seed": seed}


class Model:
    """The harness's handle on the solver and the tools (see RUNTIME_API.md)."""

    def __init__(self, calls):
        self._calls = calls

    def __call__(self, prompt, **params):
        params["n"] = 1
        texts = self.generate(prompt, **params)
        return texts[0] if texts else ""

    def generate(self, prompt_or_messages, **params):
        req = _sampling(**params)
        req["prompt"] = prompt_or_messages
        return list(self._calls.call("model", req))

    def python(self, code, timeout=5.0):
        return str(self._calls.call("python", {"code": code, "timeout": timeout}))

    def search(self, query, k=5):
        return list(self._calls.call("search", {"query": query, "k": k}))


# ----------------------------------------------------------------------------- running a job
class CappedWriter(io.TextIOBase):
    """A text sink that keeps the first ``cap`` characters and drops the rest."""

    def __init__(self, cap):
        self.cap, self.parts, self.size = cap, [], 0

    def write(self, s):
        s = str(s)
        if self.size < self.cap:
            self.parts.append(s[: self.cap - self.size])
        self.size += len(s)
        return len(s)

    def getvalue(self):
        return "".join(self.parts)


def apply_rlimits(lim):
    used_cpu = math.ceil(resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime)
    cpu = used_cpu + int(math.ceil(lim["cpu_s"]))
    for name, soft, hard in (
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_CPU", cpu, cpu + 1),
        ("RLIMIT_AS", lim["memory_bytes"], lim["memory_bytes"]),
        ("RLIMIT_NPROC", lim["nproc"], lim["nproc"]),
        ("RLIMIT_FSIZE", lim["fsize_bytes"], lim["fsize_bytes"]),
        ("RLIMIT_NOFILE", lim["nofile"], lim["nofile"]),
    ):
        resource.setrlimit(getattr(resource, name), (soft, hard))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writing past the cap raises OSError(EFBIG)


def short_traceback(exc, filename, limit=4000):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    text = "".join(traceback.format_list(frames[-8:])) + "".join(traceback.format_exception_only(type(exc), exc))
    return text[-limit:]


def run_solve(job, calls):
    src = job["source"]
    fname = "<harness>"
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    mod = types.ModuleType("harness")
    mod.__dict__["__file__"] = fname
    sys.modules["harness"] = mod
    try:
        exec(compile(src, fname, "exec"), mod.__dict__)
        solve = mod.__dict__.get("solve")
        if not callable(solve):
            return {"type": "error", "kind": "harness_error", "traceback": "harness defines no callable solve(model, question)"}
        answer = solve(Model(calls), job["question"])
    except MemoryError:
        return {"type": "error", "kind": "memory", "traceback": "MemoryError"}
    except SystemExit as e:
        return {"type": "error", "kind": "no_result", "traceback": f"solve exited via SystemExit({e.code!r}) without returning"}
    except (Exception, KeyboardInterrupt) as e:
        return {"type": "error", "kind": "harness_error", "traceback": short_traceback(e, fname)}
    if type(answer) is not str:
        return {"type": "error", "kind": "bad_result", "traceback": f"solve returned {type(answer).__name__}, not str"}
    if len(answer) > job["answer_max_chars"]:
        return {"type": "error", "kind": "bad_result", "traceback": f"answer of {len(answer)} chars exceeds the cap"}
    return {"type": "result", "answer": answer}


def run_code(job):
    out = CappedWriter(job["output_max_chars"])
    sys.stdout = sys.stderr = out
    try:
        exec(compile(job["code"], "<code>", "exec"), {"__name__": "__main__"})
    except SystemExit as e:
        if e.code not in (None, 0):
            out.write(f"Error: SystemExit: {e.code}")
            return {"type": "result", "answer": f"Error: SystemExit: {e.code}"}
    except MemoryError:
        return {"type": "result", "answer": "Error: MemoryError"}
    except (Exception, KeyboardInterrupt) as e:
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        return {"type": "result", "answer": f"Error: {last}"[:2000]}
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    return {"type": "result", "answer": out.getvalue()}


def main():
    fd, nonce, isolation = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    chan = Channel(fd, nonce)
    libc = _libc()
    if isolation != "none" and libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if isolation == "landlock":
        work = os.getcwd()
        apply_landlock(libc, ["/usr", "/lib", "/lib64", "/bin", "/etc/localtime", "/dev/urandom"], [work, "/dev/null"])
    if isolation != "none":
        apply_seccomp(libc)
    chan.send({"type": "ready", "pid": os.getpid()})
    job = chan.recv()
    apply_rlimits(job["limits"])
    if job.get("mode") == "code":
        out = run_code(job)
    else:
        out = run_solve(job, _Calls(chan))
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    try:
        chan.send(out)
    except (OSError, ValueError) as e:  # ValueError: NaN etc. cannot be JSON
        chan.send({"type": "error", "kind": "bad_result", "traceback": f"result not sendable: {e}"})
    os._exit(0)


if __name__ == "__main__":
    main()
