"""The response cache: SQLite (stdlib, WAL), keyed on the backend and the full request.

The key is sha256 of the backend's ``identity()`` (provider, model and, for servers, the
base URL and endpoint) and ``GenerateRequest.key()`` (prompt, n, temperature, top_p,
max_tokens, stop, seed). Only successful completions are stored; failures are never cached.

What it guarantees: thread- and task-safe use of one cache from many coroutines (one
connection behind a lock; each statement is short) and safe sharing of one file between
processes (WAL, busy timeout). What it does not: identical requests in flight at the same
time are not merged (both go to the model, the last write wins), nothing is evicted, and
the identity names a model, not its weights (new weights under the same ``hf:PATH`` or
server model name are served the old answers: use ``cache=False`` or a fresh cache dir).

By default only temperature-0 requests are cached (``sampled=False``); with
``sampled=True`` sampled requests are cached too, so the same request (same seed, or no
seed) returns the same samples: opt in only when that is what you want.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError
from harnesslearn.models.base import Completion, GenerateRequest, ModelBackend
from harnesslearn.sqlitewal import connect_wal

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    request TEXT NOT NULL,
    texts TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    created REAL NOT NULL
)
"""


def default_cache_path() -> Path:
    """``$HARNESSLEARN_CACHE_DIR/responses.sqlite``, else ``~/.cache/harnesslearn/responses.sqlite``."""
    from harnesslearn.fsutil import cache_dir

    return cache_dir() / "responses.sqlite"


class ResponseCache:
    """A SQLite table of completions keyed on (backend identity, request)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_cache_path()
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self.broken: str | None = None  # why writes stopped (a cache that went read-only or full mid-run)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self._unusable(e.strerror or str(e)) from None
        with self._lock:
            self._db  # noqa: B018 - open now so that a bad path fails early

    def _unusable(self, why: str) -> UserError:
        return UserError(f"the response cache {self.path} cannot be used ({why}): fix its folder, point "
                         "HARNESSLEARN_CACHE_DIR elsewhere, or turn the cache off with HARNESSLEARN_CACHE=0")

    def _connect(self) -> sqlite3.Connection:
        return connect_wal(self.path, ("PRAGMA synchronous=NORMAL", SCHEMA, "SELECT COUNT(*) FROM responses"),
                           check_same_thread=False)

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection, (re)opened on demand; callers hold ``self._lock``. A cache file that is not a
        database (damaged) is set aside as ``responses.sqlite.corrupt-TIME`` and started afresh, as
        corrupt model files are; a folder or file that cannot be opened or written is a UserError."""
        if self._conn is None:
            try:
                self._conn = self._connect()
            except sqlite3.DatabaseError as e:
                damaged = "not a database" in str(e) or "malformed" in str(e)
                if not (damaged and self.path.is_file()):
                    raise self._unusable(str(e)) from None
                aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
                try:
                    os.replace(self.path, aside)
                    for suffix in ("-wal", "-shm"):
                        Path(f"{self.path}{suffix}").unlink(missing_ok=True)
                    self._conn = self._connect()
                except (OSError, sqlite3.DatabaseError) as e2:
                    raise self._unusable(str(e2)) from None
                sys.stderr.write(f"harnesslearn: the response cache {self.path} was damaged ({e}); set aside as "
                                 f"{aside.name}, starting a new one\n")
        return self._conn

    @staticmethod
    def key(identity: str, request: GenerateRequest) -> str:
        return hashlib.sha256(f"{identity}\n{request.key()}".encode()).hexdigest()

    def get(self, identity: str, request: GenerateRequest) -> Completion | None:
        with self._lock:
            row = self._db.execute(
                "SELECT texts, prompt_tokens, completion_tokens FROM responses WHERE key = ?",
                (self.key(identity, request),),
            ).fetchone()
        if row is None:
            return None
        return Completion(texts=json.loads(row[0]), prompt_tokens=row[1], completion_tokens=row[2], cached=True)

    def put(self, identity: str, request: GenerateRequest, c: Completion) -> None:
        """Store a completion. A write that fails (a read-only or full disk) turns the cache's writes off
        with one line on stderr: a cache must never fail a model call that succeeded."""
        if self.broken is not None:
            return
        with self._lock:
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (self.key(identity, request), identity, request.key(), json.dumps(c.texts, ensure_ascii=False),
                     c.prompt_tokens, c.completion_tokens, time.time()),
                )
            except sqlite3.Error as e:
                self.broken = str(e)
                sys.stderr.write(f"harnesslearn: the response cache {self.path} cannot be written ({e}); "
                                 "responses are no longer cached in this run\n")

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Close the connection (a later use reopens it)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class CachedBackend(ModelBackend):
    """Wraps a backend with a ``ResponseCache``; ``stats()`` adds hits, misses and hit rate.

    A hit returns a ``Completion`` with ``cached=True``, latency ~0 and the token counts of
    the original call (so budgets count the same tokens whether or not the cache was hit).
    """

    def __init__(self, inner: ModelBackend, path: str | os.PathLike[str] | None = None, *,
                 sampled: bool = False, cache: ResponseCache | None = None) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.sampled = sampled
        self.cache = cache if cache is not None else ResponseCache(path)
        ident = getattr(inner, "identity", None)
        self.cache_identity = ident() if callable(ident) else inner.spec
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def cacheable(self, request: GenerateRequest) -> bool:
        return self.sampled or request.temperature == 0

    async def generate(self, request: GenerateRequest) -> Completion:
        if not self.cacheable(request):
            return await self.inner.generate(request)
        t0 = time.perf_counter()
        hit = self.cache.get(self.cache_identity, request)
        if hit is not None:
            hit.latency_s = time.perf_counter() - t0
            with self._lock:
                self.hits += 1
            return hit
        with self._lock:
            self.misses += 1
        c = await self.inner.generate(request)
        self.cache.put(self.cache_identity, request, c)
        return c

    def warm(self) -> None:
        """Load the inner model now, where it has such a step (in-process engines)."""
        warm = getattr(self.inner, "warm", None)
        if callable(warm):
            warm()

    def chat_template(self) -> bool | None:
        return self.inner.chat_template()

    def continues_assistant(self) -> bool:
        return self.inner.continues_assistant()

    async def aclose(self) -> None:
        await self.inner.aclose()
        self.cache.close()

    def stats(self) -> dict[str, Any]:
        d = dict(self.inner.stats())
        with self._lock:
            hits, misses = self.hits, self.misses
        d.update(cache_hits=hits, cache_misses=misses, cache_hit_rate=hits / (hits + misses) if hits + misses else None,
                 cache_path=str(self.cache.path))
        return d
