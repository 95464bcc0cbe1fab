"""`harnesslearn train sft-data` with a scripted `python:` teacher: improved and screened revisions
are kept with provenance, the others are counted by why they were dropped."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TEACHER = r'''
COMPUTE = """<<<<<<< SEARCH
    return completion.strip()
=======
    return str(eval(question.split(":")[-1]))
>>>>>>> REPLACE
"""
REWORD = """<<<<<<< SEARCH
    prompt = f"Question: {question}\\nAnswer:"
=======
    prompt = f"Q: {question}\\nA:"
>>>>>>> REPLACE
"""
NETWORK = """<<<<<<< SEARCH
    return completion.strip()
=======
    import socket
    return str(eval(question.split(":")[-1]))
>>>>>>> REPLACE
"""


def teach(prompt, seed=0, **kw):
    return [COMPUTE, REWORD, NETWORK][seed % 3]
'''


@pytest.mark.parametrize("executor", [
    "local",
    pytest.param("ray", marks=pytest.mark.skipif(importlib.util.find_spec("ray") is None and not os.environ.get("CI"),
                                                 reason="needs the ray extra")),
])
def test_sft_data_keeps_improved_screened_revisions(tmp_path: Path, executor: str) -> None:
    rows = [{"id": f"q{i}", "question": f"Compute: {i} + {i + 3}", "answer": str(2 * i + 3)} for i in range(200)]
    (tmp_path / "arith.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "solver.py").write_text("def solve(prompt, **kw):\n    return '0'\n")
    (tmp_path / "teacher.py").write_text(TEACHER)
    cfg = tmp_path / "sft_data.yaml"
    cfg.write_text(
        f"teacher: python:{tmp_path / 'teacher.py'}:teach\n"
        f"solver: python:{tmp_path / 'solver.py'}:solve\n"
        f"families: ['jsonl:{tmp_path / 'arith.jsonl'}?scorer=exact']\n"
        "contexts_per_family: 2\ncandidates: 3\nsplits: {n_feedback: 2, n_score: 3}\nproposer: {n_traces: 1}\nseed: 1\n"
        f"out: {tmp_path / 'sft.jsonl'}\nrun_dir: {tmp_path / 'run'}\n"
    )
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "train", "sft-data", "--config", str(cfg), "--json",
                        "--executor", executor], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    # propose() samples candidate i with seed pseed + i, pseed = child_seed(seed=1, context): per context the
    # three scripted revisions come in some rotation, one of each kind
    assert out["contexts"] == 2 and out["candidates"] == 6
    assert out["kept"] == 2
    assert out["kinds"]["interpreter_loop"] == 2 and out["kind_share"]["interpreter_loop"] == 1.0
    assert out["rejections"] == {"not_improved": 2, "screen:forbidden_import": 2}
    lines = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    for line in lines:
        user, assistant = line["messages"]
        assert user["role"] == "user" and user["content"].endswith("<<<<<<< SEARCH\n")
        assert assistant["role"] == "assistant" and not assistant["content"].startswith("<<<<<<< SEARCH")
        prov = line["provenance"]
        assert prov["J_before"] == 0.0 and prov["J_after"] == 1.0 and prov["kind"] == "interpreter_loop"
        assert prov["teacher"].startswith("python:") and prov["family"]


def _world(tmp_path: Path, solver: str = "return '0'", teacher: str = TEACHER, **extra: str) -> Path:
    rows = [{"id": f"q{i}", "question": f"Compute: {i} + {i + 3}", "answer": str(2 * i + 3)} for i in range(60)]
    (tmp_path / "arith.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "solver.py").write_text(f"from harnesslearn.errors import InfraError\n\ndef solve(prompt, **kw):\n"
                                        f"    {solver}\n")
    (tmp_path / "teacher.py").write_text(teacher)
    cfg = tmp_path / "sft_data.yaml"
    keys = {"teacher": f"python:{tmp_path / 'teacher.py'}:teach", "solver": f"python:{tmp_path / 'solver.py'}:solve",
            "families": f"['jsonl:{tmp_path / 'arith.jsonl'}?scorer=exact']", "contexts_per_family": "1",
            "candidates": "1", "splits": "{n_feedback: 2, n_score: 3}", "out": str(tmp_path / "sft.jsonl"),
            "run_dir": str(tmp_path / "run"), **extra}
    cfg.write_text("".join(f"{k}: {v}\n" for k, v in keys.items()))
    return cfg


def _cli(cfg: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harnesslearn.cli", "train", "sft-data", "--config", str(cfg), "--json"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HARNESSLEARN_PROGRESS": "0"})


@pytest.mark.parametrize("case, code, needle", [
    ("solver_down", 1, "infrastructure failure"),
    ("teacher_raises", 1, "the teacher"),
    ("out_is_a_folder", 2, "is a folder"),
    ("finished_run_dir", 2, "already holds an sft-data run"),
])
def test_sft_data_failures_are_one_line_and_lose_nothing(tmp_path: Path, case: str, code: int, needle: str) -> None:
    """A dead solver is exit 1, not 0 with "kept 0"; a teacher that raises is one line, not a traceback; an
    output that is a folder is refused before any work (and no .tmp is left); a run_dir that already holds
    an sft-data run is refused in one line, not an IntegrityError."""
    cfg = _world(tmp_path, solver="raise InfraError('connection refused')" if case == "solver_down" else "return '0'",
                 teacher="def teach(prompt, **kw):\n    raise RuntimeError('teacher exploded')\n"
                 if case == "teacher_raises" else TEACHER)
    if case == "out_is_a_folder":
        (tmp_path / "sft.jsonl").mkdir()
    if case == "finished_run_dir":
        first = _cli(cfg)
        assert first.returncode == 0, first.stderr[-2000:]
        before = (tmp_path / "sft.jsonl").read_bytes()
    p = _cli(cfg)
    assert p.returncode == code and p.stdout == "", (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], p.stderr[-2000:]
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob("sft.jsonl.*"))
    if case == "finished_run_dir":
        assert (tmp_path / "sft.jsonl").read_bytes() == before
