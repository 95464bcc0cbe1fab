"""`harnesslearn edit` and the CLI's error contract (one line on stderr, exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harnesslearn.harness import harness_id, seed_source


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harnesslearn.cli", *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def test_edit_valid_writes_output(tmp_path: Path):
    prop = tmp_path / "p.txt"
    prop.write_text("<<<<<<< SEARCH\n    return completion.strip()\n=======\n    return completion.strip().rstrip('.')\n>>>>>>> REPLACE\n")
    out = tmp_path / "new.py"
    r = cli("edit", "minimal", str(prop), "--json", "-o", str(out))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["valid"] and d["parsed"] and d["produced"] and d["reason"] is None
    assert d["harness_id"] == harness_id(d["source"]) == harness_id(out.read_text())
    assert d["parent_id"] == harness_id(seed_source("minimal"))


def test_edit_invalid_exit_3_and_nothing_written(tmp_path: Path):
    prop = tmp_path / "p.txt"
    prop.write_text("<<<<<<< SEARCH\nnot in the harness\n=======\nx\n>>>>>>> REPLACE\n")
    out = tmp_path / "new.py"
    r = cli("edit", "minimal", str(prop), "--json", "-o", str(out))
    assert r.returncode == 3
    d = json.loads(r.stdout)
    assert d == {**d, "valid": False, "reason": "not_found", "parsed": True, "produced": False, "source": None}
    assert not out.exists()


def test_edit_from_stdin_human_output():
    r = cli("edit", "minimal", "-", stdin="no blocks here")
    assert r.returncode == 3 and "no_blocks" in r.stdout


def _one_line_exit_2(r: subprocess.CompletedProcess[str]) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stdout == ""


def test_missing_harness_file(tmp_path: Path):
    p = tmp_path / "p.txt"
    p.write_text("x")
    _one_line_exit_2(cli("edit", str(tmp_path / "nope.py"), str(p)))


def test_missing_proposal_file(tmp_path: Path):
    _one_line_exit_2(cli("edit", "minimal", str(tmp_path / "nope.txt")))


def test_invalid_harness_file(tmp_path: Path):
    h = tmp_path / "h.py"
    h.write_text("def solve(model):\n    return 'x'\n")
    p = tmp_path / "p.txt"
    p.write_text("x")
    _one_line_exit_2(cli("edit", str(h), str(p)))


def test_unknown_option():
    _one_line_exit_2(cli("edit", "minimal", "-", "--frobnicate"))


def test_unknown_command():
    _one_line_exit_2(cli("frobnicate"))


def test_edit_a_noop_proposal_exits_3_with_no_change(tmp_path: Path):
    """Issue 24: REPLACE equal to SEARCH is not a revision."""
    line = "    return completion.strip()"
    p = tmp_path / "noop.txt"
    p.write_text(f"<<<<<<< SEARCH\n{line}\n=======\n{line}\n>>>>>>> REPLACE\n")
    r = cli("edit", "minimal", str(p), "--json", "-o", str(tmp_path / "out.py"))
    assert r.returncode == 3, r.stderr
    out = json.loads(r.stdout)
    assert out["valid"] is False and out["reason"] == "no_change" and not (tmp_path / "out.py").exists()


def test_edit_a_3000_deep_expression_is_an_invalid_edit_not_a_traceback(tmp_path: Path):
    """Issue 23: nesting that the parser cannot take is a syntax error of the proposal."""
    deep = "-" * 3000 + "1"
    p = tmp_path / "deep.txt"
    p.write_text(f"<<<<<<< SEARCH\n    return completion.strip()\n=======\n    return {deep}\n>>>>>>> REPLACE\n")
    r = cli("edit", "minimal", str(p), "--json")
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert json.loads(r.stdout)["reason"] == "syntax_error"
