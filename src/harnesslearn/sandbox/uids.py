"""Leases of unprivileged uids for sandbox slots (root only).

Each concurrent slot needs a uid that nothing else uses: after a job the executor kills every
process of that uid, and RLIMIT_NPROC counts per uid. Several executors (in one process or in
several processes, e.g. parallel test runs) must therefore never share a uid. A lease is an
exclusive ``flock`` on ``<lock dir>/<uid>.lock``; the kernel drops it when the holder exits, so a
crashed process never leaks its uids. The ids are plain numbers: no /etc/passwd entry is needed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from harnesslearn.errors import InfraError

LOCK_DIR = Path("/tmp/harnesslearn-uid-leases")
UID_FIRST, UID_LAST = 61000, 64999


class UidLease:
    """Holds one uid until ``release()`` (or process exit)."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid, self._fd = uid, fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _lock_dir() -> Path:
    LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
    st = LOCK_DIR.lstat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise InfraError(f"{LOCK_DIR} is not a private directory of this user; refusing to lease uids")
    return LOCK_DIR


def lease_uid(first: int = UID_FIRST, last: int = UID_LAST) -> UidLease:
    """Lease the first free uid in [first, last]. Raises InfraError when all are taken."""
    d = _lock_dir()
    for uid in range(first, last + 1):
        fd = os.open(d / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidLease(uid, fd)
    raise InfraError(f"no free sandbox uid in {first}..{last}")


def release_all(leases: list[UidLease]) -> None:
    for lease in leases:
        with contextlib.suppress(OSError):
            lease.release()
