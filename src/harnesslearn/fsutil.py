"""Small file helpers: writes that never leave a half-written file behind, and JSONL reading.

Every write goes to a temporary file in the target's folder, is flushed to disk, and replaces
the target with one ``os.replace``: a reader sees the old file or the new one, never a part. On
any failure the temporary file is removed and the target is untouched. What this does not
cover: the folder entry itself is not fsynced, so after a power cut the old file may reappear.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The sha256 hex digest of a file's bytes, read in 4 MiB blocks."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, an empty interval's bound, infinity) as None, at any depth:
    JSON has no NaN or Infinity, and a reader must never meet them."""
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def json_lines(name: str, lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSONL text; a line that is not a JSON object
    (malformed, nested too deeply to parse, or another JSON value) or that ``untrusted_json`` refuses is a
    one-line UserError naming it."""
    from harnesslearn.errors import UserError

    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{name}: line {lineno}: malformed JSON ({e.msg})") from None
        except RecursionError:
            raise UserError(f"{name}: line {lineno}: JSON nested too deeply to read") from None
        except ValueError as e:  # an integer of more than 4,300 digits (sys.get_int_max_str_digits)
            raise UserError(f"{name}: line {lineno}: {str(e).split(';')[0]}") from None
        if not isinstance(row, dict):
            raise UserError(f"{name}: line {lineno}: expected a JSON object")
        untrusted_json(f"{name}: line {lineno}", row)
        yield lineno, row


def untrusted_json(where: str, value: Any) -> None:
    """A UserError naming ``where`` when a value read from a user's file holds a string that is not UTF-8 text
    (a lone surrogate written as ``"\\ud800"``): no store, JSON output or terminal of ours could take it."""
    from harnesslearn.errors import UserError
    from harnesslearn.untrusted import lone_surrogate

    at = lone_surrogate(value)
    if at is not None:
        raise UserError(f"{where}: {('field ' + repr(at)) if at else 'a string'} holds a lone surrogate (a \\ud800-style "
                        "escape that is not UTF-8 text)")


def read_regular(path: str | os.PathLike[str], max_bytes: int, *, follow_links: bool = False) -> bytes:
    """The bytes of a regular file that is not a symbolic link (``O_NOFOLLOW``; ``follow_links``: a link to a
    regular file will do), at most ``max_bytes``: a FIFO, a device, a link (to ``/dev/zero`` or out of a
    folder) or a larger file is an OSError or a ValueError, never a hang or a read without end."""
    nofollow = 0 if follow_links else os.O_NOFOLLOW
    fd = os.open(path, os.O_RDONLY | nofollow | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > max_bytes:
            raise ValueError(f"larger than {max_bytes:,} bytes")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes:,} bytes")
    return data


def read_user_file(path: str | os.PathLike[str], what: str) -> str:
    """The text of a file the user named, or a one-line UserError: ``{what} not found``, ``{what} is not
    a file``, ``cannot read {what}`` (permissions, not UTF-8)."""
    from harnesslearn.errors import UserError

    p = Path(path)
    if not p.exists():
        raise UserError(f"{what} not found: {path}")
    if not p.is_file():
        raise UserError(f"{what} is not a file: {path}")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {what} {path}: {e}") from None


def cache_dir() -> Path:
    """The cache folder: ``$HARNESSLEARN_CACHE_DIR``, else ``~/.cache/harnesslearn`` (the unpacked models, the
    response cache, the default harness memory)."""
    base = os.environ.get("HARNESSLEARN_CACHE_DIR")
    return Path(base).expanduser() if base else Path.home() / ".cache" / "harnesslearn"


def scratch_cache(prefix: str = "harnesslearn-scratch-") -> Path | None:
    """Unless the caller chose a cache folder (``$HARNESSLEARN_CACHE_DIR`` set: then None), point it at a new
    temporary folder whose ``models`` is the real one, linked (the models are an install artefact, 1 GB for
    the Qwen 1.5B), and turn the default harness memory off unless one was chosen: what a benchmark or the
    test suite writes (responses, task items, memory) never lands in the user's cache. Returns the folder."""
    if os.environ.get("HARNESSLEARN_CACHE_DIR"):
        return None
    os.environ.setdefault("HARNESSLEARN_MEMORY", "0")
    return use_cache(Path(tempfile.mkdtemp(prefix=prefix)))


def use_cache(folder: Path) -> Path:
    """Make ``folder`` the cache folder (``$HARNESSLEARN_CACHE_DIR``) with the current one's unpacked models
    linked in as its ``models``; returns it."""
    real = cache_dir()
    (real / "models").mkdir(parents=True, exist_ok=True)
    (folder / "models").symlink_to(real / "models", target_is_directory=True)
    os.environ["HARNESSLEARN_CACHE_DIR"] = str(folder)
    return folder
