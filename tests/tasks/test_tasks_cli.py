"""`harnesslearn tasks`: the listing, a spec preview, and bad input -> exit 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harnesslearn.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_tasks_json_lists_105_families_and_the_specs():
    r = _cli("tasks", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert len(info["reasoning_gym"]) == 105
    prefixes = {s["spec"].split(":")[0] for s in info["specs"]}
    assert {"rg", "musique", "hotpotqa", "2wiki", "jsonl"} <= prefixes
    assert len(info["family_sets"]["paper-eval"]) == 21


def test_preview_prints_one_json_object():
    r = _cli("tasks", "rg:basic_arithmetic?strict=1", "--n", "2", "--split", "score", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["family"] == "basic_arithmetic" and len(out["problems"]) == 2


@pytest.fixture
def bad_jsonl(tmp_path: Path) -> Path:
    f = tmp_path / "bad.jsonl"
    f.write_text('{"id": 1, "question": "q", "answer": "a"}\n{"id": 2,\n', encoding="utf-8")
    return f


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("rg:basic_arithmetc", "did you mean basic_arithmetic"),
        ("jsonl:/no/such/file.jsonl", "file not found"),
        ("jsonl:{bad}", "line 2"),
        ("rg:basic_arithmetic?min_terms=-1", "bad config"),
    ],
)
def test_bad_input_exits_2_with_one_line(spec, needle, bad_jsonl):
    r = _cli("tasks", spec.format(bad=bad_jsonl), "--json")
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr


def test_short_and_empty_splits_are_said(tmp_path: Path) -> None:
    """A split with fewer problems than asked is said in one line (the command goes on); an empty one is
    exit 2 with one line, for `tasks` and for `run` (before any solver is reached)."""
    from harnesslearn.tasks import load_task

    f = tmp_path / "few.jsonl"
    f.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                         for i in range(6)), encoding="utf-8")
    task = load_task(f"jsonl:{f}")
    sizes = {s: len(task.problems(s, 100, 0)) for s in ("feedback", "score", "test")}
    full = max(sizes, key=lambda s: sizes[s])
    r = _cli("tasks", f"jsonl:{f}", "--split", full, "--n", "50", "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)["problems"]) == sizes[full]
    assert f"holds {sizes[full]} problems (asked 50)" in r.stderr and r.stderr.count("\n") == 1, r.stderr

    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"id": "only", "question": "What is 1 + 1?", "answer": "2"}) + "\n", encoding="utf-8")
    t1 = load_task(f"jsonl:{one}")
    empty = next(s for s in ("feedback", "score", "test") if not t1.problems(s, 1, 0))
    for args in (("tasks", f"jsonl:{one}", "--split", empty),
                 ("run", "minimal", "--task", f"jsonl:{one}", "--split", empty, "--solver", "openai:x?base_url="
                  "http://127.0.0.1:9/v1")):
        r = _cli(*args, "--json")
        assert r.returncode == 2 and r.stdout == "", (args, r.stderr)
        assert f"the {empty} split" in r.stderr and "holds no problems" in r.stderr and r.stderr.count("\n") == 1
