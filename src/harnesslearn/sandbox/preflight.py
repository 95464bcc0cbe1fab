"""The start-up self-test: run one hostile harness through the real launch path and refuse to
run when isolation does not hold.

The probe harness tries to read a canary file planted outside the sandbox, write next to it,
open inet and netlink sockets, see host environment variables, unshare a namespace, and
reports whether seccomp is active and which uid it runs as. The trusted side then checks what
it saw against what must hold. It covers the guards that, if silently missing (bwrap not
working, seccomp not applied, a mount leaking), would otherwise go unnoticed; it is not a
proof of isolation.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from pathlib import Path

PROBE = r'''
import json, os, socket

def solve(model, question):
    cfg = json.loads(question)
    seen = {}
    try:
        seen["canary"] = open(cfg["canary"]).read()
    except OSError as e:
        seen["canary"] = "denied"
    try:
        with open(cfg["write"], "w") as f:
            f.write("x")
        seen["write"] = "written"
    except OSError:
        seen["write"] = "denied"
    for name, fam in (("inet", socket.AF_INET), ("inet6", socket.AF_INET6), ("netlink", 16)):
        try:
            socket.socket(fam, socket.SOCK_STREAM if fam != 16 else socket.SOCK_RAW).close()
            seen[name] = "open"
        except OSError:
            seen[name] = "denied"
    try:
        os.unshare(os.CLONE_NEWUSER)
        seen["unshare"] = "allowed"
    except (OSError, AttributeError):
        seen["unshare"] = "denied"
    seen["env"] = sorted(os.environ)
    seen["uid"] = os.getuid()
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    # personality(0xffffffff) only queries; the seccomp filter denies it with EPERM
    seen["seccomp"] = "2" if libc.personality(0xFFFFFFFF) == -1 and ctypes.get_errno() == 1 else "0"
    return json.dumps(seen)
'''

ALLOWED_ENV = {"PATH", "LANG", "HOME", "TMPDIR", "PWD", "LC_CTYPE", "MALLOC_ARENA_MAX"}


class Canary:
    """A world-readable secret file outside the sandbox, and a path beside it that must stay unwritten."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="hl-canary-")
        os.chmod(self.dir, 0o777)
        self.secret = secrets.token_hex(16)
        self.path = Path(self.dir, "answer_key.txt")
        self.path.write_text(self.secret)
        os.chmod(self.path, 0o644)
        self.write_path = Path(self.dir, "written.txt")

    def question(self) -> str:
        return json.dumps({"canary": str(self.path), "write": str(self.write_path)})

    def cleanup(self) -> None:
        for p in (self.path, self.write_path):
            p.unlink(missing_ok=True)
        os.rmdir(self.dir)


def check(isolation: str, answer: str | None, status: str, error: str | None, canary: Canary) -> list[str]:
    """What failed, as short reasons; empty when isolation holds."""
    if status != "ok" or answer is None:
        return [f"probe harness did not complete ({status}: {(error or '').strip()[-300:]})"]
    seen = json.loads(answer)
    problems = []
    if canary.secret in answer or seen.get("canary") != "denied":
        problems.append("a file outside the sandbox is readable")
    if seen.get("write") != "denied" or canary.write_path.exists():
        problems.append("a path outside the work dir is writable")
    for name in ("inet", "inet6", "netlink"):
        if seen.get(name) != "denied":
            problems.append(f"{name} sockets can be opened")
    if seen.get("unshare") != "denied":
        problems.append("namespaces can be unshared")
    extra = set(seen.get("env", [])) - ALLOWED_ENV
    if extra:
        problems.append(f"host environment visible: {', '.join(sorted(extra))[:200]}")
    if seen.get("seccomp") != "2":
        problems.append("seccomp filter not active")
    if os.geteuid() == 0 and seen.get("uid") == 0:
        problems.append("worker runs as root")
    return problems
