"""The run store: one run directory = ``runs.sqlite`` + ``harnesses/<id>.py``.

Layout of a run directory::

    RUN_DIR/
      runs.sqlite          # stdlib sqlite3, WAL journal, foreign keys on
      harnesses/<id>.py    # every harness version's source (id = sha256 of the source)

Schema (created by the named, ordered migrations in ``MIGRATIONS``; the ones applied are
recorded in the ``migrations`` table, as simonw/llm does):

- ``runs(id, created, strategy, config JSON, status, result JSON)``: one row per adaptation
  run (``adapt`` uses the strategy name as the run id; ``compare`` writes one run per
  strategy). status: running | done | failed.
- ``harnesses(id, parent_id, edit, path, name, run_id, round, created)``: lineage. ``edit`` is
  the proposer text that produced the harness from ``parent_id``; ``path`` is relative to the
  run directory. A harness is content-addressed, so the first writer's lineage is kept.
- ``evaluations(id, run_id, harness_id, task, split, n, seed, J, completion_rate,
  solver_calls, tokens, wall_s, round, purpose, created)``, UNIQUE on the cache key
  ``(run_id, harness_id, task, split, n, seed)`` so that ``--resume`` can find finished work.
  ``purpose``: feedback | score | test | oracle (free text, for display).
- ``problem_records(evaluation_id, idx, problem_id, family, question, gold, answer, score,
  details JSON, status, error, calls, tokens, wall_s, taxonomy)``: ``taxonomy`` is the failure
  class of a failed problem (see taxonomy.py), NULL for a full score.
- ``proposals(id, run_id, round, idx, parent_id, prompt, raw, parsed, produced, valid, reason,
  detail, n_blocks, harness_id, created)``, UNIQUE ``(run_id, round, idx)``. ``idx`` is the
  candidate index within the round ("index" is an SQL keyword).
- ``model_calls(evaluation_id | proposal_id, problem_id, kind, request JSON, response,
  prompt_tokens, completion_tokens, latency_s, error)``: every solver call of an evaluation
  (kind model | python | search) and every proposer call (kind proposer).
- ``rewards(run_id, step, context, candidate, J, parsed, produced, completion_rate, reward,
  created)``: training rewards, UNIQUE ``(run_id, step, context, candidate)``.
- ``rounds(run_id, round, parent_id, best_harness_id, best_score_J, improved, n_proposals,
  n_valid, solver_calls, tokens, created)``: one summary row per finished round; solver_calls
  and tokens are cumulative for the run up to that round (feedback + score evaluations).

Writes are transactional: one transaction per evaluation with all its problem records and
model calls, one per proposal with its model call. A process killed mid-write (even with
SIGKILL) leaves either the whole evaluation or nothing. Harness files are written atomically
(temporary file + rename) *before* the row that names them.

Reads are typed, as the writes are: one frozen dataclass per table (``RunRow``, ``HarnessRow``,
``EvaluationRow``, ``ProblemRow``, ``ModelCallRow``, ``ProposalRow``, ``RoundRow``,
``RewardRow``; JSON columns decoded, flags as bools), ``load_evaluation`` rebuilds a whole
``Evaluation`` and ``load_harness`` a ``Harness``. Callers never run SQL themselves.

Guards: ``Store.open(..., lock=True)`` takes an exclusive ``flock`` on ``RUN_DIR/.lock`` (a
second writer gets a UserError at once; the kernel drops the lock when the holder dies, even
by SIGKILL). A file that is not a harnesslearn store (empty, not SQLite, no ``migrations``
table) is refused before anything is written to it. A harness file is checked against its id
(sha256) whenever it is read, and ``verify_harnesses`` checks them all (``adapt --resume``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from harnesslearn.errors import UserError, disk_full
from harnesslearn.evaluation import Evaluation, EvaluationSummary, ProblemResult
from harnesslearn.fsutil import atomic_write_text, read_regular
from harnesslearn.harness import MAX_SOURCE_BYTES, Harness
from harnesslearn.harness import harness_id as id_of_source
from harnesslearn.sandbox.records import CallRecord, RunRecord, Status
from harnesslearn.untrusted import storable

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from harnesslearn.propose.edits import EditResult

DB_NAME = "runs.sqlite"
HARNESS_DIR = "harnesses"
APPLICATION_ID = 0x484C7275  # "HLru" in the SQLite header (PRAGMA application_id): this file is a run store
LOCK_NAME = ".lock"

MIGRATIONS: list[tuple[str, str]] = [
    (
        "m001_initial",
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            created TEXT NOT NULL,
            strategy TEXT,
            config TEXT NOT NULL,
            status TEXT NOT NULL,
            result TEXT
        );
        CREATE TABLE harnesses (
            id TEXT PRIMARY KEY,
            parent_id TEXT,
            edit TEXT,
            path TEXT NOT NULL,
            name TEXT,
            run_id TEXT,
            round INTEGER,
            created TEXT NOT NULL
        );
        CREATE TABLE evaluations (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(id),
            harness_id TEXT NOT NULL REFERENCES harnesses(id),
            task TEXT NOT NULL,
            split TEXT NOT NULL,
            n INTEGER NOT NULL,
            seed INTEGER NOT NULL,
            J REAL,
            completion_rate REAL,
            solver_calls INTEGER NOT NULL,
            tokens INTEGER NOT NULL,
            wall_s REAL NOT NULL,
            round INTEGER,
            purpose TEXT,
            created TEXT NOT NULL,
            UNIQUE (run_id, harness_id, task, split, n, seed)
        );
        CREATE TABLE problem_records (
            id INTEGER PRIMARY KEY,
            evaluation_id INTEGER NOT NULL REFERENCES evaluations(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            problem_id TEXT NOT NULL,
            family TEXT,
            question TEXT,
            gold TEXT,
            answer TEXT,
            score REAL,
            details TEXT,
            status TEXT NOT NULL,
            error TEXT,
            calls INTEGER NOT NULL,
            tokens INTEGER NOT NULL,
            wall_s REAL NOT NULL,
            taxonomy TEXT
        );
        CREATE INDEX problem_records_eval ON problem_records(evaluation_id);
        CREATE TABLE proposals (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(id),
            round INTEGER NOT NULL,
            idx INTEGER NOT NULL,
            parent_id TEXT,
            prompt TEXT,
            raw TEXT,
            parsed INTEGER NOT NULL,
            produced INTEGER NOT NULL,
            valid INTEGER NOT NULL,
            reason TEXT,
            detail TEXT,
            n_blocks INTEGER NOT NULL DEFAULT 0,
            harness_id TEXT,
            created TEXT NOT NULL,
            UNIQUE (run_id, round, idx)
        );
        CREATE TABLE model_calls (
            id INTEGER PRIMARY KEY,
            evaluation_id INTEGER REFERENCES evaluations(id) ON DELETE CASCADE,
            proposal_id INTEGER REFERENCES proposals(id) ON DELETE CASCADE,
            problem_id TEXT,
            kind TEXT NOT NULL,
            request TEXT,
            response TEXT,
            prompt_tokens INTEGER NOT NULL DEFAULT 0,
            completion_tokens INTEGER NOT NULL DEFAULT 0,
            latency_s REAL NOT NULL DEFAULT 0,
            error TEXT,
            CHECK ((evaluation_id IS NULL) <> (proposal_id IS NULL))
        );
        CREATE INDEX model_calls_eval ON model_calls(evaluation_id);
        CREATE INDEX model_calls_prop ON model_calls(proposal_id);
        CREATE TABLE rewards (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL,
            step INTEGER NOT NULL,
            context TEXT NOT NULL,
            candidate INTEGER NOT NULL,
            J REAL,
            parsed INTEGER NOT NULL,
            produced INTEGER NOT NULL,
            completion_rate REAL,
            reward REAL,
            created TEXT NOT NULL,
            UNIQUE (run_id, step, context, candidate)
        );
        CREATE TABLE rounds (
            run_id TEXT NOT NULL REFERENCES runs(id),
            round INTEGER NOT NULL,
            parent_id TEXT,
            best_harness_id TEXT NOT NULL,
            best_score_J REAL,
            improved INTEGER NOT NULL,
            n_proposals INTEGER NOT NULL,
            n_valid INTEGER NOT NULL,
            solver_calls INTEGER NOT NULL,
            tokens INTEGER NOT NULL,
            created TEXT NOT NULL,
            PRIMARY KEY (run_id, round)
        );
        """,
    ),
    (
        "m002_proposal_kind_and_memory",
        """
        ALTER TABLE proposals ADD COLUMN kind TEXT;
        ALTER TABLE proposals ADD COLUMN memory TEXT
        """,
    ),
]

_JSON_COLUMNS = {"config", "result", "details", "request", "memory"}
_BOOL_COLUMNS = {"parsed", "produced", "valid", "improved"}


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _text(value: Any) -> str | None:
    """Gold answers may be lists (aliases) or numbers: stored as text (JSON when not a str)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


class _Writer:
    """The connection as a write transaction sees it: every str bound is made storable first (a lone
    surrogate in a harness's, solver's or proposer's text is stored escaped; SQLite's UTF-8 refuses it
    and the save, and every resume after it, would fail)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, tuple(storable(p) for p in params))


# ---------------------------------------------------------------- typed rows
@dataclass(frozen=True)
class RunRow:
    id: str
    created: str
    strategy: str | None
    config: dict[str, Any]
    status: str  # running | done | failed
    result: dict[str, Any] | None


@dataclass(frozen=True)
class HarnessRow:
    id: str
    parent_id: str | None
    edit: str | None
    path: str  # relative to the run directory
    name: str | None
    run_id: str | None
    round: int | None
    created: str


@dataclass
class EvaluationRow(EvaluationSummary):
    """The summary of an evaluation as stored (``load_evaluation`` adds its problems); ``n`` is the
    requested size: part of the cache key."""

    id: int
    run_id: str
    round: int | None
    purpose: str | None
    created: str


@dataclass(frozen=True)
class ProblemRow:
    evaluation_id: int
    idx: int
    problem_id: str
    family: str | None
    question: str | None
    gold: str | None  # JSON text when the gold answer was not a str
    answer: str | None
    score: float | None
    details: dict[str, float] | None
    status: str
    error: str | None
    calls: int
    tokens: int
    wall_s: float
    taxonomy: str | None


@dataclass(frozen=True)
class ModelCallRow:
    evaluation_id: int | None
    proposal_id: int | None
    problem_id: str | None
    kind: str  # model | python | search | proposer
    request: Any
    response: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    error: str | None

    def record(self) -> CallRecord:
        request = self.request if isinstance(self.request, dict) else {"request": self.request}
        return CallRecord(self.kind, request, self.response, self.prompt_tokens, self.completion_tokens,
                          self.latency_s, self.error)


@dataclass(frozen=True)
class ProposalRow:
    id: int
    run_id: str
    round: int
    idx: int  # candidate index within the round
    parent_id: str | None
    prompt: str | None
    raw: str | None
    parsed: bool
    produced: bool
    valid: bool
    reason: str | None
    detail: str | None
    n_blocks: int
    harness_id: str | None
    created: str
    kind: str | None = None  # blocks | rewrite (a whole-file rewrite), for valid proposals
    memory: list[str] | None = None  # ids of the harness-memory entries its prompt showed


@dataclass(frozen=True)
class RoundRow:
    run_id: str
    round: int
    parent_id: str | None
    best_harness_id: str
    best_score_J: float | None
    improved: bool
    n_proposals: int
    n_valid: int
    solver_calls: int  # cumulative for the run up to this round
    tokens: int
    created: str


@dataclass(frozen=True)
class RewardRow:
    run_id: str
    step: int
    context: str
    candidate: int
    J: float | None
    parsed: bool
    produced: bool
    completion_rate: float | None
    reward: float | None
    created: str


@dataclass(frozen=True)
class Usage:
    """Calls, tokens and latency summed over some model calls."""

    calls: int
    tokens: int
    latency_s: float


R = TypeVar("R", bound="DataclassInstance")


def _typed(cls: type[R], row: sqlite3.Row) -> R:
    """A row as ``cls``: its fields taken by name, JSON columns decoded, flags as bools."""
    kw: dict[str, Any] = {}
    for f in fields(cls):
        v = row[f.name]
        if f.name in _JSON_COLUMNS and isinstance(v, str):
            with contextlib.suppress(json.JSONDecodeError):
                v = json.loads(v)
        elif f.name in _BOOL_COLUMNS:
            v = bool(v)
        kw[f.name] = v
    return cls(**kw)


# ---------------------------------------------------------------- opening
def _ro_uri(path: Path) -> str:
    """A read-only SQLite URI; in a folder this user cannot write (where a WAL database cannot make its
    shared-memory file) the file is read as immutable."""
    immutable = "&immutable=1" if not os.access(path.parent, os.W_OK) else ""
    return f"{path.resolve().as_uri()}?mode=ro{immutable}"


def _check_database(path: Path) -> list[str]:
    """Refuse (UserError) a file that is not a harnesslearn store, without writing to it: empty, not
    SQLite, another application's (its ``application_id``), without the ``migrations`` table, or written
    by a newer harnesslearn (a migration this version does not know). The names of its migrations."""
    d = path.parent
    if path.stat().st_size == 0:
        _lock(d, probe=True)  # another process creating it right now: "in use", never "remove it"
        raise UserError(f"{path} is empty, not a harnesslearn run store (remove it to start over)")
    try:
        conn = sqlite3.connect(_ro_uri(path), uri=True, timeout=30.0)
        try:
            app = conn.execute("PRAGMA application_id").fetchone()[0]
            found = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'migrations'")
            ok = found.fetchone() is not None
            names = [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY id")] if ok else []
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        if "not a database" in str(e) or "file is not" in str(e):
            raise UserError(f"cannot read {path}: {e} (not a harnesslearn run store)") from None
        raise UserError(f"the run store {path} is damaged ({e}); move it away or remove it") from None
    if app not in (0, APPLICATION_ID):
        raise UserError(f"{path} is not a harnesslearn run store (another application's SQLite file)")
    if not ok:
        _lock(d, probe=True)
        raise UserError(f"{path} is not a harnesslearn run store (no migrations table)")
    known = {name for name, _ in MIGRATIONS}
    newer = [n for n in names if n not in known]
    if newer:
        raise UserError(f"{path} was written by a newer harnesslearn (schema {newer[-1]}, this version knows up to "
                        f"{MIGRATIONS[-1][0]}): upgrade harnesslearn to read or resume it")
    return names


def _lock(d: Path, *, probe: bool = False) -> IO[str] | None:
    """An exclusive lock on ``d/.lock``, held while the returned file stays open. ``probe``: only
    check that nobody holds it (creating nothing; None). UserError when another process does."""
    path = d / LOCK_NAME
    if probe and not path.is_file():
        return None
    f = open(path, "r" if probe else "a+", encoding="utf-8")  # noqa: SIM115 - kept open as the lock
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip()
        f.close()
        who = f" (pid {holder})" if holder.isdigit() else ""
        raise UserError(f"run directory {d} is in use by another harnesslearn process{who}") from None
    if probe:
        f.close()
        return None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def _make_dir(d: Path) -> bool:
    """Create ``d`` (and its parents); True only when this call created ``d`` itself, so that two
    processes racing to create a run directory never both think they own it."""
    d.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(d)
    except FileExistsError:
        return False
    return True


def _unmake(d: Path, db_existed: bool) -> None:
    """Undo a failed ``Store.open`` that created ``d``: remove what it wrote; folders only when empty."""
    if not db_existed:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                (d / f"{DB_NAME}{suffix}").unlink()
    for leftover in (d / HARNESS_DIR, d / LOCK_NAME):
        with contextlib.suppress(OSError):
            leftover.rmdir() if leftover.is_dir() else leftover.unlink()
    with contextlib.suppress(OSError):
        d.rmdir()


class Store:
    """A run directory. ``Store.open(run_dir)`` creates or opens it and applies migrations."""

    def __init__(self, run_dir: Path, conn: sqlite3.Connection, lock: IO[str] | None = None) -> None:
        self.run_dir = run_dir
        self.conn = conn
        self._lock = lock

    # ------------------------------------------------------------ open / migrate
    @classmethod
    def open_readonly(cls, run_dir: str | Path) -> Store:
        """Open an existing, up-to-date run store for reading only (``report``): nothing is created, migrated
        or written; the pages are checked (``PRAGMA quick_check``), so damage past the header is one
        "damaged" line here rather than a failed query later. A store an older harnesslearn wrote (a
        migration missing) is opened read-write to be migrated, as by ``open``."""
        d = Path(run_dir)
        db = d / DB_NAME
        if not d.is_dir():
            raise UserError(f"run directory not found: {d}" if not d.exists() else f"run directory is not a directory: {d}")
        if not db.is_file():
            raise UserError(f"not a run directory (no {DB_NAME}): {d}")
        names = _check_database(db)
        if set(names) != {name for name, _ in MIGRATIONS}:
            return cls.open(d, create=False)
        try:
            conn = sqlite3.connect(_ro_uri(db), uri=True, check_same_thread=False, timeout=30.0)
            conn.row_factory = sqlite3.Row
            bad = [r[0] for r in conn.execute("PRAGMA quick_check")]
        except sqlite3.DatabaseError as e:
            raise UserError(f"the run store {db} is damaged ({e}); move it away or remove it") from None
        if bad != ["ok"]:
            conn.close()
            raise UserError(f"the run store {db} is damaged ({bad[0][:200]}); move it away or remove it")
        return cls(d, conn)

    @classmethod
    def open(cls, run_dir: str | Path, *, create: bool = True, lock: bool = False) -> Store:
        """Open ``run_dir`` (creating it and the database when ``create``).

        ``lock``: hold an exclusive lock on the run directory until ``close`` (UserError at once
        when another process holds it). UserError, with nothing created or changed, when the
        directory cannot be created or written, is missing (``create=False``) or is not a
        directory, or when its ``runs.sqlite`` is not a readable harnesslearn store."""
        d = Path(run_dir)
        db = d / DB_NAME
        if d.exists() and not d.is_dir():
            raise UserError(f"run directory is not a directory: {d}")
        if not create and not db.is_file():
            raise UserError(f"not a run directory (no {DB_NAME}): {d}")
        if lock and d.is_dir():  # a holder may be creating the database right now: say "in use"
            _lock(d, probe=True)
        if db.exists():
            _check_database(db)
        if d.is_dir() and not os.access(d, os.W_OK):
            raise UserError(f"run directory {d} is read-only: it can be reported (harnesslearn report) but not "
                            "written or resumed")
        made, db_existed = False, db.exists()
        lock_file: IO[str] | None = None
        try:
            made = _make_dir(d)  # made: created by THIS call (atomically, os.mkdir)
            lock_file = _lock(d) if lock else None  # before anything is created inside
            (d / HARNESS_DIR).mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False, timeout=30.0)
            conn.row_factory = sqlite3.Row
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA foreign_keys=ON")
                conn.execute("PRAGMA synchronous=NORMAL")
                if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:  # new, or made before it
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                store = cls(d, conn, lock_file)
                store.migrate()
            except Exception:
                conn.close()
                raise
        except (OSError, sqlite3.Error, UserError) as e:
            if made and (lock_file is not None or not lock):  # only what this call created, and only while
                _unmake(d, db_existed)  # nobody else can be using it (we hold its lock)
            if lock_file is not None:
                lock_file.close()
            if isinstance(e, UserError) or disk_full(e):  # a full disk: the CLI's own line, exit 1
                raise
            raise UserError(f"cannot use run directory {d}: {e}") from None
        return store

    def close(self) -> None:
        self.conn.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[_Writer]:
        """One write transaction: everything inside commits together or not at all."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield _Writer(self.conn)
        except Exception:
            if self.conn.in_transaction:  # SQLite already rolled back on some errors (SQLITE_FULL)
                self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def migrate(self) -> list[str]:
        """Apply the migrations not yet recorded, in order. Returns the names applied now."""
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS migrations (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, applied TEXT NOT NULL)"
        )
        done = {r[0] for r in self.conn.execute("SELECT name FROM migrations")}
        applied = []
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            with self.transaction() as c:
                for stmt in sql.split(";"):
                    if stmt.strip():
                        c.execute(stmt)
                c.execute("INSERT INTO migrations (name, applied) VALUES (?, ?)", (name, now()))
            applied.append(name)
        return applied

    def migrations(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT name FROM migrations ORDER BY id")]

    # ------------------------------------------------------------ runs
    def create_run(self, run_id: str, config: dict[str, Any], strategy: str | None = None) -> None:
        with self.transaction() as c:
            c.execute(
                "INSERT INTO runs (id, created, strategy, config, status) VALUES (?, ?, ?, ?, 'running')",
                (run_id, now(), strategy, json.dumps(config, sort_keys=True, default=str)),
            )

    def finish_run(self, run_id: str, result: dict[str, Any], status: str = "done") -> None:
        with self.transaction() as c:
            c.execute(
                "UPDATE runs SET status = ?, result = ? WHERE id = ?",
                (status, json.dumps(result, default=str), run_id),
            )

    def run(self, run_id: str) -> RunRow | None:
        r = self.conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _typed(RunRow, r) if r else None

    def _rows(self, cls: type[R], table: str, run_id: str | None, order: str, *, by_run: bool = False) -> list[R]:
        """Every row of ``table`` (of run ``run_id`` when given) as ``cls``, ordered by ``order`` (and first
        by run, across runs, when ``by_run``). ``table`` and ``order`` are this module's constants."""
        args: tuple[Any, ...] = ()
        if run_id is None:
            q = f"SELECT * FROM {table} ORDER BY {'run_id, ' if by_run else ''}{order}"
        else:
            q, args = f"SELECT * FROM {table} WHERE run_id = ? ORDER BY {order}", (run_id,)
        return [_typed(cls, r) for r in self.conn.execute(q, args)]

    def runs(self) -> list[RunRow]:
        return [_typed(RunRow, r) for r in self.conn.execute("SELECT * FROM runs ORDER BY created, id")]

    # ------------------------------------------------------------ harnesses
    def add_harness(self, h: Harness, *, run_id: str | None = None, round: int | None = None) -> str:
        """Record a harness version (file first, then the row). Idempotent by id."""
        rel = f"{HARNESS_DIR}/{h.id}.py"
        path = self.run_dir / rel
        if not path.exists():
            atomic_write_text(path, h.source)
        with self.transaction() as c:
            c.execute(
                "INSERT OR IGNORE INTO harnesses (id, parent_id, edit, path, name, run_id, round, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (h.id, h.parent_id, h.edit, rel, h.name, run_id, round, now()),
            )
        return h.id

    def harness(self, harness_id: str) -> HarnessRow | None:
        r = self.conn.execute("SELECT * FROM harnesses WHERE id = ?", (harness_id,)).fetchone()
        return _typed(HarnessRow, r) if r else None

    def harnesses(self, run_id: str | None = None) -> list[HarnessRow]:
        return self._rows(HarnessRow, "harnesses", run_id, "created, rowid")

    def harness_source(self, harness_id: str) -> str:
        """The source of a recorded harness, checked against its id. UserError when the row or
        the file is missing, unreadable, or does not hash to the id (changed or truncated)."""
        row = self.harness(harness_id)
        if row is None:
            raise UserError(f"no harness {harness_id[:12]} in {self.run_dir}")
        path = self.run_dir / row.path
        # only harnesses/<id>.py, a regular file of at most a harness's size: a store whose row names another
        # path (absolute, ..), a link (to /dev/zero, out of the run dir) or a FIFO is damaged, never followed
        hdir = self.run_dir / HARNESS_DIR
        if row.path != f"{HARNESS_DIR}/{harness_id}.py" or hdir.is_symlink() or not hdir.is_dir():
            raise UserError(f"harness {harness_id[:12]} is recorded at {row.path!r}, not {HARNESS_DIR}/ID.py inside "
                            f"{self.run_dir}: the run store is damaged")
        try:
            source = read_regular(path, MAX_SOURCE_BYTES).decode("utf-8")
        except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
            why = type(e).__name__ if isinstance(e, OSError | UnicodeDecodeError) else str(e)
            raise UserError(f"harness file {path} cannot be read ({why}): the run store is damaged") from None
        if id_of_source(source) != harness_id:
            raise UserError(f"harness file {path} does not match its id (changed or truncated): the run store is damaged")
        return source

    def load_harness(self, harness_id: str) -> Harness:
        row = self.harness(harness_id)
        if row is None:
            raise UserError(f"no harness {harness_id[:12]} in {self.run_dir}")
        return Harness(source=self.harness_source(harness_id), parent_id=row.parent_id, edit=row.edit, name=row.name)

    def verify_harnesses(self) -> None:
        """Check every recorded harness file against its id (UserError on the first bad one)."""
        for row in self.harnesses():
            self.harness_source(row.id)

    def lineage(self, harness_id: str) -> list[HarnessRow]:
        """The chain seed -> ... -> ``harness_id`` (oldest first)."""
        chain: list[HarnessRow] = []
        seen: set[str] = set()
        cur: str | None = harness_id
        while cur is not None and cur not in seen:
            seen.add(cur)
            row = self.harness(cur)
            if row is None:
                break
            chain.append(row)
            cur = row.parent_id
        return chain[::-1]

    # ------------------------------------------------------------ evaluations
    def find_evaluation(
        self, run_id: str, harness_id: str, task: str, split: str, n: int, seed: int
    ) -> EvaluationRow | None:
        """The finished evaluation with this cache key, or None."""
        r = self.conn.execute(
            "SELECT * FROM evaluations WHERE run_id = ? AND harness_id = ? AND task = ? AND split = ?"
            " AND n = ? AND seed = ?",
            (run_id, harness_id, task, split, n, seed),
        ).fetchone()
        return _typed(EvaluationRow, r) if r else None

    def save_evaluation(
        self,
        run_id: str,
        ev: Evaluation,
        *,
        n: int | None = None,
        round: int | None = None,
        purpose: str | None = None,
        taxonomy: Sequence[str | None] | None = None,
        families: Sequence[str | None] | None = None,
    ) -> int:
        """Write an evaluation with its problem records and model calls in one transaction.

        ``n`` is the *requested* size (the cache key); it defaults to ``ev.n``. ``taxonomy`` and
        ``families`` are per problem, in order. Returns the evaluation id."""
        key_n = ev.n if n is None else n
        with self.transaction() as c:
            cur = c.execute(
                "INSERT INTO evaluations (run_id, harness_id, task, split, n, seed, J, completion_rate,"
                " solver_calls, tokens, wall_s, round, purpose, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id, ev.harness_id, ev.task, ev.split, key_n, ev.seed, ev.J, ev.completion_rate,
                    ev.solver_calls, ev.tokens, ev.wall_s, round, purpose, now(),
                ),
            )
            eid = int(cur.lastrowid or 0)
            for i, p in enumerate(ev.problems):
                c.execute(
                    "INSERT INTO problem_records (evaluation_id, idx, problem_id, family, question, gold, answer,"
                    " score, details, status, error, calls, tokens, wall_s, taxonomy)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        eid, i, p.id, families[i] if families else None, p.question, _text(p.gold), p.answer,
                        p.score, json.dumps(p.details), str(p.status), p.error, p.calls, p.tokens, p.wall_s,
                        taxonomy[i] if taxonomy else None,
                    ),
                )
                for call in p.record.calls:
                    self._insert_call(c, call, evaluation_id=eid, problem_id=p.id)
        return eid

    @staticmethod
    def _insert_call(c: _Writer, call: CallRecord, *, evaluation_id: int | None = None,
                     proposal_id: int | None = None, problem_id: str | None = None) -> None:
        c.execute(
            "INSERT INTO model_calls (evaluation_id, proposal_id, problem_id, kind, request, response,"
            " prompt_tokens, completion_tokens, latency_s, error) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                evaluation_id, proposal_id, problem_id, call.kind, json.dumps(call.request, default=str),
                _text(call.response), call.prompt_tokens, call.completion_tokens, call.latency_s, call.error,
            ),
        )

    def evaluation(self, evaluation_id: int) -> EvaluationRow | None:
        r = self.conn.execute("SELECT * FROM evaluations WHERE id = ?", (evaluation_id,)).fetchone()
        return _typed(EvaluationRow, r) if r else None

    def evaluations(self, run_id: str | None = None, split: str | None = None) -> list[EvaluationRow]:
        q = "SELECT * FROM evaluations WHERE 1=1"
        args: list[Any] = []
        if run_id is not None:
            q, args = q + " AND run_id = ?", [*args, run_id]
        if split is not None:
            q, args = q + " AND split = ?", [*args, split]
        return [_typed(EvaluationRow, r) for r in self.conn.execute(q + " ORDER BY id", args)]

    def problem_records(self, evaluation_id: int) -> list[ProblemRow]:
        rows = self.conn.execute(
            "SELECT * FROM problem_records WHERE evaluation_id = ? ORDER BY idx", (evaluation_id,)
        )
        return [_typed(ProblemRow, r) for r in rows]

    def model_calls(
        self, *, evaluation_id: int | None = None, proposal_id: int | None = None, problem_id: str | None = None
    ) -> list[ModelCallRow]:
        q = "SELECT * FROM model_calls WHERE 1=1"
        args: list[Any] = []
        for col, val in (("evaluation_id", evaluation_id), ("proposal_id", proposal_id), ("problem_id", problem_id)):
            if val is not None:
                q, args = q + f" AND {col} = ?", [*args, val]
        return [_typed(ModelCallRow, r) for r in self.conn.execute(q + " ORDER BY id", args)]

    def load_evaluation(self, evaluation_id: int) -> Evaluation:
        """Rebuild a whole Evaluation (problems, run records, calls) as it was saved. KeyError
        when there is no such evaluation. Adaptation builds its prompts from these, never from
        the live object, so that a resumed run sees byte-identical feedback."""
        row = self.evaluation(evaluation_id)
        if row is None:
            raise KeyError(evaluation_id)
        calls: dict[str | None, list[CallRecord]] = {}
        for c in self.model_calls(evaluation_id=evaluation_id):
            calls.setdefault(c.problem_id, []).append(c.record())
        problems = []
        for r in self.problem_records(evaluation_id):
            rec = RunRecord(problem_id=r.problem_id, status=Status(r.status), answer=r.answer, error=r.error,
                            calls=calls.get(r.problem_id, []), wall_s=r.wall_s)
            problems.append(ProblemResult(
                id=r.problem_id, question=r.question or "", gold=r.gold, score=r.score, details=r.details or {},
                status=r.status, answer=r.answer, calls=r.calls, tokens=r.tokens, wall_s=r.wall_s, error=r.error,
                record=rec,
            ))
        return Evaluation(
            harness_id=row.harness_id, task=row.task, split=row.split, n=row.n, seed=row.seed, J=row.J,
            completion_rate=row.completion_rate, solver_calls=row.solver_calls, tokens=row.tokens,
            wall_s=row.wall_s, problems=problems,
        )

    # ------------------------------------------------------------ proposals
    def find_proposal(self, run_id: str, round: int, idx: int) -> ProposalRow | None:
        r = self.conn.execute(
            "SELECT * FROM proposals WHERE run_id = ? AND round = ? AND idx = ?", (run_id, round, idx)
        ).fetchone()
        return _typed(ProposalRow, r) if r else None

    def save_proposal(
        self,
        run_id: str,
        round: int,
        idx: int,
        *,
        parent_id: str,
        prompt: str,
        raw: str,
        edit: EditResult,
        call: CallRecord | None = None,
        memory: Sequence[str] = (),
    ) -> int:
        """Record one proposal and (optionally) its proposer model call in one transaction."""
        with self.transaction() as c:
            cur = c.execute(
                "INSERT INTO proposals (run_id, round, idx, parent_id, prompt, raw, parsed, produced, valid,"
                " reason, detail, n_blocks, harness_id, created, kind, memory)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id, round, idx, parent_id, prompt, raw, int(edit.parsed), int(edit.produced), int(edit.valid),
                    None if edit.reason is None else str(edit.reason), edit.detail, edit.n_blocks, edit.harness_id,
                    now(), edit.kind if edit.valid else None, json.dumps(list(memory)),
                ),
            )
            pid = int(cur.lastrowid or 0)
            if call is not None:
                self._insert_call(c, call, proposal_id=pid)
        return pid

    def proposals(self, run_id: str | None = None) -> list[ProposalRow]:
        return self._rows(ProposalRow, "proposals", run_id, "round, idx", by_run=True)

    def proposer_usage(self, run_id: str) -> Usage:
        """The proposer's calls, tokens (prompt + completion) and latency over a run's proposals."""
        r = self.conn.execute(
            "SELECT COUNT(m.id), COALESCE(SUM(m.prompt_tokens + m.completion_tokens), 0),"
            " COALESCE(SUM(m.latency_s), 0) FROM model_calls m JOIN proposals p ON p.id = m.proposal_id"
            " WHERE p.run_id = ?",
            (run_id,),
        ).fetchone()
        return Usage(int(r[0]), int(r[1]), float(r[2]))

    # ------------------------------------------------------------ rounds
    def save_round(
        self,
        run_id: str,
        round: int,
        *,
        parent_id: str | None,
        best_harness_id: str,
        best_score_J: float | None,
        improved: bool,
        n_proposals: int,
        n_valid: int,
        solver_calls: int,
        tokens: int,
    ) -> None:
        with self.transaction() as c:
            c.execute(
                "INSERT OR REPLACE INTO rounds (run_id, round, parent_id, best_harness_id, best_score_J, improved,"
                " n_proposals, n_valid, solver_calls, tokens, created) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id, round, parent_id, best_harness_id, best_score_J, int(improved), n_proposals,
                    n_valid, solver_calls, tokens, now(),
                ),
            )

    def rounds(self, run_id: str | None = None) -> list[RoundRow]:
        return self._rows(RoundRow, "rounds", run_id, "round", by_run=True)

    def spend(self, run_id: str) -> dict[int | None, dict[str, int]]:
        """Tokens spent by a run, per round (None: the final test evaluations and the oracle's), as
        ``{"proposer_in", "proposer_out", "solver_in", "solver_out"}``: the proposer's from its proposals'
        calls, the solver's from the model calls of the run's evaluations (round 0: the seed's)."""
        out: dict[int | None, dict[str, int]] = {}

        def add(rows: Any, side: str) -> None:
            for rnd, p_in, p_out in rows:
                cell = out.setdefault(rnd, {"proposer_in": 0, "proposer_out": 0, "solver_in": 0, "solver_out": 0})
                cell[f"{side}_in"] += int(p_in or 0)
                cell[f"{side}_out"] += int(p_out or 0)

        add(self.conn.execute(
            "SELECT p.round, SUM(c.prompt_tokens), SUM(c.completion_tokens) FROM model_calls c JOIN proposals p "
            "ON c.proposal_id = p.id WHERE p.run_id = ? GROUP BY p.round", (run_id,)), "proposer")
        add(self.conn.execute(
            "SELECT e.round, SUM(c.prompt_tokens), SUM(c.completion_tokens) FROM model_calls c JOIN evaluations e "
            "ON c.evaluation_id = e.id WHERE e.run_id = ? AND c.kind = 'model' GROUP BY e.round", (run_id,)), "solver")
        return out

    # ------------------------------------------------------------ rewards (training)
    def add_reward(
        self,
        run_id: str,
        step: int,
        context: str,
        candidate: int,
        *,
        J: float | None,
        parsed: bool,
        produced: bool,
        completion_rate: float | None,
        reward: float | None,
    ) -> None:
        """Record one training reward (idempotent on (run_id, step, context, candidate))."""
        with self.transaction() as c:
            c.execute(
                "INSERT OR REPLACE INTO rewards (run_id, step, context, candidate, J, parsed, produced,"
                " completion_rate, reward, created) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (run_id, step, context, candidate, J, int(parsed), int(produced), completion_rate, reward, now()),
            )

    def rewards(self, run_id: str | None = None) -> list[RewardRow]:
        return self._rows(RewardRow, "rewards", run_id, "step, context, candidate", by_run=True)

