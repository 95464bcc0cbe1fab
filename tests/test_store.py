"""The run store: migrations, transactional writes, cache-key lookups, lineage, read helpers."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harnesslearn.errors import UserError
from harnesslearn.harness import Harness, seed_source
from harnesslearn.propose.edits import EditResult
from harnesslearn.sandbox.records import CallRecord, RunRecord, Status
from harnesslearn.store import MIGRATIONS, Store


@dataclass
class _P:
    id: str
    question: str
    gold: Any
    score: float | None
    details: dict[str, float]
    status: str
    answer: str | None
    calls: int
    tokens: int
    wall_s: float
    error: str | None
    record: RunRecord


@dataclass
class _E:
    harness_id: str
    task: str = "jsonl:x"
    split: str = "score"
    n: int = 2
    seed: int = 0
    J: float | None = 0.5
    completion_rate: float | None = 1.0
    solver_calls: int = 2
    tokens: int = 10
    wall_s: float = 0.1
    problems: list[Any] = field(default_factory=list)


def _problems() -> list[_P]:
    rec = RunRecord(
        "p0", Status.OK, answer="4", calls=[CallRecord("model", {"prompt": "2+2"}, "4", 3, 1, 0.01)]
    )
    return [
        _P("p0", "2+2", "4", 1.0, {}, "ok", "4", 1, 4, 0.01, None, rec),
        _P("p1", "3+3", ["6", "six"], 0.0, {}, "harness_error", None, 0, 0, 0.01, "ValueError: x",
           RunRecord("p1", Status.HARNESS_ERROR, error="ValueError: x")),
    ]


def test_migrations_are_named_ordered_and_idempotent(tmp_path: Path) -> None:
    s = Store.open(tmp_path / "r")
    assert s.migrations() == [name for name, _ in MIGRATIONS]
    s.close()
    s2 = Store.open(tmp_path / "r")
    assert s2.migrate() == []  # nothing re-applied
    assert s2.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert s2.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_a_sqlite_file_without_the_migrations_table_is_not_a_store(tmp_path: Path) -> None:
    """A SQLite database of someone else's is refused, read-only: not opened, not migrated, not changed."""
    import sqlite3

    d = tmp_path / "foreign"
    d.mkdir()
    db = d / "runs.sqlite"
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE notes (x TEXT)")
    c.commit()
    c.close()
    before = db.read_bytes()
    with pytest.raises(UserError, match="no migrations table"):
        Store.open(d)
    assert db.read_bytes() == before and sorted(p.name for p in d.iterdir()) == ["runs.sqlite"]


def test_open_without_create_refuses_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(UserError):
        Store.open(tmp_path / "nope", create=False)


def test_evaluation_roundtrip_and_cache_key(tmp_path: Path) -> None:
    s = Store.open(tmp_path)
    h = Harness(seed_source("minimal"), name="minimal")
    s.create_run("sequential", {"seed": 0}, strategy="sequential")
    s.add_harness(h, run_id="sequential", round=0)
    ev = _E(h.id, problems=_problems())
    eid = s.save_evaluation("sequential", ev, purpose="score", taxonomy=[None, "harness_error"])
    found = s.find_evaluation("sequential", h.id, "jsonl:x", "score", 2, 0)
    assert found is not None and found.id == eid and found.J == 0.5
    assert s.find_evaluation("sequential", h.id, "jsonl:x", "test", 2, 0) is None
    assert s.find_evaluation("sequential", h.id, "jsonl:x", "score", 2, 1) is None  # another seed: other problems
    assert s.find_evaluation("sequential", h.id, "jsonl:x", "score", 3, 0) is None
    assert s.find_evaluation("sequential", h.id, "jsonl:y", "score", 2, 0) is None
    recs = s.problem_records(eid)
    assert [r.problem_id for r in recs] == ["p0", "p1"]
    assert recs[1].gold == '["6", "six"]' and recs[1].taxonomy == "harness_error"
    calls = s.model_calls(evaluation_id=eid)
    assert len(calls) == 1 and calls[0].request == {"prompt": "2+2"} and calls[0].problem_id == "p0"
    with pytest.raises(sqlite3.IntegrityError):  # the cache key is unique
        s.save_evaluation("sequential", ev)


def test_evaluation_write_is_all_or_nothing(tmp_path: Path) -> None:
    s = Store.open(tmp_path)
    h = Harness(seed_source("minimal"))
    s.create_run("r", {})
    s.add_harness(h)
    bad = _problems()
    bad[1].calls = None  # type: ignore[assignment]  # NOT NULL violation on the second record
    with pytest.raises(sqlite3.IntegrityError):
        s.save_evaluation("r", _E(h.id, problems=bad))
    assert s.evaluations() == []
    assert s.conn.execute("SELECT COUNT(*) FROM problem_records").fetchone()[0] == 0
    assert s.conn.execute("SELECT COUNT(*) FROM model_calls").fetchone()[0] == 0


def test_harness_files_and_lineage(tmp_path: Path) -> None:
    s = Store.open(tmp_path)
    seed = Harness(seed_source("minimal"), name="minimal")
    child = Harness(seed.source.replace("64", "32"), parent_id=seed.id, edit="<<<<<<< SEARCH ...")
    s.add_harness(seed)
    s.add_harness(child, round=1)
    assert (tmp_path / "harnesses" / f"{child.id}.py").read_text() == child.source
    assert [r.id for r in s.lineage(child.id)] == [seed.id, child.id]
    assert (s.lineage(child.id)[1].edit or "").startswith("<<<<<<<")
    loaded = s.load_harness(child.id)
    assert loaded.id == child.id and loaded.parent_id == seed.id


def test_proposals_are_keyed_and_record_their_call(tmp_path: Path) -> None:
    s = Store.open(tmp_path)
    s.create_run("r", {})
    kw: dict[str, Any] = dict(
        parent_id="a", prompt="P", raw="junk", edit=EditResult(valid=False, reason="no_blocks", detail=None, parsed=False, produced=False, n_blocks=0, source=None, harness_id=None),
    )
    pid = s.save_proposal("r", 1, 0, call=CallRecord("proposer", {"seed": 1}, "junk"), **kw)
    found = s.find_proposal("r", 1, 0)
    assert found is not None and found.reason == "no_blocks" and found.valid is False
    assert s.find_proposal("r", 1, 1) is None
    assert s.model_calls(proposal_id=pid)[0].kind == "proposer"
    with pytest.raises(sqlite3.IntegrityError):
        s.save_proposal("r", 1, 0, **kw)


def test_rounds_and_rewards(tmp_path: Path) -> None:
    s = Store.open(tmp_path)
    s.create_run("r", {})
    s.save_round("r", 1, parent_id="a", best_harness_id="b", best_score_J=0.5, improved=True,
                 n_proposals=2, n_valid=1, solver_calls=10, tokens=100)
    assert s.rounds("r")[0].improved is True
    s.add_reward("t", 0, "ctx", 0, J=0.5, parsed=True, produced=True, completion_rate=1.0, reward=0.8)
    s.add_reward("t", 0, "ctx", 0, J=0.6, parsed=True, produced=True, completion_rate=1.0, reward=0.9)
    assert [r.reward for r in s.rewards("t")] == [0.9]
    s.finish_run("r", {"best": "b"})
    run = s.run("r")
    assert run is not None and run.status == "done" and run.result == {"best": "b"}


def test_a_locked_run_dir_refuses_a_second_writer_until_closed(tmp_path: Path) -> None:
    first = Store.open(tmp_path / "r", lock=True)
    with pytest.raises(UserError, match="in use by another harnesslearn process"):
        Store.open(tmp_path / "r", lock=True)
    Store.open(tmp_path / "r", create=False).close()  # readers (the report) are not locked out
    first.close()
    Store.open(tmp_path / "r", lock=True).close()


def test_harness_files_are_checked_against_their_ids(tmp_path: Path) -> None:
    s = Store.open(tmp_path)
    h = Harness(seed_source("minimal"))
    s.add_harness(h)
    s.verify_harnesses()
    (tmp_path / "harnesses" / f"{h.id}.py").write_text(h.source[:10])
    with pytest.raises(UserError, match="does not match its id"):
        s.load_harness(h.id)
    with pytest.raises(UserError, match="does not match its id"):
        s.verify_harnesses()


def test_load_evaluation_round_trips_typed(tmp_path: Path) -> None:
    s = Store.open(tmp_path)
    h = Harness(seed_source("minimal"))
    s.create_run("r", {})
    s.add_harness(h)
    eid = s.save_evaluation("r", _E(h.id, problems=_problems()))
    ev = s.load_evaluation(eid)
    assert (ev.harness_id, ev.J, ev.n, [p.id for p in ev.problems]) == (h.id, 0.5, 2, ["p0", "p1"])
    assert ev.problems[0].record.calls[0].request == {"prompt": "2+2"} and ev.problems[0].record.status == Status.OK
    assert ev.problems[1].gold == '["6", "six"]' and ev.problems[1].record.calls == []
    with pytest.raises(KeyError):
        s.load_evaluation(eid + 1)


def _contend(d: str, barrier: Any, q: Any) -> None:
    import time

    from harnesslearn.errors import UserError

    barrier.wait()
    try:
        s = Store.open(d, lock=True)
    except UserError:
        q.put(("lost", True))
        return
    time.sleep(0.3)  # the loser's failure happens while the winner works in the directory
    q.put(("won", (Path(d) / "harnesses").is_dir() and (Path(d) / "runs.sqlite").is_file()))
    s.close()


def test_two_processes_creating_one_run_dir_never_delete_the_winners(tmp_path: Path) -> None:
    """Issue 23: the process that lost the lock used to remove the directory the winner had just made."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    for trial in range(60):
        d = str(tmp_path / f"run{trial}")
        barrier, q = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_contend, args=(d, barrier, q)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        results = sorted(q.get(timeout=5) for _ in procs)
        assert [r[0] for r in results] in (["lost", "won"], ["won", "won"]), results
        assert all(ok for _, ok in results), f"trial {trial}: {results}"
        assert (Path(d) / "harnesses").is_dir() and (Path(d) / "runs.sqlite").is_file()


def test_load_evaluation_round_trips_every_field(tmp_path: Path) -> None:
    """Every field of the Evaluation, its problems, their run records and calls comes back as saved: each
    value is distinct, so a swapped column (answer and error, prompt and completion tokens) is caught."""
    import dataclasses

    calls = [CallRecord("model", {"prompt": "Q?", "max_tokens": 7}, "R1", 11, 5, 0.25, None),
             CallRecord("python", {"code": "print(1)"}, "1\n", 0, 0, 0.125, "Timeout: 2s")]
    rec = RunRecord("p0", Status.HARNESS_ERROR, answer="ANS", error="ERR: boom", calls=calls, wall_s=1.5)
    p = _P("p0", "What is QQ?", "GOLD", 0.75, {"em": 0.0, "f1": 0.75}, "harness_error", "ANS", 1, 16, 1.5,
           "ERR: boom", rec)
    e = _E("h", task="jsonl:t", split="feedback", n=9, seed=3, J=0.4375, completion_rate=0.625, solver_calls=13,
           tokens=17, wall_s=2.25, problems=[p])
    s = Store.open(tmp_path)
    s.create_run("r", {})
    s.add_harness(Harness(seed_source("minimal")))
    e.harness_id = Harness(seed_source("minimal")).id
    ev = s.load_evaluation(s.save_evaluation("r", e))
    for f in dataclasses.fields(_E):
        if f.name != "problems":
            assert getattr(ev, f.name) == getattr(e, f.name), f.name
    (got,) = ev.problems
    for f in dataclasses.fields(_P):
        if f.name != "record":
            assert getattr(got, f.name) == getattr(p, f.name), f.name
    for name in ("problem_id", "status", "answer", "error", "wall_s"):
        assert getattr(got.record, name) == getattr(rec, name), name
    assert got.record.calls == calls


def _a_store(d: Path) -> str:
    with Store.open(d) as s:
        s.create_run("sequential", {"seed": 0}, strategy="sequential")
        h = Harness(seed_source("minimal"), name="minimal")
        s.add_harness(h, run_id="sequential", round=0)
        s.save_evaluation("sequential", _E(h.id, problems=_problems()), purpose="score")
    return h.id


def test_a_store_written_by_a_newer_version_is_refused_unread_and_unwritten(tmp_path: Path) -> None:
    import sqlite3

    d = tmp_path / "run"
    _a_store(d)
    c = sqlite3.connect(d / "runs.sqlite")
    c.execute("INSERT INTO migrations (name, applied) VALUES ('m999_from_the_future', 'later')")
    c.commit()
    c.close()
    before = (d / "runs.sqlite").read_bytes()
    for opener in (lambda: Store.open(d, lock=True), lambda: Store.open_readonly(d)):
        with pytest.raises(UserError, match="written by a newer harnesslearn"):
            opener()
    assert (d / "runs.sqlite").read_bytes() == before


def test_report_opens_read_only_and_checks_the_pages(tmp_path: Path) -> None:
    """The reader changes nothing in an up-to-date store; a page damaged past the header is one "damaged"
    line at open, not a failed query later."""
    d = tmp_path / "run"
    _a_store(d)
    db = d / "runs.sqlite"
    before = db.read_bytes()
    with Store.open_readonly(d) as s:
        assert [r.id for r in s.runs()] == ["sequential"]
    assert db.read_bytes() == before
    data = bytearray(before)
    page = 4096
    for i in range(page + 100, min(len(data), 3 * page)):  # the second and third pages: tables, not the header
        data[i] = 0xA5
    db.write_bytes(bytes(data))
    with pytest.raises(UserError, match="damaged") as e:
        Store.open_readonly(d)
    assert "\n" not in str(e.value)


def test_another_applications_sqlite_file_is_refused(tmp_path: Path) -> None:
    import sqlite3

    d = tmp_path / "run"
    d.mkdir()
    c = sqlite3.connect(d / "runs.sqlite")
    c.execute("PRAGMA application_id = 1234")
    c.execute("CREATE TABLE migrations (id INTEGER PRIMARY KEY, name TEXT, applied TEXT)")
    c.commit()
    c.close()
    before = (d / "runs.sqlite").read_bytes()
    with pytest.raises(UserError, match="another application"):
        Store.open_readonly(d)
    assert (d / "runs.sqlite").read_bytes() == before


def test_a_reader_racing_a_store_being_created_is_told_it_is_in_use(tmp_path: Path) -> None:
    """While another process creates a run directory (it holds the lock; the database is still empty), a
    reader hears "in use", never the advice to remove it."""
    import fcntl

    d = tmp_path / "run"
    d.mkdir()
    (d / "runs.sqlite").write_bytes(b"")
    with open(d / ".lock", "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        for opener in (lambda: Store.open_readonly(d), lambda: Store.open(d)):
            with pytest.raises(UserError) as e:
                opener()
            assert "in use" in str(e.value) and "remove" not in str(e.value)
