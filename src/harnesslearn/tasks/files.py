"""Reading task files: a JSON list or JSONL, with errors that name the file and line.

Parsed files are cached in memory per (path, size, mtime), so building the same task twice, or
a QA task and its corpus, reads each file once per process.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError

Record = tuple[str, dict[str, Any]]  # (where: "line 12" or "item 3", the object)


def resolve_path(raw: str, *, what: str, search_dirs: tuple[Path, ...] = ()) -> Path:
    """``raw`` as a file path; a relative path that does not exist is also looked up in
    ``search_dirs``. Raises ``UserError`` when it is not found."""
    if not raw:
        raise UserError(f"{what}: missing file path")
    p = Path(raw).expanduser()
    if p.is_file():
        return p
    if not p.is_absolute():
        for d in search_dirs:
            if (d / p).is_file():
                return d / p
    raise UserError(f"{what}: file not found: {raw}")


def read_records(path: Path) -> list[Record]:
    """The objects in a JSON-list or JSONL file (the first non-blank character decides)."""
    st = path.stat()
    return list(_read_cached(str(path.resolve()), st.st_size, st.st_mtime_ns))


@lru_cache(maxsize=16)
def _read_cached(path: str, size: int, mtime_ns: int) -> tuple[Record, ...]:
    name = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as f:
            head = f.read(4096).lstrip()
            f.seek(0)
            if head.startswith("["):
                return tuple(_json_list(name, f.read()))
            return tuple(_jsonl(name, f))
    except UnicodeDecodeError as e:
        raise UserError(f"{name}: not UTF-8 text ({e.reason})") from None
    except OSError as e:
        raise UserError(f"cannot read {name}: {e.strerror or e}") from None


def _json_list(name: str, text: str) -> list[Record]:
    from harnesslearn.fsutil import untrusted_json

    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{name}: not valid JSON at line {e.lineno}: {e.msg}") from None
    except RecursionError:
        raise UserError(f"{name}: JSON nested too deeply to read") from None
    except ValueError as e:  # an integer of more than 4,300 digits
        raise UserError(f"{name}: {str(e).split(';')[0]}") from None
    if not isinstance(data, list):
        raise UserError(f"{name}: expected a JSON list of objects")
    out: list[Record] = []
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            raise UserError(f"{name}: item {i}: expected a JSON object")
        untrusted_json(f"{name}: item {i}", row)
        out.append((f"item {i}", row))
    return out


def _jsonl(name: str, lines: Any) -> list[Record]:
    from harnesslearn.fsutil import json_lines

    return [(f"line {lineno}", row) for lineno, row in json_lines(name, lines)]
