"""The harness zoo: every entry is a valid harness, few-shot examples come from the feedback
split only, every entry runs end to end in the real sandbox with a rule-based chat solver, and
`harnesslearn zoo` keeps its JSON contract and refuses bad input."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harnesslearn import zoo
from harnesslearn.errors import UserError
from harnesslearn.harness import check_source
from harnesslearn.tasks import load_task

ROOT = Path(__file__).resolve().parent.parent
SOLVER = f"python:{ROOT / 'tests' / 'zoo_solver.py'}:six"
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")


@pytest.fixture()
def six_task(tmp_path: Path) -> str:
    p = tmp_path / "six.jsonl"
    p.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} * 0 + 6?", "answer": "6"}) + "\n"
                         for i in range(60)))
    return f"jsonl:{p}?scorer=exact"


@pytest.fixture()
def qa_task(tmp_path: Path) -> str:
    rows = [{"id": f"m{i}", "question": f"Which number is lucky {i}?", "answers": ["6"],
             "paragraphs": [{"title": "Luck", "text": f"The lucky number {i} is 6."}]} for i in range(60)]
    p = tmp_path / "qa.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"musique:{p}"


def test_every_entry_is_a_valid_harness(six_task: str, qa_task: str) -> None:
    for spec in (six_task, qa_task):
        task = load_task(spec)
        for name in zoo.names(task):
            h = zoo.build(name, task)
            assert check_source(h.source) is None, name
            assert h.name == f"zoo:{name}"
    assert set(zoo.names(load_task(qa_task))) == {"retrieve_read", "iterative_search"}
    assert {"interpreter_loop", "reason_extract", "self_consistency", "verify_retry", "few_shot"} <= set(
        zoo.names(load_task(six_task)))


def test_every_entry_built_for_a_task_is_its_own_nearest_zoo_file(six_task: str, qa_task: str) -> None:
    """The near-copy measure: a zoo harness written back is a copy (ratio 1), the few-shot one with its examples
    filled in for the task too (compared with the template's empty list: with them it was 0.79 on gcd)."""
    for spec in (six_task, qa_task, "rg:gcd"):
        task = load_task(spec)
        for name in zoo.names(task):
            assert zoo.nearest(zoo.build(name, task, seed=1).source) == (name, 1.0), (spec, name)
    filled = zoo.build("few_shot", load_task("rg:gcd")).source
    edited = filled.replace("final answer only", "final answer only, no words")
    assert 0.8 <= zoo.nearest(edited)[1] < 1.0  # an edit of the filled file stays a near-copy, not a copy


def test_few_shot_examples_come_from_the_feedback_split_only() -> None:
    task = load_task("rg:gcd")
    src = zoo.build("few_shot", task, seed=3).source
    line = next(n for n in ast.parse(src).body if isinstance(n, ast.Assign) and n.targets[0].id == "EXAMPLES")  # type: ignore[attr-defined]
    examples = ast.literal_eval(line.value)
    feedback = {p.question: str(p.answer) for p in task.problems("feedback", 50, 3)}
    others = {p.question for split in ("score", "test") for p in task.problems(split, 50, 3)}
    assert len(examples) == zoo.FEW_SHOT_EXAMPLES
    for q, a in examples:
        assert feedback[q] == a and q not in others


def test_unknown_or_inapplicable_names_are_user_errors(qa_task: str) -> None:
    with pytest.raises(UserError, match="did you mean 'few_shot'"):
        zoo.build("few_shoot", load_task("rg:gcd"))
    with pytest.raises(UserError, match="does not apply"):
        zoo.build("interpreter_loop", load_task(qa_task))
    h = zoo.resolve_harness("zoo:reason_extract", load_task("rg:gcd"))
    assert h.name == "zoo:reason_extract"
    assert zoo.resolve_harness("minimal", load_task("rg:gcd")).name == "minimal"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HARNESSLEARN_PROGRESS="0")
    return subprocess.run([sys.executable, "-m", "harnesslearn.cli", "zoo", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


@linux_only
def test_zoo_command_runs_every_entry_in_the_sandbox(six_task: str, qa_task: str) -> None:
    r = _cli("--task", six_task, "--solver", SOLVER, "--n-score", "3", "--n-test", "4", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    rows = {row["name"]: row for row in out["rows"]}
    assert set(rows) == {"seed:minimal", *zoo.names(load_task(six_task))}
    for name, row in rows.items():
        assert row["score"]["n"] == 3 and row["test"]["n"] == 4
        if name != "seed:minimal":  # the seed's completion model call sees no chat turn: answers differ
            assert row["score"]["J"] == 1.0 and row["test"]["J"] == 1.0, name
            assert row["score"]["lo"] <= row["score"]["J"] <= row["score"]["hi"]
    assert out["best"] == "interpreter_loop"  # picked on the score split; ties go to the first
    q = _cli("--task", qa_task, "--solver", SOLVER, "--n-score", "2", "--n-test", "2", "--test", "best", "--json")
    assert q.returncode == 0, q.stderr[-2000:]
    qrows = {row["name"]: row for row in json.loads(q.stdout)["rows"]}
    assert qrows["retrieve_read"]["score"]["J"] == 1.0 and qrows["iterative_search"]["score"]["J"] == 1.0
    assert qrows["iterative_search"]["test"] == {}  # --test best: only the pick (and the seed) on test
    assert qrows["retrieve_read"]["test"]["n"] == 2


@pytest.mark.parametrize("args, msg", [
    (["--only", "nope"], "unknown zoo harness"),
    (["--test", "some"], "--test must be all or best"),
    (["--n-score", "0"], "--n-score"),
])
def test_zoo_command_bad_input(six_task: str, args: list[str], msg: str) -> None:
    r = _cli("--task", six_task, "--solver", SOLVER, *args)
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_pick_is_made_on_the_score_split_where_score_and_test_disagree(six_task: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every entry's score-split J rises with its position and its test J falls: a pick made on test (or
    on anything but the score split) names another entry. ``test="best"`` runs only the pick (and the seed)
    on test."""
    import asyncio

    from harnesslearn import evaluation
    from harnesslearn.evaluation import Evaluation

    task = load_task(six_task)
    entries = zoo.names(task)
    assert len(entries) >= 3
    rank = {zoo.build(n, task).id: i for i, n in enumerate(entries)}
    tested: list[str] = []

    async def fake(h: object, t: object, split: str, n: int, seed: int, executor: object, **kw: object) -> Evaluation:
        i = rank.get(h.id, -1)  # type: ignore[attr-defined]
        if split == "test":
            tested.append(h.id)  # type: ignore[attr-defined]
        j = (i + 1) / 10 if split == "score" else 0.9 - (i + 1) / 10
        return Evaluation(h.id, "t", split, n, seed, j, 1.0, 0, 0, 0.0, [])  # type: ignore[attr-defined]

    monkeypatch.setattr(evaluation, "evaluate", fake)
    out = asyncio.run(zoo.evaluate_zoo(task, executor=None, n_score=4, n_test=4, test="all",  # type: ignore[arg-type]
                                       progress=False))
    rows = {r["name"]: r for r in out["rows"]}
    assert out["best"] == entries[-1]  # the highest on score ...
    assert max((r for r in out["rows"] if not r["name"].startswith("seed:")), key=lambda r: r["test"]["J"])[
        "name"] == entries[0]  # ... while test would have picked the first
    assert out["best_test_J"] == rows[entries[-1]]["test"]["J"]
    tested.clear()
    out = asyncio.run(zoo.evaluate_zoo(task, executor=None, n_score=4, n_test=4, test="best",  # type: ignore[arg-type]
                                       progress=False))
    assert out["best"] == entries[-1] and [rank.get(t, -1) for t in tested] == [-1, len(entries) - 1]
    rows = [zoo.ZooRow(n, n, {"J": s}, {"J": t}, 0, 0.0) for n, s, t in [("a", 0.2, 0.9), ("b", 0.5, 0.1),
                                                                          ("c", 0.5, 0.0)]]
    assert zoo.best(rows).name == "b"  # type: ignore[union-attr]  # highest score J, the first on ties
