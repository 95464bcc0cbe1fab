"""`harnesslearn adapt` on rg:gcd with scripted `python:` models, as a subprocess: the helper of the tests
that look at what a run records around it (spend caps, tracking). The solver answers "1"; the proposer's
revision depends on its seed (so candidates differ) and, with HL_CALLS set, each call is logged there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

MODELS = '''
import os

def solver(prompt, **kw):
    return "1"

def proposer(prompt, seed=0, **kw):
    if os.environ.get("HL_CALLS"):
        open(os.environ["HL_CALLS"], "a").write("p\\n")
    return "<<<<<<< SEARCH\\n    return completion.strip()\\n=======\\n    return completion.strip() + '%d'\\n>>>>>>> REPLACE\\n" % (seed % 7)
'''


def adapt(tmp_path: Path, *extra: str, rounds: int = 3, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    """One adapt run into ``tmp_path/run`` (models written to ``tmp_path/models.py``; proposer calls logged to
    ``tmp_path/calls``); ``extra`` options come last, so they win."""
    (tmp_path / "models.py").write_text(MODELS)
    m = f"python:{tmp_path / 'models.py'}"
    return subprocess.run([sys.executable, "-m", "harnesslearn.cli", "adapt", "--task", "rg:gcd", "--solver",
                           f"{m}:solver", "--proposer", f"{m}:proposer", "--rounds", str(rounds), "--candidates", "1",
                           "--n-feedback", "1", "--n-score", "2", "--n-test", "2", "--no-memory", "--run-dir",
                           str(tmp_path / "run"), "--json", *extra], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "HARNESSLEARN_PROGRESS": "0",
                                             "HL_CALLS": str(tmp_path / "calls"), **(env or {})})
