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
