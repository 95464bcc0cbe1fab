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

Read helpers return plain ``dict`` rows (column name -> value; JSON columns decoded).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harnesslearn.errors import UserError
from harnesslearn.fsutil import atomic_write_text
from harnesslearn.harness import Harness

if TYPE_CHECKING:  # the store only reads these fields; importing at run time is not needed
    from harnesslearn.evaluation import Evaluation

DB_NAME = "runs.sqlite"
HARNESS_DIR = "harnesses"

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
]

_JSON_COLUMNS = {"config", "result", "details", "request"}


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _text(value: Any) -> str | None:
    """Gold answers may be lists (aliases) or numbers: stored as text (JSON when not a str)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _row(row: sqlite3.Row) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in row.keys():
        v = row[k]
        if k in _JSON_COLUMNS and isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError:
                pass
        out[k] = v
    return out


class Store:
    """A run directory. ``Store.open(run_dir)`` creates or opens it and applies migrations."""

    def __init__(self, run_dir: Path, conn: sqlite3.Connection) -> None:
        self.run_dir = run_dir
        self.conn = conn

    # ------------------------------------------------------------ open / migrate
    @classmethod
    def open(cls, run_dir: str | Path, *, create: bool = True) -> Store:
        """Open ``run_dir`` (creating it and the database when ``create``). Raises UserError if
        it is missing and ``create`` is false, or if it is not a directory."""
        d = Path(run_dir)
        if d.exists() and not d.is_dir():
            raise UserError(f"run directory is not a directory: {d}")
        if not (d / DB_NAME).exists() and not create:
            raise UserError(f"not a run directory (no {DB_NAME}): {d}")
        (d / HARNESS_DIR).mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(d / DB_NAME, isolation_level=None, check_same_thread=False, timeout=30.0)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
        store = cls(d, conn)
        store.migrate()
        return store

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: everything inside commits together or not at all."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except Exception:
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

    def run(self, run_id: str) -> dict[str, Any] | None:
        r = self.conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _row(r) if r else None

    def runs(self) -> list[dict[str, Any]]:
        return [_row(r) for r in self.conn.execute("SELECT * FROM runs ORDER BY created, id")]

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

    def harness(self, harness_id: str) -> dict[str, Any] | None:
        r = self.conn.execute("SELECT * FROM harnesses WHERE id = ?", (harness_id,)).fetchone()
        return _row(r) if r else None

    def harnesses(self, run_id: str | None = None) -> list[dict[str, Any]]:
        if run_id is None:
            rows = self.conn.execute("SELECT * FROM harnesses ORDER BY created, rowid")
        else:
            rows = self.conn.execute("SELECT * FROM harnesses WHERE run_id = ? ORDER BY created, rowid", (run_id,))
        return [_row(r) for r in rows]

    def harness_source(self, harness_id: str) -> str:
        row = self.harness(harness_id)
        if row is None:
            raise UserError(f"no harness {harness_id[:12]} in {self.run_dir}")
        return (self.run_dir / row["path"]).read_text(encoding="utf-8")

    def load_harness(self, harness_id: str) -> Harness:
        row = self.harness(harness_id)
        if row is None:
            raise UserError(f"no harness {harness_id[:12]} in {self.run_dir}")
        return Harness(
            source=self.harness_source(harness_id), parent_id=row["parent_id"], edit=row["edit"], name=row["name"]
        )

    def lineage(self, harness_id: str) -> list[dict[str, Any]]:
        """The chain seed -> ... -> ``harness_id`` (oldest first)."""
        chain: list[dict[str, Any]] = []
        seen: set[str] = set()
        cur: str | None = harness_id
        while cur is not None and cur not in seen:
            seen.add(cur)
            row = self.harness(cur)
            if row is None:
                break
            chain.append(row)
            cur = row["parent_id"]
        return chain[::-1]

    # ------------------------------------------------------------ evaluations
    def find_evaluation(
        self, run_id: str, harness_id: str, task: str, split: str, n: int, seed: int
    ) -> dict[str, Any] | None:
        """The finished evaluation with this cache key, or None."""
        r = self.conn.execute(
            "SELECT * FROM evaluations WHERE run_id = ? AND harness_id = ? AND task = ? AND split = ?"
            " AND n = ? AND seed = ?",
            (run_id, harness_id, task, split, n, seed),
        ).fetchone()
        return _row(r) if r else None

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
                record = getattr(p, "record", None)
                for call in getattr(record, "calls", None) or []:
                    c.execute(
                        "INSERT INTO model_calls (evaluation_id, problem_id, kind, request, response,"
                        " prompt_tokens, completion_tokens, latency_s, error) VALUES (?,?,?,?,?,?,?,?,?)",
                        (
                            eid, p.id, call.kind, json.dumps(call.request, default=str),
                            _text(call.response), call.prompt_tokens, call.completion_tokens,
                            call.latency_s, call.error,
                        ),
                    )
        return eid

    def evaluation(self, evaluation_id: int) -> dict[str, Any] | None:
        r = self.conn.execute("SELECT * FROM evaluations WHERE id = ?", (evaluation_id,)).fetchone()
        return _row(r) if r else None

    def evaluations(self, run_id: str | None = None, split: str | None = None) -> list[dict[str, Any]]:
        q = "SELECT * FROM evaluations WHERE 1=1"
        args: list[Any] = []
        if run_id is not None:
            q, args = q + " AND run_id = ?", [*args, run_id]
        if split is not None:
            q, args = q + " AND split = ?", [*args, split]
        return [_row(r) for r in self.conn.execute(q + " ORDER BY id", args)]

    def problem_records(self, evaluation_id: int) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT * FROM problem_records WHERE evaluation_id = ? ORDER BY idx", (evaluation_id,)
        )
        return [_row(r) for r in rows]

    def model_calls(
        self, *, evaluation_id: int | None = None, proposal_id: int | None = None, problem_id: str | None = None
    ) -> list[dict[str, Any]]:
        q = "SELECT * FROM model_calls WHERE 1=1"
        args: list[Any] = []
        for col, val in (("evaluation_id", evaluation_id), ("proposal_id", proposal_id), ("problem_id", problem_id)):
            if val is not None:
                q, args = q + f" AND {col} = ?", [*args, val]
        return [_row(r) for r in self.conn.execute(q + " ORDER BY id", args)]

    # ------------------------------------------------------------ proposals
    def find_proposal(self, run_id: str, round: int, idx: int) -> dict[str, Any] | None:
        r = self.conn.execute(
            "SELECT * FROM proposals WHERE run_id = ? AND round = ? AND idx = ?", (run_id, round, idx)
        ).fetchone()
        return _row(r) if r else None

    def save_proposal(
        self,
        run_id: str,
        round: int,
        idx: int,
        *,
        parent_id: str,
        prompt: str,
        raw: str,
        parsed: bool,
        produced: bool,
        valid: bool,
        reason: str | None,
        detail: str | None,
        n_blocks: int,
        harness_id: str | None,
        call: dict[str, Any] | None = None,
    ) -> int:
        """Record one proposal and (optionally) its proposer model call in one transaction.
        ``call`` keys: request, response, prompt_tokens, completion_tokens, latency_s, error."""
        with self.transaction() as c:
            cur = c.execute(
                "INSERT INTO proposals (run_id, round, idx, parent_id, prompt, raw, parsed, produced, valid,"
                " reason, detail, n_blocks, harness_id, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id, round, idx, parent_id, prompt, raw, int(parsed), int(produced), int(valid),
                    None if reason is None else str(reason), detail, n_blocks, harness_id, now(),
                ),
            )
            pid = int(cur.lastrowid or 0)
            if call is not None:
                c.execute(
                    "INSERT INTO model_calls (proposal_id, kind, request, response, prompt_tokens,"
                    " completion_tokens, latency_s, error) VALUES (?, 'proposer', ?, ?, ?, ?, ?, ?)",
                    (
                        pid, json.dumps(call.get("request"), default=str), call.get("response"),
                        int(call.get("prompt_tokens") or 0), int(call.get("completion_tokens") or 0),
                        float(call.get("latency_s") or 0.0), call.get("error"),
                    ),
                )
        return pid

    def proposals(self, run_id: str | None = None) -> list[dict[str, Any]]:
        if run_id is None:
            rows = self.conn.execute("SELECT * FROM proposals ORDER BY run_id, round, idx")
        else:
            rows = self.conn.execute("SELECT * FROM proposals WHERE run_id = ? ORDER BY round, idx", (run_id,))
        return [_row(r) for r in rows]

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

    def rounds(self, run_id: str | None = None) -> list[dict[str, Any]]:
        if run_id is None:
            rows = self.conn.execute("SELECT * FROM rounds ORDER BY run_id, round")
        else:
            rows = self.conn.execute("SELECT * FROM rounds WHERE run_id = ? ORDER BY round", (run_id,))
        return [_row(r) for r in rows]

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

    def rewards(self, run_id: str | None = None) -> list[dict[str, Any]]:
        if run_id is None:
            rows = self.conn.execute("SELECT * FROM rewards ORDER BY run_id, step, context, candidate")
        else:
            rows = self.conn.execute(
                "SELECT * FROM rewards WHERE run_id = ? ORDER BY step, context, candidate", (run_id,)
            )
        return [_row(r) for r in rows]
