"""The examples a user copies (examples/): both run, with their scripted models, as a user would run them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HARNESSLEARN_PROGRESS": "0"}


def test_the_python_example_lifts_test_j_with_the_users_metric() -> None:
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "custom_task.py")], capture_output=True, text=True,
                       timeout=300, env=ENV)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out == {"seed_test_J": 0.5, "test_J": 1.0, "valid_proposals": 2}  # partial credit, then full


def test_the_cli_recipe_runs_adapt_and_report(tmp_path: Path) -> None:
    hl = f"{sys.executable} -m harnesslearn.cli"
    p = subprocess.run(["bash", str(ROOT / "examples" / "cli_recipe.sh"), str(tmp_path / "run")], capture_output=True,
                       text=True, timeout=300, env={**ENV, "HL": hl})
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert (out["seed_test_J"], out["test_J"]) == (0.5, 1.0)
    assert (tmp_path / "run" / "report.html").is_file()


def test_a_command_as_the_proposer(tmp_path: Path) -> None:
    """examples/agent_proposer.py: the prompt goes to the command on stdin; what it prints is the proposal."""
    agent = tmp_path / "agent.py"
    agent.write_text("import sys\nprompt = sys.stdin.read()\nassert 'def solve' in prompt\n"
                     "print('<<<<<<< SEARCH\\n    return completion.strip()\\n=======\\n'\n"
                     "      '    import re\\n    numbers = re.findall(r\"-?\\\\d+\", completion)\\n'\n"
                     "      '    return numbers[-1] if numbers else completion.strip()\\n>>>>>>> REPLACE')\n")
    hl = [sys.executable, "-m", "harnesslearn.cli"]
    p = subprocess.run([*hl, "adapt", "--task", f"jsonl:{ROOT / 'examples/data/sums.jsonl'}?scorer="
                        f"{ROOT / 'examples/score.py'}:grade", "--solver", f"python:{ROOT / 'examples/models.py'}:solver",
                        "--proposer", f"python:{ROOT / 'examples/agent_proposer.py'}:propose", "--rounds", "1",
                        "--candidates", "1", "--n-feedback", "2", "--n-score", "4", "--n-test", "4", "--no-memory",
                        "--run-dir", str(tmp_path / "run"), "--json"], capture_output=True, text=True, timeout=300,
                       env={**ENV, "HL_AGENT_CMD": f"{sys.executable} {agent}"})
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["valid_proposals"] == 1 and out["test_J"] == 1.0
    fail = subprocess.run([*hl, "adapt", "--task", "rg:gcd", "--solver", f"python:{ROOT / 'examples/models.py'}:solver",
                           "--proposer", f"python:{ROOT / 'examples/agent_proposer.py'}:propose", "--rounds", "1",
                           "--candidates", "1", "--n-feedback", "1", "--n-score", "1", "--n-test", "1", "--no-memory",
                           "--run-dir", str(tmp_path / "run2"), "--json"], capture_output=True, text=True, timeout=300,
                          env={**ENV, "HL_AGENT_CMD": "false"})
    assert fail.returncode == 1 and "infrastructure failure" in fail.stderr, fail.stderr[-1000:]
