"""Small file helpers: writes that never leave a half-written file behind.

Every write goes to a temporary file in the target's folder, is flushed to disk, and replaces
the target with one ``os.replace``: a reader sees the old file or the new one, never a part. On
any failure the temporary file is removed and the target is untouched. What this does not
cover: the folder entry itself is not fsynced, so after a power cut the old file may reappear.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | os.PathLike[str], mode: int | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block ends without an exception, that
    file (``mode`` applied, if given) replaces ``path``. For writers that want a path, not bytes."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, p)
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically (``mode``: the file's permissions; default 0600)."""
    with atomic_path(path, mode) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_text(path: str | os.PathLike[str], text: str, mode: int | None = None) -> None:
    """Write ``text`` (UTF-8, line endings as given) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"), mode)
