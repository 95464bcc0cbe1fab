"""Every command that runs harnesses takes the same isolation options: --isolation CHOICE and
--unsafe-no-sandbox (= --isolation none, for a machine without bubblewrap or Landlock), and warns on every
unsandboxed run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

COMMANDS = (["run"], ["zoo"], ["adapt"], ["demo"], ["memory", "add-zoo"])
SOLVER = "python:harnesslearn.transfer.smoke:solver"


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harnesslearn.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={**os.environ, "HARNESSLEARN_PROGRESS": "0"})


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_harness_running_command_has_both_options(command: list[str]) -> None:
    h = _cli(*command, "--help")
    assert h.returncode == 0 and "--isolation" in h.stdout and "--unsafe-no-sandbox" in h.stdout, h.stdout[-1500:]


def test_adapt_runs_unsandboxed_with_the_warning(tmp_path: Path) -> None:
    p = _cli("adapt", "--task", "rg:gcd", "--solver", SOLVER, "--proposer", SOLVER, "--rounds", "1", "--candidates",
             "1", "--n-feedback", "1", "--n-score", "1", "--n-test", "1", "--no-memory", "--unsafe-no-sandbox",
             "--run-dir", str(tmp_path / "run"), "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["proposals"] == 1
    assert "WITHOUT a sandbox" in p.stderr, p.stderr[-1500:]


@pytest.mark.parametrize("command", [["run", "minimal", "--task", "rg:gcd", "--solver", SOLVER],
                                     ["zoo", "--task", "rg:gcd", "--solver", SOLVER],
                                     ["adapt", "--task", "rg:gcd", "--solver", SOLVER, "--proposer", SOLVER]],
                         ids=lambda c: c[0])
def test_contradicting_isolation_options_are_exit_2_before_anything_runs(command: list[str], tmp_path: Path) -> None:
    p = _cli(*command, "--isolation", "bwrap", "--unsafe-no-sandbox", cwd=tmp_path)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
    assert "contradicts" in p.stderr and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", [["run", "minimal", "--task", "rg:gcd", "--solver", SOLVER, "--n", "1"],
                                     ["zoo", "--task", "rg:gcd", "--solver", SOLVER, "--only", "interpreter_loop",
                                      "--n-score", "1", "--n-test", "1"],
                                     ["adapt", "--task", "rg:gcd", "--solver", SOLVER, "--proposer", SOLVER,
                                      "--rounds", "1", "--candidates", "1", "--n-feedback", "1", "--n-score", "1",
                                      "--n-test", "1", "--no-memory"]],
                         ids=lambda c: c[0])
def test_isolation_auto_with_unsafe_no_sandbox_is_taken_alike_by_every_command(command: list[str],
                                                                              tmp_path: Path) -> None:
    """adapt took the pair (auto is its settings' default) while run and zoo refused it: one rule now."""
    p = _cli(*command, "--isolation", "auto", "--unsafe-no-sandbox", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-1500:]
    assert "WITHOUT a sandbox" in p.stderr
