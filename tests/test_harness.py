"""Harness files: what counts as a harness (a top-level solve(model, question) that stays the module's
solve), and how a file is read (a UTF-8 BOM, as Python accepts it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harnesslearn.errors import UserError
from harnesslearn.harness import check_source, load_harness, seed_source

OK = "def solve(model, question):\n    return model(question)\n"


@pytest.mark.parametrize("tail", [
    "solve = None\n", "solve: int = 3\n", "import os as solve\n", "from os import path as solve\n",
    "class solve:\n    pass\n", "del solve\n", "for solve in range(2):\n    pass\n",
    "with open(__file__) as solve:\n    pass\n", "solve, x = 1, 2\n",
])
def test_solve_rebound_after_its_def_is_not_a_harness(tail: str) -> None:
    assert check_source(OK + tail) == "missing_solve"


def test_solve_used_or_redefined_as_a_function_stays_a_harness() -> None:
    assert check_source(OK + "x = solve\nprint(solve)\n") is None
    assert check_source("solve = None\n" + OK) is None  # bound before: the def is the module's solve
    assert check_source(OK + "def helper():\n    solve = 2\n    return solve\n") is None  # a local name
    assert check_source(OK + OK.replace("return model(question)", "return 'x'")) is None  # the last def counts


def test_a_utf8_bom_is_accepted_and_not_part_of_the_harness(tmp_path: Path) -> None:
    f = tmp_path / "bom.py"
    f.write_bytes(b"\xef\xbb\xbf" + seed_source("minimal").encode())
    h = load_harness(str(f))
    assert not h.source.startswith("\ufeff") and h.id == load_harness("minimal").id
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "run", str(f), "--task", "rg:gcd", "--solver",
                        "python:harnesslearn.transfer.smoke:solver", "--n", "1", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and '"harness_error"' not in p.stdout, p.stderr[-1500:]


def test_a_rebound_solve_file_is_refused_in_one_line(tmp_path: Path) -> None:
    f = tmp_path / "rebound.py"
    f.write_text(OK + "solve = 'not a function'\n")
    with pytest.raises(UserError, match="invalid harness .*missing solve"):
        load_harness(str(f))
