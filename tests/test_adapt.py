"""Test-time adaptation through the real CLI, executor and ``python:`` models (issue 5 must-holds),
plus strategy, resume and failure-typing properties through the library."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harnesslearn.errors import InfraError, UserError
from harnesslearn.settings.adapt import AdaptSettings as S
from harnesslearn.settings.groups import Splits

MODELS = '''
import os, time

def _count(who):  # every call really made, one line each, when HL_CALL_LOG names a file
    if os.environ.get("HL_CALL_LOG"):
        with open(os.environ["HL_CALL_LOG"], "a") as f:
            f.write(who + "\\n")

def garbage(prompt, **kw):
    _count("solver")
    return "banana"

EDIT = """<<<<<<< SEARCH
    prompt = f"Question: {question}\\\\nAnswer:"
    completion = model(prompt, max_tokens=64, temperature=0.0, stop=["\\\\n"])
    return completion.strip()
=======
    import re
    a, b = re.findall(r"-?\\\\d+", question)[:2]
    return str(int(a) + int(b) + OFFSET)
>>>>>>> REPLACE
"""

def compute(prompt, **kw):
    _count("proposer")
    return "I will compute it.\\n" + EDIT.replace("OFFSET", "0")

def never_applies(prompt, **kw):
    return "<<<<<<< SEARCH\\nthis line is not in the harness\\n=======\\nx\\n>>>>>>> REPLACE\\n"

NOOP = """<<<<<<< SEARCH
    return completion.strip()
=======
    return completion.strip()
>>>>>>> REPLACE
"""
_made = []

def noop_twice_then_compute(prompt, **kw):  # the first two calls of a process are no-ops
    _count("proposer")
    _made.append(1)
    return NOOP if len(_made) <= 2 else EDIT.replace("OFFSET", "0")

def offsets(prompt, seed=None, **kw):  # three distinct revisions, by the candidate's seed
    return EDIT.replace("OFFSET", str(seed % 3))

def slow_mixed(prompt, seed=None, **kw):
    _count("proposer")
    time.sleep(0.4)
    if seed % 3 == 0:
        return "no edit here"
    return EDIT.replace("OFFSET", str(seed % 2))
'''


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("adapt")
    rng = random.Random(0)
    with (d / "arith.jsonl").open("w") as f:
        for i in range(200):
            a, b = rng.randint(1, 99), rng.randint(1, 99)
            f.write(json.dumps({"id": f"q{i}", "question": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n")
    (d / "models.py").write_text(MODELS)
    return {"dir": d, "task": d / "arith.jsonl", "models": d / "models.py"}


def _args(env: dict[str, Path], proposer: str, run_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "harnesslearn.cli", "adapt", "--task", f"jsonl:{env['task']}",
        "--solver", f"python:{env['models']}:garbage", "--proposer", f"python:{env['models']}:{proposer}",
        "--run-dir", str(run_dir), "--n-feedback", "4", "--n-score", "8", "--n-test", "10", "--json", *extra,
    ]


def _cli(args: list[str], calls: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI; with ``calls``, every solver and proposer call it really makes is logged there."""
    env = {**os.environ, "HARNESSLEARN_PROGRESS": "0", "HL_CALL_LOG": str(calls) if calls else ""}
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)


def _calls(log: Path) -> dict[str, int]:
    lines = log.read_text().split() if log.exists() else []
    return {who: lines.count(who) for who in ("solver", "proposer")}


def _db(run_dir: Path) -> sqlite3.Connection:
    c = sqlite3.connect(run_dir / "runs.sqlite")
    c.row_factory = sqlite3.Row
    return c


def test_compute_edit_lifts_test_J_in_one_round(env: dict[str, Path]) -> None:
    rd = env["dir"] / "lift"
    p = _cli(_args(env, "compute", rd, "--rounds", "1", "--candidates", "1"))
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    for key in ("run_dir", "strategy", "best_harness_id", "seed_score_J", "seed_test_J", "score_J", "test_J",
                "proposals", "valid_proposals", "solver_calls"):
        assert key in out
    assert out["seed_test_J"] < 0.9 <= out["test_J"]
    assert out["best_harness_id"] != out["seed_harness_id"] and out["lineage"][-1] == out["best_harness_id"]
    row = _db(rd).execute("SELECT parent_id, edit FROM harnesses WHERE id = ?", (out["best_harness_id"],)).fetchone()
    assert row["parent_id"] == out["seed_harness_id"] and "<<<<<<< SEARCH" in row["edit"]
    assert (rd / "harnesses" / f"{out['best_harness_id']}.py").read_text().count("re.findall") == 1
    near = out["best_nearest_zoo"]  # a small edit of the seed, not a zoo harness written back
    assert near["near_copy"] is False and near["ratio"] < 0.8 and 0 < near["seed_ratio"] < 0.8
    from harnesslearn.report import write_report

    assert "not a near-copy of a zoo harness" in write_report(rd).read_text()


def test_a_zoo_harness_written_back_is_marked_a_near_copy() -> None:
    from harnesslearn import zoo
    from harnesslearn.adapt import nearest_zoo
    from harnesslearn.harness import Harness, load_harness

    seed = load_harness("minimal")
    assert nearest_zoo(seed, seed) is None  # the seed kept: nothing to mark
    near = nearest_zoo(Harness(zoo.source("interpreter_loop")), seed)
    assert near is not None and near["name"] == "interpreter_loop" and near["ratio"] == 1.0 and near["near_copy"]


def test_edits_that_never_apply_keep_the_seed(env: dict[str, Path]) -> None:
    rd = env["dir"] / "never"
    p = _cli(_args(env, "never_applies", rd, "--rounds", "2", "--candidates", "2"))
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["best_harness_id"] == out["seed_harness_id"] and out["valid_proposals"] == 0
    assert "best_nearest_zoo" not in out  # the seed kept: nothing to mark
    assert out["proposals"] == 4 and out["test_J"] == out["seed_test_J"] and out["invalid_reasons"] == {"not_found": 4}
    rows = _db(rd).execute("SELECT valid, reason, raw FROM proposals").fetchall()
    assert len(rows) == 4 and all(r["valid"] == 0 and r["reason"] == "not_found" and r["raw"] for r in rows)


def test_no_change_proposals_are_counted_and_redrawn_only_when_asked(env: dict[str, Path]) -> None:
    """Issue 24: a no-op proposal is invalid (no_change) and, by default, one of the K candidates;
    with --retry-no-change N up to N of them are followed by one more draw, counted, recorded and
    recalled on --resume."""
    rd = env["dir"] / "noop_default"
    log = env["dir"] / "noop_default.calls"
    p = _cli(_args(env, "noop_twice_then_compute", rd, "--rounds", "1", "--candidates", "2"), log)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["proposals"] == 2 and out["invalid_reasons"] == {"no_change": 2} and _calls(log)["proposer"] == 2
    assert out["best_harness_id"] == out["seed_harness_id"]

    rd = env["dir"] / "noop_retry"
    log = env["dir"] / "noop_retry.calls"
    args = _args(env, "noop_twice_then_compute", rd, "--rounds", "1", "--candidates", "2", "--retry-no-change", "1")
    p = _cli(args, log)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["proposals"] == 3 and out["valid_proposals"] == 1 and out["invalid_reasons"] == {"no_change": 2}
    assert _calls(log)["proposer"] == 3 and out["test_J"] >= 0.9 > out["seed_test_J"]
    rows = _db(rd).execute("SELECT idx, reason FROM proposals ORDER BY idx").fetchall()
    assert [(r["idx"], r["reason"]) for r in rows] == [(0, "no_change"), (1, "no_change"), (2, None)]
    again = _cli([*args, "--resume"], log)  # a finished run: nothing is drawn again
    assert again.returncode == 0 and json.loads(again.stdout)["test_J"] == out["test_J"]
    assert _calls(log)["proposer"] == 3


def test_existing_run_dir_without_resume_is_refused_untouched(env: dict[str, Path]) -> None:
    rd = env["dir"] / "exists"
    rd.mkdir()
    (rd / "keep.txt").write_text("mine")
    p = _cli(_args(env, "compute", rd))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--resume" in p.stderr
    assert sorted(x.name for x in rd.iterdir()) == ["keep.txt"]


def test_resume_of_a_finished_run_makes_no_calls(env: dict[str, Path]) -> None:
    """Calls are counted where they are made (in the model functions), not read back from the
    store: resuming a finished run recomputes nothing and gives the same result."""
    rd, first, again = env["dir"] / "finished", env["dir"] / "finished.calls", env["dir"] / "finished.again"
    p = _cli(_args(env, "compute", rd, "--rounds", "2", "--candidates", "2"), first)
    assert p.returncode == 0, p.stderr[-2000:]
    made = _calls(first)
    out = json.loads(p.stdout)
    assert made["proposer"] == out["proposals"] == 4 and made["solver"] >= out["solver_calls"] > 0
    r = _cli(_args(env, "compute", rd, "--rounds", "2", "--candidates", "2", "--resume"), again)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _calls(again) == {"solver": 0, "proposer": 0}
    resumed = json.loads(r.stdout)
    for key in ("best_harness_id", "score_J", "test_J", "seed_test_J", "proposals", "solver_calls", "rounds"):
        assert resumed[key] == out[key], key


@pytest.mark.slow
def test_sigkill_then_resume_matches_an_uninterrupted_run(env: dict[str, Path]) -> None:
    extra = ("--rounds", "3", "--candidates", "3")
    full_log, part_log = env["dir"] / "full.calls", env["dir"] / "killed.calls"
    full = _cli(_args(env, "slow_mixed", env["dir"] / "full", *extra), full_log)
    assert full.returncode == 0, full.stderr[-2000:]
    rd = env["dir"] / "killed"
    proc = subprocess.Popen(_args(env, "slow_mixed", rd, *extra), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            env={**os.environ, "HARNESSLEARN_PROGRESS": "0", "HL_CALL_LOG": str(part_log)})
    n, deadline = 0, time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (rd / "runs.sqlite").exists():
            try:
                n = _db(rd).execute("SELECT COUNT(*) FROM proposals").fetchone()[0]
            except sqlite3.OperationalError:
                n = 0
            if n >= 4:
                break
        time.sleep(0.1)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 4 <= n < 9
    resumed = _cli(_args(env, "slow_mixed", rd, *extra, "--resume"), part_log)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    # the calls really made before the kill and after the resume: what the uninterrupted run made,
    # plus at most the one evaluation (10 test problems) and the one proposal cut off by the kill
    full_calls, made = _calls(full_log), _calls(part_log)
    assert full_calls["solver"] <= made["solver"] <= full_calls["solver"] + 10, (made, full_calls)
    assert full_calls["proposer"] <= made["proposer"] <= full_calls["proposer"] + 1, (made, full_calls)
    a, b = json.loads(full.stdout), json.loads(resumed.stdout)
    for key in ("best_harness_id", "score_J", "test_J", "seed_score_J", "seed_test_J", "proposals",
                "valid_proposals", "solver_calls", "rounds", "lineage"):
        assert a[key] == b[key], key
    assert _db(rd).execute("SELECT COUNT(*) FROM proposals").fetchone()[0] == 9


# ---------------------------------------------------------------- library-level properties


def _lib(env: dict[str, Path], proposer: str) -> tuple[Any, Any, Any]:
    from harnesslearn.models import load_model
    from harnesslearn.tasks import load_task

    return (load_task(f"jsonl:{env['task']}"), load_model(f"python:{env['models']}:garbage"),
            load_model(f"python:{env['models']}:{proposer}"))


def test_compare_runs_both_strategies_at_the_same_proposal_budget(env: dict[str, Path]) -> None:
    from harnesslearn.adapt import ORACLE_LABEL, adapt
    from harnesslearn.store import Store

    task, solver, proposer = _lib(env, "compute")
    rd = env["dir"] / "compare"
    r = asyncio.run(adapt(task, solver, proposer, S(strategy="compare", rounds=2, candidates=1, splits=Splits(n_feedback=2, n_score=4, n_test=4)), run_dir=rd, progress=False))
    c = r.compare
    assert c is not None and set(c) == {"sequential", "independent"}
    assert c["sequential"]["proposals"] == c["independent"]["proposals"] == 2
    assert c["independent"]["oracle"]["label"] == ORACLE_LABEL and "upper bound" in ORACLE_LABEL
    assert c["independent"]["test_J"] == 1.0 and c["sequential"]["solver_calls"] > 0
    # the top-level spend is the whole job's: both halves (it was the sequential half's alone)
    for key in ("proposer_tokens", "solver_tokens"):
        assert r.spend[key] == c["sequential"]["spend"][key] + c["independent"]["spend"][key] > 0
    assert {row["strategy"] for row in r.spend["per_round"]} == {"sequential", "independent"}
    with Store.open(rd) as s:
        assert {x.id for x in s.runs()} == {"sequential", "independent"}
        assert all(x.status == "done" for x in s.runs())


def test_resume_with_other_settings_is_a_user_error(env: dict[str, Path]) -> None:
    from harnesslearn.adapt import adapt

    task, solver, proposer = _lib(env, "never_applies")
    rd = env["dir"] / "settings"
    kw: dict[str, Any] = dict(rounds=1, candidates=1, splits=Splits(n_feedback=2, n_score=2, n_test=2))
    asyncio.run(adapt(task, solver, proposer, S(**kw), run_dir=rd, progress=False))
    with pytest.raises(UserError, match="candidates"):
        asyncio.run(adapt(task, solver, proposer, S(**{**kw, "candidates": 2}), run_dir=rd, resume=True,
                          progress=False))


def test_infra_failure_is_not_stored_and_stops_the_run(env: dict[str, Path]) -> None:
    from harnesslearn.adapt import adapt
    from harnesslearn.evaluation import Evaluation, ProblemResult
    from harnesslearn.sandbox.records import RunRecord, Status
    from harnesslearn.store import Store

    async def infra_eval(h: Any, task: Any, split: str, n: int, seed: int, *a: Any) -> Evaluation:
        rec = RunRecord("p", Status.INFRA_ERROR, error="solver down")
        p = ProblemResult("p", "q", "1", None, {}, "infra_error", None, 0, 0, 0.0, "solver down", rec)
        return Evaluation(h.id, task.spec, split, 1, seed, None, None, 0, 0, 0.0, [p])

    task, solver, proposer = _lib(env, "compute")
    rd = env["dir"] / "infra"
    with pytest.raises(InfraError):
        asyncio.run(adapt(task, solver, proposer, S(rounds=1, candidates=1, splits=Splits(n_feedback=1, n_score=1, n_test=1)),
                          run_dir=rd, progress=False, executor=object(), evaluate_fn=infra_eval))  # type: ignore[arg-type]
    with Store.open(rd) as s:
        run = s.run("sequential")
        assert s.evaluations() == [] and run is not None and run.status == "running"


def test_sequential_revises_the_current_best_and_needs_a_strict_gain(env: dict[str, Path]) -> None:
    from harnesslearn.adapt import adapt
    from harnesslearn.store import Store

    task, solver, proposer = _lib(env, "compute")
    rd = env["dir"] / "seq"
    r = asyncio.run(adapt(task, solver, proposer, S(rounds=2, candidates=1, splits=Splits(n_feedback=2, n_score=4, n_test=4)),
                          run_dir=rd, progress=False))
    with Store.open(rd) as s:
        props = s.proposals("sequential")
        assert props[0].parent_id == r.seed_harness_id and props[1].parent_id == r.best_harness_id
        assert props[1].reason == "not_found"  # its SEARCH text is gone from the revised harness
    assert [x["improved"] for x in r.rounds] == [True, False]

    (env["dir"] / "same.py").write_text(
        "def fn(prompt, **kw):\n    return '<<<<<<< SEARCH\\n    return completion.strip()\\n=======\\n"
        "    return completion.strip() + \"\"\\n>>>>>>> REPLACE\\n'\n")
    from harnesslearn.models import load_model

    same = load_model(f"python:{env['dir'] / 'same.py'}:fn")
    r2 = asyncio.run(adapt(task, solver, same, S(rounds=1, candidates=1, splits=Splits(n_feedback=2, n_score=4, n_test=4)),
                           run_dir=env["dir"] / "tie", progress=False))
    assert r2.valid_proposals == 1 and r2.best_harness_id == r2.seed_harness_id  # equal J keeps the seed


def test_adapt_refuses_a_task_without_a_score_or_feedback_split(tmp_path):
    """Two problems can't fill three splits: exit 2 with one line, and no run dir is created."""
    import json
    import subprocess
    import sys

    data = tmp_path / "two.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)}) + "\n"
                            for i in range(2)))
    fn = tmp_path / "m.py"
    fn.write_text("def f(prompt, **kw):\n    return 'x'\n")
    run_dir = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "adapt", "--task", f"jsonl:{data}",
                        "--solver", f"python:{fn}:f", "--proposer", f"python:{fn}:f", "--run-dir", str(run_dir),
                        "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "has no problems" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not run_dir.exists()


class _ChatProposer:
    """A scripted chat model: records each request; continues an assistant-turn start with a new
    ``solve`` body that computes the sum, or, asked in words, answers with the whole function."""

    spec = "test:chat"

    def __init__(self, continues: bool) -> None:
        self.continues, self.requests = continues, []  # type: list[Any]

    def chat_template(self) -> bool:
        return True

    def continues_assistant(self) -> bool:
        return self.continues

    async def generate(self, request: Any) -> Any:
        from harnesslearn.models.base import Completion

        self.requests.append(request)
        body = "    import re\n    a, b = re.findall(r'-?\\d+', question)[:2]\n    return str(int(a) + int(b))\n"
        text = body if request.prompt[-1]["role"] == "assistant" else (
            "Sure:\n```python\ndef solve(model, question):\n" + body + "```\nThis computes the sum.")
        return Completion([text], prompt_tokens=10, completion_tokens=20)

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("continues", [True, False])
def test_a_chat_proposer_writes_the_new_solve_with_or_without_an_assistant_start(
        env: dict[str, Path], continues: bool) -> None:
    from harnesslearn.adapt import adapt
    from harnesslearn.store import Store

    task, solver, _ = _lib(env, "compute")
    proposer = _ChatProposer(continues)
    rd = env["dir"] / f"chat-{continues}"
    r = asyncio.run(adapt(task, solver, proposer, S(rounds=1, candidates=1, splits=Splits(n_feedback=2, n_score=4, n_test=4)),  # type: ignore[arg-type]
                          run_dir=rd, progress=False))
    (req,) = proposer.requests
    assert isinstance(req.prompt, list) and [m["role"] for m in req.prompt][:2] == ["system", "user"]
    # proposer format auto: the block opened on solve as an assistant-turn start only where the engine continues it
    assert (req.prompt[-1]["role"] == "assistant") is continues
    assert (req.stop is not None) is continues  # a whole function is asked for: no stop strings cut it
    assert r.valid_proposals == 1 and r.test_J == 1.0
    with Store.open(rd) as s:
        (p,) = s.proposals("sequential")
        assert json.loads(p.prompt or "") == req.prompt  # stored as the messages sent


def test_zoo_baselines_are_evaluated_on_score_and_test_and_shown_in_the_report(env: dict[str, Path]) -> None:
    from harnesslearn import zoo
    from harnesslearn.adapt import adapt
    from harnesslearn.report import write_report

    task, solver, proposer = _lib(env, "never_applies")
    rd = env["dir"] / "zoo"
    r = asyncio.run(adapt(task, solver, proposer, S(rounds=1, candidates=1, splits=Splits(n_feedback=2, n_score=3, n_test=3),
                                                   zoo_baselines=True),
                          run_dir=rd, progress=False, seed_harness=zoo.build("reason_extract", task)))
    assert r.zoo is not None and [z["name"] for z in r.zoo] == zoo.names(task)
    assert sum(z["best"] for z in r.zoo) == 1 and all(z["score"]["n"] == 3 for z in r.zoo)
    # only the pick (on the score split) is evaluated on test
    assert [z["test"].get("n") for z in r.zoo if z["best"]] == [3]
    assert all(z["test_J"] is None for z in r.zoo if not z["best"])
    assert r.seed_harness_id == zoo.build("reason_extract", task).id
    html = write_report(rd).read_text()
    assert "zoo:interpreter_loop" in html and "best zoo harness" in html


def test_every_result_affecting_setting_is_refused_on_resume_and_no_other() -> None:
    """``AdaptSettings.changes`` names each leaf of the tree marked ``affects_results`` (each budget too)
    when it differs from the recorded run, and none of the others (the runtime, zoo baselines)."""
    import typing

    from harnesslearn.settings.adapt import AdaptSettings
    from harnesslearn.settings.base import leaves

    base = AdaptSettings()
    recorded = base.record()
    seen = 0
    for path, leaf in leaves(AdaptSettings):
        v = leaf.default
        arms = typing.get_args(leaf.annotation)
        if typing.get_origin(leaf.annotation) is typing.Literal:
            other: Any = next(c for c in arms if c != v)
        elif typing.get_origin(leaf.annotation) is tuple:  # tracking.to
            other = ("mlflow",)
        elif isinstance(v, bool):
            other = not v
        elif isinstance(v, int | float):
            other = v + 1 if v < 5 else v - 1
        elif int in arms or float in arms:  # int | None (concurrency, token caps), float | None (the money cap)
            other = 2
        else:  # str | None (the memory path, the worker interpreter), str (the executor)
            other = "ray" if path == "runtime.executor" else "elsewhere.sqlite"
        changed = base.with_(**{path: other}).changes(recorded)
        if leaf.affects_results:
            assert len(changed) == 1 and changed[0].startswith(leaf.option or path), (path, changed)
            seen += 1
        else:
            assert changed == [], (path, changed)
    assert seen >= 20


def test_a_record_of_the_flat_settings_resumes_under_the_tree() -> None:
    """Runs recorded before the settings tree kept flat names (``n_score``, ``memory`` as a bool,
    ``budgets`` as one object): they read back into the tree and compare equal."""
    from harnesslearn.settings.adapt import AdaptSettings

    old = {"strategy": "sequential", "rounds": 3, "candidates": 4, "seed": 0, "n_feedback": 8, "n_score": 5,
           "n_test": 32, "budgets": {"timeout_s": 60.0, "max_calls": 16, "max_tokens": 8192, "memory_mb": 1024,
                                     "tool_calls": 16}, "oracle": False, "temperature": 0.8, "max_tokens": 1024,
           "retry_no_change": 0, "n_traces": 4, "proposer_format": "auto", "zoo_baselines": False,
           "concurrency": None, "memory": False, "memory_k": 2, "memory_path": None,
           "task": "rg:gcd", "proposer": "local:x"}  # identity keys of the run, stored beside the settings
    s = AdaptSettings.from_record(old)
    assert s.splits.n_score == 5 and s.memory.enabled is False and s.budgets.max_calls == 16
    assert s.changes(old) == [] and AdaptSettings().changes(old) == [
        "--n-score (recorded 5, now 16)", "--memory/--no-memory (recorded False, now True)"]


def test_a_run_recorded_with_the_old_form_and_prime_settings_resumes_under_proposer_format() -> None:
    """Runs recorded before ``proposer_format`` kept ``form`` and ``prime``: a pair that names one format
    resumes under it; a pair whose format depended on the backend is named, not guessed."""
    from harnesslearn.settings.adapt import AdaptSettings

    old = {k: v for k, v in AdaptSettings().record().items() if k != "proposer.format"}
    assert AdaptSettings().changes({**old, "form": "auto", "prime": "auto"}) == []
    assert AdaptSettings().with_(**{"proposer.format": "plain-rewrite"}).changes(
        {**old, "form": "plain", "prime": "rewrite"}) == []
    assert AdaptSettings.from_record({**old, "form": "chat", "prime": "file"}).proposer.format == "chat-file"
    (change,) = AdaptSettings().changes({**old, "form": "auto", "prime": "rewrite"})
    assert change == "--proposer-format (recorded 'form=auto, prime=rewrite', now 'auto')"


@pytest.mark.parametrize("strategy", ["sequential", "independent"])
def test_selection_never_reads_the_test_split(env: dict[str, Path], strategy: str) -> None:
    """The invariant the reported numbers rest on: candidates are selected by score-split J only. With an
    evaluation whose test split ranks the candidates the other way round, the selected harness is the
    score split's best, and the test split is evaluated only for the seed and the selected harness."""
    from harnesslearn.adapt import adapt
    from harnesslearn.evaluation import Evaluation, ProblemResult
    from harnesslearn.sandbox.records import RunRecord, Status

    # (score J, test J) by the revision's offset; the seed has no offset
    js = {"+ 0)": (0.9, 0.0), "+ 1)": (0.5, 1.0), "+ 2)": (0.3, 0.8), None: (0.1, 0.1)}
    reads: list[tuple[str, str | None]] = []

    async def rigged(h: Any, task: Any, split: str, n: int, seed: int, *a: Any) -> Evaluation:
        key = next((k for k in js if k and k in h.source), None)
        reads.append((split, key))
        j = js[key][1 if split == "test" else 0]
        probs = [ProblemResult(f"p{i}", f"What is {i} + 1?", str(i + 1), j, {}, "ok", "x", 1, 1, 0.0, None,
                               RunRecord(f"p{i}", Status.OK, answer="x")) for i in range(n)]
        return Evaluation(h.id, task.spec, split, n, seed, j, 1.0, n, n, 0.0, probs)

    task, solver, proposer = _lib(env, "offsets")
    r = asyncio.run(adapt(task, solver, proposer, S(strategy=strategy, rounds=2 if strategy == "sequential" else 1,
                                                    candidates=3, splits=Splits(n_feedback=2, n_score=3, n_test=3)),
                          run_dir=env["dir"] / f"rigged-{strategy}", progress=False, executor=object(),  # type: ignore[arg-type]
                          evaluate_fn=rigged))
    assert r.score_J == 0.9 and r.test_J == 0.0  # the score split's pick, though "+ 1)" is better on test
    assert {key for split, key in reads if split == "test"} == {None, "+ 0)"}  # the seed and the pick only
