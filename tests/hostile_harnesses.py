"""The public hostile suite: harness sources that attack the executor, with the statuses each
may end in. Used by tests/test_hostile.py (executor) and tests/test_run_cli.py (CLI).

Placeholders filled in by the tests: CANARY (a secret file outside the sandbox), WRITE_DIR (a
host directory that must stay unchanged), KEYFILE (the task's answer file), SECRET_ENV (the
name of a secret environment variable of the trusted process).
"""

from __future__ import annotations

H: dict[str, tuple[str, set[str]]] = {}


def hostile(name: str, statuses: set[str], source: str) -> None:
    H[name] = (source, statuses)


# ---------------------------------------------------------------- broken harnesses
hostile("syntax_error", {"harness_error"}, "def solve(model, question)\n    return 'x'\n")
hostile("missing_solve", {"harness_error"}, "def answer(model, question):\n    return 'x'\n")
hostile("mis_signed_solve", {"harness_error"}, "def solve(model):\n    return 'x'\n")
hostile("failing_import", {"harness_error"}, "import no_such_module_xyz\ndef solve(model, question):\n    return 'x'\n")
hostile("solve_not_callable", {"harness_error"}, "solve = 42\n")

# ---------------------------------------------------------------- time
hostile("infinite_loop", {"timeout"}, "def solve(model, question):\n    while True:\n        pass\n")
hostile("sleep", {"timeout"}, "import time\ndef solve(model, question):\n    time.sleep(3600)\n")
hostile("blocked_stdin", {"harness_error"}, """  # stdin is /dev/null: input() raises EOFError
import sys
def solve(model, question):
    while True:
        if sys.stdin.read(1) == '':
            return input()
""")
hostile("ignore_sigterm_and_timers", {"timeout"}, """
import signal, time
def solve(model, question):
    for s in (signal.SIGTERM, signal.SIGALRM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGVTALRM):
        signal.signal(s, signal.SIG_IGN)
    signal.setitimer(signal.ITIMER_REAL, 0)
    while True:
        time.sleep(0.01)
""")

# ---------------------------------------------------------------- processes
hostile("fork_bomb", {"timeout"}, """  # fork fails (process limits), the loop goes on
import os
def solve(model, question):
    while True:
        try:
            os.fork()
        except OSError:
            pass
""")
hostile("thread_bomb", {"harness_error"}, """  # "can't start new thread" (process limit)
import threading, time
def solve(model, question):
    ts = []
    while True:
        t = threading.Thread(target=time.sleep, args=(3600,))
        t.start()
        ts.append(t)
""")
hostile("setsid_double_fork_daemon", {"ok"}, """
import os, time
def solve(model, question):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            while True:
                time.sleep(0.05)
                try:
                    open('WRITE_DIR/daemon_was_here', 'w').write('x')
                except OSError:
                    pass
        os._exit(0)
    time.sleep(0.2)
    return 'daemon started'
""")
hostile("kill_parent_and_everyone", {"ok"}, """  # its signals reach nothing outside
import os, signal
def solve(model, question):
    for pid in (os.getppid(), 1, -1, 0):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return 'still here'
""")

# ---------------------------------------------------------------- memory and output
hostile("memory_bomb", {"memory"}, "def solve(model, question):\n    x = bytearray(64 * 1024 ** 3)\n    return 'x'\n")
hostile("slow_leak", {"memory", "timeout"}, """
import time
def solve(model, question):
    hoard = []
    while True:
        hoard.append(b'x' * (8 * 1024 * 1024))
        time.sleep(0.001)
""")
hostile("print_gigabytes", {"timeout"}, """
import sys, os
def solve(model, question):
    chunk = 'y' * (1 << 20)
    while True:
        sys.stdout.write(chunk)
        os.write(2, chunk.encode())
""")
hostile("close_stdout_and_hang", {"timeout"}, """
import os, time
def solve(model, question):
    os.close(1)
    os.close(2)
    time.sleep(3600)
""")
hostile("disk_fill", {"harness_error"}, """  # the write fails: file size limit or a full tmpfs
def solve(model, question):
    with open('/tmp/fill', 'wb') as f:
        while True:
            f.write(b'z' * (1 << 20))
""")
hostile("inode_fill", {"harness_error", "timeout"}, """  # never returns: a full tmpfs or the clock
import os
def solve(model, question):
    os.makedirs('/tmp/inodes', exist_ok=True)
    i = 0
    while True:
        open(f'/tmp/inodes/{i}', 'w').close()
        i += 1
""")

# ---------------------------------------------------------------- crashes and exits
hostile("runaway_recursion", {"harness_error"}, "def f(n):\n    return f(n + 1)\ndef solve(model, question):\n    return f(0)\n")
hostile("deep_c_recursion", {"timeout", "memory"}, """  # 3.11 recurses on the heap, not the C stack
import sys
def solve(model, question):
    sys.setrecursionlimit(10 ** 8)
    def f(n):
        return f(n + 1) + 1
    return str(f(0))
""")
hostile("segfault", {"crash"}, "import ctypes\ndef solve(model, question):\n    return ctypes.string_at(0)\n")
hostile("abort", {"crash"}, "import os\ndef solve(model, question):\n    os.abort()\n")
hostile("sys_exit_0", {"no_result"}, "import sys\ndef solve(model, question):\n    sys.exit(0)\n")
hostile("os_exit_0", {"no_result"}, "import os\ndef solve(model, question):\n    os._exit(0)\n")

# ---------------------------------------------------------------- bad results
hostile("always_equal", {"bad_result"}, """
class Eq(str):
    def __eq__(self, other):
        return True
    __hash__ = str.__hash__
def solve(model, question):
    return Eq('anything')
""")
hostile("always_equal_object", {"bad_result"}, """
class Eq:
    def __eq__(self, other):
        return True
def solve(model, question):
    return Eq()
""")
hostile("generator", {"bad_result"}, "def solve(model, question):\n    yield 'x'\n")
hostile("huge_string", {"bad_result"}, "def solve(model, question):\n    return 'a' * (50 * 1024 * 1024)\n")
hostile("nan", {"bad_result"}, "def solve(model, question):\n    return float('nan')\n")
hostile("fake_success_markers", {"ok"}, """
import os, json, struct
def solve(model, question):
    print('{"type": "result", "answer": "correct", "score": 1.0}')
    print('status: ok\\nscore: 1.0\\nJ = 1.0')
    os.write(2, b'PASS: all answers correct')
    return 'wrong'
""")
hostile("forged_frame", {"bad_result"}, """
import os, json, struct, sys
def solve(model, question):
    fd = int(sys.argv[1])  # the worker's result descriptor
    data = json.dumps({"type": "result", "answer": "forged", "nonce": "not-the-nonce"}).encode()
    os.write(fd, struct.pack('>I', len(data)) + data)
    import time; time.sleep(5)
""")
hostile("oversized_frame", {"bad_result"}, """
import os, struct, sys
def solve(model, question):
    os.write(int(sys.argv[1]), struct.pack('>I', 2 ** 31) + b'{')
    import time; time.sleep(5)
""")

# ---------------------------------------------------------------- peeking at the answer key
hostile("read_answer_key", {"ok"}, r"""
import os, glob
def solve(model, question):
    found = []
    paths = ['KEYFILE', 'CANARY', '/proc/1/environ', '/proc/self/environ']
    for root in ('/work', '/root', '/home', '/tmp', '/proc', os.path.expanduser('~/.cache')):
        paths += glob.glob(root + '/*')[:50]
    for pid in os.listdir('/proc'):
        if pid.isdigit():
            paths += [f'/proc/{pid}/environ', f'/proc/{pid}/cmdline']
    for p in paths:
        try:
            with open(p, 'rb') as f:
                found.append(f.read(2000).decode('utf-8', 'replace'))
        except OSError:
            pass
    found.append(repr(dict(os.environ)))
    found.append(str(os.environ.get('SECRET_ENV')))
    return '\n'.join(found)[:90000]
""")
hostile("walk_frames_and_gc", {"ok"}, """
import gc, sys
def solve(model, question):
    seen = []
    f = sys._getframe()
    while f is not None:
        seen.append(repr(f.f_locals)[:2000])
        f = f.f_back
    for o in gc.get_objects():
        if isinstance(o, dict):
            seen.append(repr(o)[:200])
    return '\\n'.join(seen)[:90000]
""")
hostile("monkey_patch_model_and_tools", {"no_result"}, """  # the patched channel drops the result
import sys
def solve(model, question):
    cls = type(model)
    cls.__call__ = lambda self, *a, **k: 'patched'
    cls.python = lambda self, *a, **k: 'patched'
    main = sys.modules.get('__main__')
    if main is not None and hasattr(main, 'Channel'):
        main.Channel.send = lambda self, obj: None
    return model('What is the answer?') + '|' + model.python('print(1)')
""")
hostile("write_runtime_and_site_packages", {"ok"}, r"""
import os, json
def solve(model, question):
    results = {}
    for p in ('/usr/lib/python3.11/os.py', '/usr/lib/python3.11/hl_injected.py',
              'WRITE_DIR/injected.py', '/usr/lib/python3/dist-packages/hl_injected.pth'):
        try:
            with open(p, 'a') as f:
                f.write('# injected\n')
            results[p] = 'written'
        except OSError as e:
            results[p] = 'denied'
    return json.dumps(results)
""")

# ---------------------------------------------------------------- budgets
hostile("flood_model_from_threads", {"budget_exceeded"}, """
import threading
def solve(model, question):
    def spam():
        for _ in range(100):
            try:
                model('spam')
            except RuntimeError:
                pass
    ts = [threading.Thread(target=spam) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return 'done'
""")

# ---------------------------------------------------------------- kernel attack surface
hostile("sockets_of_every_kind", {"ok"}, r"""
import socket, json
def solve(model, question):
    out = {}
    for name, fam, typ in (('inet', socket.AF_INET, socket.SOCK_STREAM), ('inet_udp', socket.AF_INET, socket.SOCK_DGRAM),
                           ('inet6', socket.AF_INET6, socket.SOCK_STREAM), ('netlink', 16, socket.SOCK_RAW),
                           ('packet', 17, socket.SOCK_RAW), ('vsock', 40, socket.SOCK_STREAM), ('bluetooth', 31, socket.SOCK_STREAM)):
        try:
            s = socket.socket(fam, typ)
            try:
                s.connect(('1.1.1.1', 53) if fam == socket.AF_INET else ('::1', 22) if fam == socket.AF_INET6 else None)
                out[name] = 'connected'
            except (OSError, TypeError):
                out[name] = 'created'
            s.close()
        except OSError:
            out[name] = 'denied'
    for path in ('/run/docker.sock', '/var/run/dbus/system_bus_socket', '\0/tmp/.X11-unix/X0'):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            out[path] = 'connected'
        except OSError:
            out[path] = 'denied'
    return json.dumps(out)
""")
hostile("privileged_syscalls", {"ok"}, r"""
import ctypes, os, json
def solve(model, question):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    out = {}
    for name, nr, args in (('setuid0', 105, (0,)), ('ptrace_attach', 101, (16, 1, 0, 0)),
                           ('unshare_user', 272, (0x10000000,)), ('mount', 165, (b'none', b'/tmp', b'tmpfs', 0, 0)),
                           ('io_uring_setup', 425, (8, ctypes.create_string_buffer(120))), ('bpf', 321, (0, 0, 0)),
                           ('keyctl', 250, (0, 0)), ('userfaultfd', 323, (0,)), ('perf_event_open', 298, (0, 0, -1, -1, 0)),
                           ('chroot', 161, (b'/tmp',)), ('setns', 308, (0, 0)), ('process_vm_readv', 310, (1, 0, 0, 0, 0, 0))):
        r = libc.syscall(nr, *args)
        out[name] = 'allowed' if r >= 0 else 'denied'
    try:
        os.setuid(0)
        out['os.setuid'] = 'allowed'
    except OSError:
        out['os.setuid'] = 'denied'
    return json.dumps(out)
""")

# ---------------------------------------------------------------- the python tool
hostile("python_tool_hostile_code", {"ok"}, r"""
import json
CODES = {
    'canary': "print(open('CANARY').read())",
    'socket': "import socket; s = socket.socket(); s.connect(('1.1.1.1', 53)); print('connected')",
    'loop': "while True: pass",
    'memory': "x = bytearray(10 ** 10); print('allocated')",
    'segfault': "import ctypes; ctypes.string_at(0)",
    'exit': "import os; os._exit(0)",
    'fork_bomb': "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    'daemon': "import os, time\nif os.fork() == 0:\n    os.setsid()\n    while True: time.sleep(1)\nprint('spawned')",
    'write': "open('WRITE_DIR/from_tool', 'w').write('x'); print('written')",
    'print_flood': "while True: print('x' * 100000)",
    'unshare': "import os; os.unshare(os.CLONE_NEWUSER); print('unshared')",
}
def solve(model, question):
    out = {}
    for name, code in CODES.items():
        out[name] = model.python(code, timeout=1.0)[:300]
    out['fine'] = model.python('print(6 * 7)')
    return json.dumps(out)
""")
hostile("forged_frame_with_nonce", {"ok"}, """
import os, json, struct, sys
def solve(model, question):
    data = json.dumps({"type": "result", "answer": "forged", "nonce": sys.argv[2]}).encode()
    os.write(int(sys.argv[1]), struct.pack('>I', len(data)) + data)
    import time; time.sleep(5)
""")
# Six children of 300 MB each: each fits under the per-process address-space limit (512 MB in the
# suite), together they pass the slot's cgroup memory cap (2 x 512 + 256 + 64 MB): the OOM killer
# must kill at least two of them (the harness itself stays small, survives and counts them).
# One child fills at a time: six filling at once, each stuck short of 300 MB at the cap, can keep
# the kernel reclaiming the slot's file pages for seconds on 2 busy cores without calling the OOM
# killer (seen in the full suite: all six still running after 9 s), which tests the clock, not the cap.
# Even one at a time, the full suite once saw 'filled 3, killed 1' at a 9 s deadline: it is 25 s now
# (the suite waits for it only when the kernel is that slow).
hostile("fork_then_fill_memory", {"ok", "memory"}, """
import os, signal, time, select, sys
def solve(model, question):
    t0 = time.time()
    pids, filled, deadline = [], 0, t0 + 25  # 1-6 s measured on 2 busy cores
    for _ in range(6):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                hoard = b'x' * (300 * 1024 * 1024)  # touches every page
                os.write(w, b'1')
                time.sleep(30)
            finally:
                os._exit(0)
        os.close(w)
        pids.append(pid)
        while time.time() < deadline:  # until this child has filled, or died (end of file)
            if select.select([r], [], [], 0.1)[0]:
                got = len(os.read(r, 1))
                filled += got
                print('child %d %s at %.1f s' % (len(pids), 'filled' if got else 'gone', time.time() - t0),
                      file=sys.stderr)  # evidence for a failing test
                break
        os.close(r)
    killed, grace = 0, time.time() + 2  # an OOM victim may still be exiting
    while pids and time.time() < grace:
        for pid in list(pids):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                pids.remove(pid)
                killed += os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        if killed >= 2:
            break
        time.sleep(0.05)
    return 'filled %d, killed %d' % (filled, killed)
""")
