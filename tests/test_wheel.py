"""A wheel and an sdist a user could publish: built (python -m build), checked (twine check), installed into a
fresh virtual environment with no apt packages and no llama.cpp, where the command answers, lists the
tasks, and runs a scripted adapt without a sandbox (as on macOS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS = "def solver(prompt, **kw):\n    return '1'\n\ndef proposer(prompt, **kw):\n    return 'no edit'\n"


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)  # type: ignore[call-overload]


@pytest.mark.slow
def test_the_wheel_installs_alone_and_runs(tmp_path: Path) -> None:
    pytest.importorskip("build")
    dist = tmp_path / "dist"
    b = _run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(dist), str(ROOT)])
    assert b.returncode == 0, b.stderr[-3000:]
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    t = _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, wheels + sdists)])
    assert t.returncode == 0, t.stdout[-2000:] + t.stderr[-2000:]

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}  # nothing of this checkout
    i = _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheels[0])], env=clean)
    assert i.returncode == 0, i.stderr[-3000:]
    freeze = _run([str(py), "-m", "pip", "freeze"], env=clean).stdout.lower()
    assert "harnesslearn" in freeze and "llama" not in freeze and "torch" not in freeze  # core: no engine

    hl = [str(env_dir / "bin" / "harnesslearn")]
    assert _run([*hl, "--help"], env=clean).returncode == 0
    tasks = _run([*hl, "tasks", "--json"], env=clean)
    assert tasks.returncode == 0 and len(json.loads(tasks.stdout)["reasoning_gym"]) == 105, tasks.stderr[-2000:]
    (tmp_path / "models.py").write_text(MODELS)
    m = f"python:{tmp_path / 'models.py'}"
    a = _run([*hl, "adapt", "--task", "rg:gcd", "--solver", f"{m}:solver", "--proposer", f"{m}:proposer",
              "--rounds", "1", "--candidates", "1", "--n-feedback", "1", "--n-score", "1", "--n-test", "1",
              "--no-memory", "--unsafe-no-sandbox", "--run-dir", str(tmp_path / "run"), "--json"],
             env={**clean, "HARNESSLEARN_PROGRESS": "0", "HARNESSLEARN_CACHE_DIR": str(tmp_path / "cache")},
             cwd=tmp_path)
    assert a.returncode == 0, a.stderr[-3000:]
    assert json.loads(a.stdout)["proposals"] == 1
