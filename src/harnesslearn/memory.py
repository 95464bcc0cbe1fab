"""Harness memory: harnesses that beat their seed on earlier tasks, offered to the proposer of a new one.

An entry is (task spec, task description, a few example questions, the harness source, its score-split
J, the seed's J, the solver, the date, a one-line note of what it does, where it came from). ``adapt``
adds the best harness of a run when it strictly beat its seed on the score split; ``harnesslearn memory
add-zoo`` evaluates the zoo on a task and stores what beats the seed there. For a new task,
``Memory.retrieve`` returns the k entries most similar to it (BM25 over description and example
questions, ``bm25s``) from OTHER tasks: entries of the same task spec are never shown.

What an entry may hold: example questions of its own task's feedback split (never answers), and a
harness source that passed the quality screen (``training.screen``: no answer tables, no literal
questions). At retrieval, an entry in which a gold answer of the target task's problems appears (a
planted or accidental leak, answers of at least ``MIN_LEAK_CHARS`` characters) is left out; shorter
answers ("6") cannot be told apart from ordinary code and are not screened.

The store is one SQLite file (WAL; every write one transaction): a second process writing at the same
time waits for the lock, a damaged file is reported (never overwritten) and a full disk fails the write
with nothing half-written. Its path: ``$HARNESSLEARN_MEMORY`` if set (``0``/``off`` turns the memory
off), else ``memory.sqlite`` in the cache folder (``$HARNESSLEARN_CACHE_DIR`` or ~/.cache/harnesslearn).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError, disk_full
from harnesslearn.sqlitewal import connect_wal

OFF = {"0", "off", "false", "no", ""}
MIN_LEAK_CHARS = 4
MAX_EXAMPLES = 3
APPLICATION_ID = 0x484C6D65  # "HLme" in the SQLite header (PRAGMA application_id): this file is a memory
COLUMNS = ("id", "task", "description", "examples", "source", "score_J", "seed_J", "solver", "date", "note",
           "origin")
SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    description TEXT NOT NULL,
    examples TEXT NOT NULL,
    source TEXT NOT NULL,
    score_J REAL,
    seed_J REAL,
    solver TEXT NOT NULL,
    date TEXT NOT NULL,
    note TEXT NOT NULL,
    origin TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class Entry:
    task: str  # the task spec it was adapted on
    description: str
    examples: tuple[str, ...]  # a few questions of that task's feedback split (no answers)
    source: str  # the harness
    score_J: float | None  # its score-split J there
    seed_J: float | None  # the seed's score-split J there
    solver: str
    note: str = ""  # one line: what it does
    origin: str = "adapt"  # adapt | zoo:NAME | import
    date: str = field(default_factory=lambda: time.strftime("%Y-%m-%d"))

    @property
    def id(self) -> str:
        return hashlib.sha256(f"{self.task}\n{self.source}".encode()).hexdigest()[:16]

    @property
    def gain(self) -> float | None:
        return None if self.score_J is None or self.seed_J is None else self.score_J - self.seed_J

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, **asdict(self), "examples": list(self.examples)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Entry:
        try:
            return cls(task=str(d["task"]), description=str(d["description"]),
                       examples=tuple(str(x) for x in d.get("examples") or ()), source=str(d["source"]),
                       score_J=_num(d.get("score_J")), seed_J=_num(d.get("seed_J")), solver=str(d.get("solver", "")),
                       note=str(d.get("note", "")), origin=str(d.get("origin", "import")),
                       date=str(d.get("date") or time.strftime("%Y-%m-%d")))
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"not a memory entry ({type(e).__name__}: {e})") from None


def _num(x: Any) -> float | None:
    return None if x is None else float(x)


def note_of(source: str, fallback: str = "") -> str:
    """One line of what a harness does: the first line of its module docstring, else ``fallback``."""
    import ast

    try:
        doc = ast.get_docstring(ast.parse(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        doc = None
    line = (doc or "").strip().split("\n")[0].strip()
    return (line or fallback)[:200]


def default_path() -> Path | None:
    """Where the memory lives (None: turned off with HARNESSLEARN_MEMORY=0)."""
    env = os.environ.get("HARNESSLEARN_MEMORY")
    if env is not None:
        return None if env.strip().lower() in OFF else Path(env).expanduser()
    from harnesslearn.fsutil import cache_dir

    return cache_dir() / "memory.sqlite"


class Memory:
    """The memory store (see the module docstring). ``Memory.open(path)``; close it when done."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path, self.conn = path, conn

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, *, readonly: bool = False) -> Memory:
        """The memory at ``path`` (default: ``default_path()``). ``readonly``: for the commands that only read
        (list, show, export): nothing is created or written, a read-only file or folder is fine, and a memory
        that does not exist yet reads as empty. Open errors say what they are; only a file SQLite finds
        malformed is called damaged."""
        if path is not None and not str(path).strip():
            raise UserError("--memory-path must not be empty")
        p = Path(path) if path is not None else default_path()
        if p is None:
            raise UserError("the harness memory is turned off (HARNESSLEARN_MEMORY=0)")
        if p.exists() and not p.is_file():
            raise UserError(f"memory {p} is not a file")
        _identify(p)  # reading only: a file that is not a memory is refused before anything is written
        if readonly:
            return cls(p, _read_only(p))
        if not p.exists():
            folder = next((d for d in (p.parent, *p.parent.parents) if d.exists()), None)
            if folder is not None and not os.access(folder, os.W_OK | os.X_OK):
                raise UserError(f"cannot create memory {p}: the folder {folder} is not writable (set "
                                "--memory-path or HARNESSLEARN_MEMORY to a writable place, or --no-memory)")
        elif not (file_ok := os.access(p, os.W_OK)) or not os.access(p.parent, os.W_OK | os.X_OK):
            raise UserError(f"cannot write memory {p}: {'its folder' if file_ok else 'the file'} "
                            "is read-only (`memory list/show/export` still read it; adapt needs --no-memory or a "
                            "writable --memory-path)")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            conn = connect_wal(p, (SCHEMA, "SELECT COUNT(*) FROM entries"))
            if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:  # new, or made before the mark
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        except sqlite3.DatabaseError as e:
            if disk_full(e):
                raise
            raise _damaged(p, e) from None
        except OSError as e:
            if disk_full(e):
                raise
            raise UserError(f"cannot open memory {p}: {e.strerror or e}") from None
        return cls(p, conn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ writes (one transaction each)
    def add(self, entries: Entry | Iterable[Entry]) -> list[str]:
        """Store entries (an entry already present, same task and source, is replaced); their ids."""
        rows = [entries] if isinstance(entries, Entry) else list(entries)
        self._check_integrity()
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            for e in rows:
                self.conn.execute("INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                                  (e.id, e.task, e.description, json.dumps(list(e.examples)), e.source, e.score_J,
                                   e.seed_J, e.solver, e.date, e.note, e.origin))
            self.conn.execute("COMMIT")
        except sqlite3.Error as e:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if disk_full(e):
                raise
            raise UserError(f"cannot write memory {self.path}: {e} (nothing was written)") from None
        return [e.id for e in rows]

    def remove(self, entry_id: str) -> Entry:
        e = self.get(entry_id)
        self._check_integrity()
        try:
            self.conn.execute("DELETE FROM entries WHERE id = ?", (e.id,))
        except sqlite3.Error as err:
            raise UserError(f"cannot write memory {self.path}: {err} (nothing was removed)") from None
        return e

    # ------------------------------------------------------------ reads
    def _check_integrity(self) -> None:
        """Nothing is written into a file whose pages SQLite finds damaged (``PRAGMA quick_check``)."""
        try:
            problems = [r[0] for r in self.conn.execute("PRAGMA quick_check").fetchall()]
        except sqlite3.DatabaseError as e:
            raise _damaged(self.path, e) from None
        if problems != ["ok"]:
            raise _damaged(self.path, problems[0])

    def entries(self) -> list[Entry]:
        """Every entry; a malformed page, a JSON column that does not parse or a score that is not a number
        is the one "damaged" line (UserError), never a traceback."""
        try:
            rows = self.conn.execute("SELECT id, task, description, examples, source, score_J, seed_J, solver, date, "
                                     "note, origin FROM entries ORDER BY date, task, id").fetchall()
        except sqlite3.DatabaseError as e:
            raise _damaged(self.path, e) from None
        out = []
        for r in rows:
            try:
                examples = json.loads(r[3])
                if not isinstance(examples, list) or not all(isinstance(x, str) for x in examples):
                    raise ValueError("examples are not a list of strings")
                for name, v in (("score_J", r[5]), ("seed_J", r[6])):
                    if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v != v):
                        raise ValueError(f"{name} is not a number: {v!r}")
                if not all(isinstance(x, str) for x in (r[1], r[2], r[4], r[7], r[8], r[9], r[10])):
                    raise ValueError("a text column holds something else")
            except ValueError as e:
                raise _damaged(self.path, f"entry {str(r[0])[:12]!r}: {e}") from None
            out.append(Entry(task=r[1], description=r[2], examples=tuple(examples), source=r[4], score_J=r[5],
                             seed_J=r[6], solver=r[7], date=r[8], note=r[9], origin=r[10]))
        return out

    def get(self, entry_id: str) -> Entry:
        """An entry by its id or a unique prefix of it (UserError otherwise)."""
        found = [e for e in self.entries() if e.id.startswith(entry_id)] if entry_id else []
        if len(found) != 1:
            raise UserError(f"{'no' if not found else 'more than one'} memory entry with id {entry_id!r}")
        return found[0]

    def retrieve(self, task_spec: str, text: str, k: int = 2, *, gold: Sequence[str] = ()) -> list[Entry]:
        """The ``k`` entries of OTHER tasks most similar to ``text`` (the new task's description and example
        questions; BM25), leaving out any that holds one of ``gold`` (the target's answers)."""
        cands = [e for e in self.entries() if e.task != task_spec and not _leaks(e, gold)]
        if not cands or k <= 0:
            return []
        from harnesslearn.tools.search import bm25s as bm25s_module

        bm25s = bm25s_module()
        corpus = [f"{e.description}\n" + "\n".join(e.examples) for e in cands]
        # an entry (or a query) with no indexable word (empty, stopwords or punctuation only) matches
        # nothing; bm25s itself refuses a corpus without a word (ValueError)
        words = bm25s.tokenize(corpus, show_progress=False)
        keep = [i for i, ids in enumerate(words.ids) if len(ids)]
        query = bm25s.tokenize([text], show_progress=False)
        if not keep or not len(query.ids[0]):
            return []
        cands, corpus = [cands[i] for i in keep], [corpus[i] for i in keep]
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(corpus, show_progress=False), show_progress=False)
        docs, scores = retriever.retrieve(query, k=min(k, len(cands)), show_progress=False)
        order = [int(i) for i in docs[0]]
        return [cands[i] for i in order]


SHIPPED = Path(__file__).resolve().parent / "seeds" / "memory" / "paper_train.jsonl"  # built from paper-train only


def _read_only_queries(p: Path) -> tuple[str, ...]:
    """How to open ``p`` without writing: with no write-ahead log pending the file is all there is, so it is
    read as immutable (SQLite then creates no -wal/-shm beside it); with one, a plain read-only connection
    reads the log too (the immutable one stays the fallback for a read-only folder)."""
    try:  # one stat, no is_file() before it: a neighbour's last close removes the log between two calls
        pending = p.with_name(p.name + "-wal").stat().st_size > 0
    except FileNotFoundError:
        pending = False
    return ("?mode=ro", "?mode=ro&immutable=1") if pending else ("?mode=ro&immutable=1",)


def _read_only(p: Path) -> sqlite3.Connection:
    """A connection that never writes: the file read-only (``immutable`` where even the WAL index cannot be
    created, in a read-only folder), or an empty in-memory memory when there is no file yet."""
    if not p.exists():
        conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.execute(SCHEMA)
        return conn
    uri = p.resolve().as_uri()
    for query in _read_only_queries(p):
        try:
            conn = sqlite3.connect(uri + query, uri=True, timeout=30.0, isolation_level=None)
            conn.execute("SELECT COUNT(*) FROM entries").fetchall()
            return conn
        except sqlite3.OperationalError as e:
            last: sqlite3.Error = e
            if "unable to open" not in str(e) and "readonly" not in str(e):
                break
        except sqlite3.DatabaseError as e:
            last = e
            break
    raise _damaged(p, last)


def _damaged(p: Path, why: Any) -> UserError:
    return UserError(f"memory {p} is damaged ({why}); move it away or remove it (`harnesslearn memory export` "
                     "first if it still reads)")


def _identify(p: Path) -> None:
    """Refuse, opening the file read-only, what is not a memory: a database with our mark
    (``APPLICATION_ID``) is one; an unmarked one is one only if it holds just the ``entries`` table with
    our columns (a memory made before the mark) or nothing at all. A run store, the response cache or any
    other database given as a memory path is "not a memory file" and stays byte-identical."""
    if not p.is_file() or p.stat().st_size == 0:
        return
    try:
        conn = sqlite3.connect(p.resolve().as_uri() + _read_only_queries(p)[0], uri=True, timeout=30.0)
        try:
            app = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
            cols = tuple(r[1] for r in conn.execute("PRAGMA table_info(entries)"))
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        if "not a database" in str(e) or "file is not" in str(e):
            raise UserError(f"{p} is not a memory file (not a SQLite database); give --memory-path a memory file "
                            "or a new path") from None
        raise _damaged(p, e) from None
    if app == APPLICATION_ID or (app == 0 and (tables == ["entries"] and cols == COLUMNS or not tables)):
        return
    raise UserError(f"{p} is not a memory file (a SQLite database with "
                    f"{'the tables ' + ', '.join(tables) if tables else 'another application id'}); give "
                    "--memory-path a memory file or a new path")


def load_shipped(mem: Memory) -> int:
    """Add the memory shipped with the package (``SHIPPED``) to ``mem``; how many entries it holds."""
    return len(import_jsonl(mem, SHIPPED.read_text(encoding="utf-8"), SHIPPED.name))


def shipped_copy(path: Path) -> int:
    """A fresh memory file at ``path`` (one left there, with its WAL files, is replaced) holding the shipped
    memory alone: a run of its own that neither reads nor writes the user's memory; how many entries."""
    for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        stale.unlink(missing_ok=True)
    with Memory.open(path) as mem:
        return load_shipped(mem)


def answers(answer: Any) -> list[str]:
    """A problem's gold answer as strings (a list of aliases stays a list)."""
    if answer is None:
        return []
    if isinstance(answer, list | tuple | set):
        return [str(a) for a in answer]
    return [str(answer)]


def fingerprint(entries: Sequence[Entry]) -> str:
    """The entries a prompt shows, as a run records them: each id with a digest of everything the prompt
    shows of it ("" for none). Two memories that show the same entries give the same fingerprint."""
    def shown(e: Entry) -> str:  # what propose.prompt.render_memory puts in the prompt
        return json.dumps([e.task, e.description, e.note, e.seed_J, e.score_J, e.source])

    return ",".join(f"{e.id}:{hashlib.sha256(shown(e).encode()).hexdigest()[:12]}" for e in entries)


def shown_for(mem: Memory, task: Any, seed: int, sizes: Sequence[int], k: int) -> list[Entry]:
    """The ``k`` entries a task's proposer is shown: the most similar of OTHER tasks to its description and
    first feedback questions, none holding a gold answer of its feedback, score and test splits (``sizes``:
    the number of problems of each, in that order)."""
    examples = [p.question for p in task.problems("feedback", 3, seed)]
    gold = [a for split, n in zip(("feedback", "score", "test"), sizes, strict=True)
            for p in task.problems(split, n, seed) for a in answers(p.answer)]
    return mem.retrieve(task.spec, "\n".join([task.description, *examples]), k, gold=gold)


def _leaks(e: Entry, gold: Sequence[str]) -> bool:
    hay = "\n".join([e.source, e.note, e.description, *e.examples])
    return any(len(g) >= MIN_LEAK_CHARS and g in hay for g in gold)


def export_jsonl(mem: Memory) -> str:
    return "".join(json.dumps(e.to_json(), ensure_ascii=False) + "\n" for e in mem.entries())


def import_jsonl(mem: Memory, text: str, name: str = "input") -> list[str]:
    """Entries from a JSONL export (every line checked first; nothing is written when one is bad)."""
    from harnesslearn.fsutil import json_lines

    entries = []
    for lineno, row in json_lines(name, text.splitlines()):
        try:
            check_row(row)
            entries.append(Entry.from_json(row))
        except UserError as e:
            raise UserError(f"{name}: line {lineno}: {e}") from None
    return mem.add(entries)


def check_row(row: Any) -> None:
    """UserError when an imported row is not an entry: fields of the wrong type (a null or non-string source,
    ``examples`` that are not a list of strings), a score that is not a finite J in [0, 1], or a source that
    is not a valid harness (too large, no ``solve(model, question)``, a syntax error)."""
    import math

    from harnesslearn.harness import check_source

    if not isinstance(row, dict):
        raise UserError("not a memory entry (expected a JSON object)")
    for key in ("task", "description", "source"):
        if not isinstance(row.get(key), str):
            raise UserError(f"not a memory entry ({key!r} must be a string)")
    for key in ("solver", "note", "origin", "date"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise UserError(f"not a memory entry ({key!r} must be a string)")
    examples = row.get("examples")
    if examples is not None and not (isinstance(examples, list) and all(isinstance(x, str) for x in examples)):
        raise UserError("not a memory entry ('examples' must be a list of strings)")
    for key in ("score_J", "seed_J"):
        v = row.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
                              or not 0.0 <= v <= 1.0):
            raise UserError(f"not a memory entry ({key!r} must be a J between 0 and 1 or null, not {v!r})")
    problem = check_source(row["source"])
    if problem is not None:
        raise UserError(f"not a memory entry (its source is not a valid harness: {problem.replace('_', ' ')})")


def candidate(task: Any, source: str, *, seed_J: float | None, J: float | None, questions: Sequence[str],
              solver: str, note: str, origin: str) -> tuple[Entry | None, list[str]]:
    """The memory's admission rule, one for every writer (``adapt``, ``memory add-zoo``): a harness is an
    entry for ``task`` when it strictly beats the task's seed on the score split (``evaluation.improves``)
    and passes the quality screen (no answer tables, no literal ``questions`` of the task). Returns the
    entry (None when refused) and the screen's reasons (judged whether or not it beat the seed)."""
    from harnesslearn.evaluation import improves
    from harnesslearn.training.screen import screen

    rejected = screen(source, questions=questions)
    if rejected or not improves(J, seed_J):
        return None, rejected
    return Entry(task=task.spec, description=task.description, examples=tuple(questions[:MAX_EXAMPLES]),
                 source=source, score_J=J, seed_J=seed_J, solver=solver, note=note, origin=origin), []


def open_for(task: Any, *, enabled: bool, path: str | None, seed: int, sizes: Sequence[int], k: int
             ) -> tuple[Memory | None, list[Entry]]:
    """The memory an adaptation of ``task`` uses (None when off; the caller turns it off where
    ``HARNESSLEARN_MEMORY=0`` leaves no place for it) and the entries its prompts show (:func:`shown_for`)."""
    if not enabled:
        return None, []
    mem = Memory.open(path)
    return mem, shown_for(mem, task, seed, sizes, k)


async def add_zoo(mem: Memory, task: Any, executor: Any, *, solver: str, n_score: int = 8, seed: int = 0,
                  budgets: Any = None, only: Sequence[str] | None = None) -> dict[str, Any]:
    """Evaluate the task's seed and every zoo harness that applies on the score split; store each zoo
    harness that strictly beats the seed there and passes the quality screen. Returns what happened.
    Every evaluation must be whole: one with an infrastructure failure (a server down, a sandbox that
    would not start) is an InfraError, raised before anything is stored, since its J would be
    computed over part of the problems."""
    from harnesslearn import zoo
    from harnesslearn.errors import InfraError
    from harnesslearn.evaluation import evaluate, improves

    async def whole(h: Any, split: str, n: int, what: str) -> Any:
        ev = await evaluate(h, task, split, n, seed, executor, budgets=budgets, progress=False)
        if ev.infra_failures:
            raise InfraError(f"{ev.infra_failures} of {n} problem(s) hit an infrastructure failure evaluating "
                             f"{what} on {task.spec}; nothing was stored: fix the cause and run add-zoo again")
        return ev

    seed_h = zoo.default_seed(task)
    questions = [p.question for p in (await whole(seed_h, "feedback", 3, "the seed")).problems]
    seed_J = (await whole(seed_h, "score", n_score, "the seed")).J
    rows, entries = [], []
    for name in only or zoo.names(task):
        h = zoo.build(name, task, seed)
        J = (await whole(h, "score", n_score, f"zoo:{name}")).J
        entry, rejected = candidate(task, h.source, seed_J=seed_J, J=J, questions=questions, solver=solver,
                                    note=zoo.ENTRIES[name].description, origin=f"zoo:{name}")
        rows.append({"name": name, "score_J": J, "beats_seed": improves(J, seed_J), "screen": rejected,
                     "stored": entry is not None})
        entries += [entry] if entry is not None else []
    added = mem.add(entries) if entries else []
    return {"task": task.spec, "seed_score_J": seed_J, "n_score": n_score, "rows": rows, "added": added}
