"""Run-level budgets: caps on a run's proposer tokens, solver tokens and money. At a cap the run stops
cleanly before the next round with its best harness so far, says so, reports what it spent, and --resume
with a larger cap continues where it stopped."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import scripted_adapt


def _adapt(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return scripted_adapt.adapt(tmp_path, *extra, rounds=3)


def _calls(tmp_path: Path) -> int:
    f = tmp_path / "calls"
    return len(f.read_text().split()) if f.exists() else 0


def test_a_proposer_token_cap_stops_the_run_and_a_larger_one_resumes_it(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    full = _adapt(tmp_path / "full")
    assert full.returncode == 0, full.stderr[-2000:]
    per_round = json.loads(full.stdout)["spend"]["per_round"]
    first = next(r["proposer_tokens"] for r in per_round if r["round"] == 1)
    total = json.loads(full.stdout)["spend"]["proposer_tokens"]
    assert first > 0 and total == sum(r["proposer_tokens"] for r in per_round) > first

    d = tmp_path / "capped"
    d.mkdir()
    p = _adapt(d, "--max-proposer-tokens", str(first))  # reached after round 1: stop before round 2
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["proposals"] == 1 and _calls(d) == 1 and "stopped before round 2" in out["stopped"]
    assert out["spend"]["proposer_tokens"] == first and len(out["rounds"]) == 1
    c = sqlite3.connect(d / "run" / "runs.sqlite")
    assert c.execute("SELECT status FROM runs").fetchone()[0] == "stopped"
    c.close()
    same = _adapt(d, "--max-proposer-tokens", str(first), "--resume")  # the same cap: the same place, no calls
    assert json.loads(same.stdout)["proposals"] == 1 and _calls(d) == 1
    more = _adapt(d, "--max-proposer-tokens", str(10 * total), "--resume")  # a larger cap: it goes on
    assert more.returncode == 0, more.stderr[-2000:]
    out = json.loads(more.stdout)
    assert out["proposals"] == 3 and _calls(d) == 3 and "stopped" not in out
    assert out["spend"]["proposer_tokens"] == total  # the same run as the uncapped one
    html = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "report", str(d / "run")], capture_output=True,
                          text=True, timeout=120)
    assert html.returncode == 0 and "spend per round" in (d / "run" / "report.html").read_text()


def test_a_proposer_token_cap_stops_the_independent_strategy_and_a_larger_one_resumes_it(tmp_path: Path) -> None:
    """Issue 65, item 2: --strategy independent made all R x K proposals past any cap, recorded no "stopped" and
    marked the run done. Its caps hold every K proposals: one batch of K, then stopped, resumable."""
    opts = ("--strategy", "independent", "--candidates", "2")
    p = scripted_adapt.adapt(tmp_path, *opts, "--max-proposer-tokens", "1", rounds=3)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["proposals"] == 2 and _calls(tmp_path) == 2, out
    assert "stopped after 2 of round 1's proposals" in out["stopped"] and "proposer tokens" in out["stopped"]
    c = sqlite3.connect(tmp_path / "run" / "runs.sqlite")
    assert c.execute("SELECT status FROM runs").fetchone()[0] == "stopped"
    c.close()
    more = scripted_adapt.adapt(tmp_path, *opts, "--max-proposer-tokens", "1000000", "--resume", rounds=3)
    assert more.returncode == 0, more.stderr[-2000:]
    out = json.loads(more.stdout)
    assert out["proposals"] == 6 and _calls(tmp_path) == 6 and "stopped" not in out


def test_a_scorer_edited_between_a_capped_run_and_its_resume_is_refused(tmp_path: Path) -> None:
    """Issue 65, item 3: the scorer's source is an input of the run (as the prompt templates are): a resume after
    it changed would compare round 1's J (old metric) with round 2's (new); refused in one line, naming it."""
    rows = [json.dumps({"id": f"q{i}", "question": f"gcd of {i} and 1?", "answer": "1"}) for i in range(40)]
    (tmp_path / "t.jsonl").write_text("\n".join(rows) + "\n")
    scorer = tmp_path / "score.py"
    scorer.write_text("def grade(answer, problem):\n    return 0.0\n")
    task = ("--task", f"jsonl:{tmp_path / 't.jsonl'}?scorer={scorer}:grade")
    p = scripted_adapt.adapt(tmp_path, *task, "--max-proposer-tokens", "1", rounds=2)
    assert p.returncode == 0 and "stopped before round 2" in json.loads(p.stdout)["stopped"], p.stderr[-2000:]
    scorer.write_text("def grade(answer, problem):\n    return float(answer.strip() == problem.answer)\n")
    again = scripted_adapt.adapt(tmp_path, *task, "--resume", rounds=2)
    assert again.returncode == 2 and again.stdout == "" and again.stderr.count("\n") == 1, again.stderr
    assert "scorer" in again.stderr and _calls(tmp_path) == 1
    scorer.write_text("def grade(answer, problem):\n    return 0.0\n")  # the scorer it had: the run goes on
    same = scripted_adapt.adapt(tmp_path, *task, "--resume", rounds=2)
    assert same.returncode == 0 and json.loads(same.stdout)["proposals"] == 2, same.stderr[-2000:]


def test_a_solver_token_cap_before_any_proposal(tmp_path: Path) -> None:
    p = _adapt(tmp_path, "--max-solver-tokens", "1")  # the seed's evaluations alone reach it
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["proposals"] == 0 and _calls(tmp_path) == 0 and "solver tokens" in out["stopped"]


@pytest.mark.parametrize("cap", ["1.0"])
def test_a_money_cap_with_an_unpriced_model_is_refused_before_anything_runs(tmp_path: Path, cap: str) -> None:
    p = _adapt(tmp_path, "--max-usd", cap)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
    assert "no price is known" in p.stderr and not (tmp_path / "run").exists()


def test_prices_come_from_the_maintained_table() -> None:
    from harnesslearn.spend import priced_name, usd

    assert usd("openai:gpt-4o-mini", 1_000_000, 1_000_000) == pytest.approx(0.75)
    assert priced_name("openai:gpt-4o-mini?base_url=http://127.0.0.1:8000/v1") is None  # a local server: free
    assert usd("local:qwen2.5-coder-1.5b-instruct", 10, 10) is None and usd("python:x:y", 0, 0) == 0.0


def test_a_capped_run_with_the_memory_on_stays_stopped(tmp_path: Path) -> None:
    """The memory's update of the stored result keeps the run's status: a run stopped at a cap is recorded
    as stopped (not done), whatever else writes its result after."""
    p = _adapt(tmp_path, "--max-solver-tokens", "1", "--memory", "--memory-path", str(tmp_path / "mem.sqlite"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "stopped" in json.loads(p.stdout)
    c = sqlite3.connect(tmp_path / "run" / "runs.sqlite")
    assert c.execute("SELECT status FROM runs").fetchone()[0] == "stopped"
    c.close()
