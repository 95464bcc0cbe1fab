"""Opening a SQLite file in WAL mode that several processes may create at the same moment.

Two processes that create the same new database at once can get "database is locked" from the switch
to WAL or the first read without SQLite's busy wait (measured here on the memory file: 4-5 of 60 pairs
of processes). That is a wait, not damage: ``connect_wal`` retries it for up to ``wait_s`` seconds, so
callers that treat other errors as a damaged file (the memory, the response cache) never mistake a
neighbour's open for one.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def connect_wal(path: str | Path, statements: Sequence[str], *, wait_s: float = 30.0,
                **connect: Any) -> sqlite3.Connection:
    """``sqlite3.connect(path, timeout=wait_s, isolation_level=None, **connect)``, then
    ``PRAGMA journal_mode=WAL`` and each of ``statements`` (schema, a probe read); retried while the
    file is locked by another process's open."""
    deadline = time.monotonic() + wait_s
    while True:
        conn = sqlite3.connect(path, timeout=wait_s, isolation_level=None, **connect)
        try:
            for sql in ("PRAGMA journal_mode=WAL", *statements):
                conn.execute(sql).fetchall()
            return conn
        except sqlite3.OperationalError as e:
            conn.close()
            if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        except BaseException:
            conn.close()
            raise
