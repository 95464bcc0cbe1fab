"""The README's commands can't drift from the CLI (STYLE.md: simonw/llm's `cog --check`)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def code_lines() -> list[str]:
    blocks = re.findall(r"```(?:bash)?\n(.*?)```", README, flags=re.S)
    lines: list[str] = []
    for block in blocks:
        joined = block.replace("\\\n", " ")
        lines += [ln.split("#")[0].strip() for ln in joined.splitlines() if ln.strip()]
    return [ln for ln in lines if ln]


def test_readme_starts_with_the_two_setup_commands():
    first_two = code_lines()[:2]
    assert first_two == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "harnesslearn demo" in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text()


HARNESSLEARN_LINES = [ln for ln in code_lines() if re.match(r"^(\.venv/bin/)?harnesslearn\s", ln)]


def test_readme_has_harnesslearn_examples():
    assert len(HARNESSLEARN_LINES) >= 4


@pytest.mark.parametrize("line", HARNESSLEARN_LINES)
def test_readme_command_options_exist(line: str):
    words = shlex.split(line)[1:]
    sub: list[str] = []
    for w in words:
        if w.startswith("-"):
            break
        sub.append(w)
        if w in ("tasks", "run", "edit", "adapt", "report", "demo", "models", "sft", "sft-data", "grpo"):
            break
    r = subprocess.run([sys.executable, "-m", "harnesslearn.cli", *sub, "--help"], capture_output=True, text=True,
                       timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, (sub, r.stderr)
    for opt in (w.split("=")[0] for w in words if w.startswith("--")):
        assert opt in r.stdout, f"README uses {opt} but `harnesslearn {' '.join(sub)} --help` lacks it"
