"""The CLI's failure contract, case by case (issue 11's probe): bad input is exit 2 with one line
on stderr, an infrastructure failure exit 1, never a traceback, and nothing half-written: no run
directory created, no store modified."""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

MODELS = '''
import time
from harnesslearn.errors import InfraError

def garbage(prompt, **kw):
    return "banana"

def down(prompt, **kw):
    raise InfraError("connection refused (the solver server is down)")

EDIT = """<<<<<<< SEARCH
    prompt = f"Question: {question}\\\\nAnswer:"
    completion = model(prompt, max_tokens=64, temperature=0.0, stop=["\\\\n"])
    return completion.strip()
=======
    import re
    a, b = re.findall(r"-?\\\\d+", question)[:2]
    return str(int(a) + int(b))
>>>>>>> REPLACE
"""

def compute(prompt, **kw):
    return EDIT

def flaky(prompt, **kw):  # raises while a file named "flag" sits beside this one
    import pathlib
    if pathlib.Path(__file__).with_name("flag").exists():
        raise RuntimeError("proposer exploded")
    return "no edit"

def slow(prompt, **kw):
    time.sleep(1.5)
    return "no edit"
'''

PROPOSAL = "<<<<<<< SEARCH\n    return completion.strip()\n=======\n    return completion.strip().rstrip('.')\n>>>>>>> REPLACE\n"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("clifail")
    rng = random.Random(0)
    with (d / "arith.jsonl").open("w") as f:
        for i in range(120):
            a, b = rng.randint(1, 99), rng.randint(1, 99)
            f.write(json.dumps({"id": f"q{i}", "question": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n")
    (d / "models.py").write_text(MODELS)
    (d / "proposal.txt").write_text(PROPOSAL)
    return {"dir": d, "task": d / "arith.jsonl", "models": d / "models.py", "proposal": d / "proposal.txt"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harnesslearn.cli", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HARNESSLEARN_PROGRESS": "0", "HARNESSLEARN_CACHE": "0"})


def adapt_args(env: dict[str, Path], run_dir: str | None, proposer: str = "garbage", *extra: str) -> list[str]:
    args = ["adapt", "--task", f"jsonl:{env['task']}", "--solver", f"python:{env['models']}:garbage",
            "--proposer", f"python:{env['models']}:{proposer}", "--n-feedback", "2", "--n-score", "3",
            "--n-test", "3", "--rounds", "1", "--candidates", "1", "--json", *extra]
    return args + (["--run-dir", run_dir] if run_dir is not None else [])


def one_line(p: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    """``p`` exited with ``code`` and said why in exactly one stderr line (no traceback)."""
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def digest(d: Path) -> str:
    """The store's content: the database and the harness files (``.lock`` only names the pid of
    the last process that opened the directory)."""
    h = hashlib.sha256()
    for p in sorted(x for x in d.rglob("*") if x.name != ".lock"):
        h.update(str(p.relative_to(d)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


# ---------------------------------------------------------------- unwritable outputs
@pytest.mark.parametrize("where", ["a_directory", "empty", "under_a_file", "read_only_fs"])
def test_edit_output_that_cannot_be_written_is_exit_2(env: dict[str, Path], tmp_path: Path, where: str) -> None:
    target = {"a_directory": str(tmp_path), "empty": "", "under_a_file": str(env["proposal"] / "out.py"),
              "read_only_fs": "/proc/harnesslearn-out.py"}[where]
    before = sorted(tmp_path.iterdir())
    p = cli("edit", "minimal", str(env["proposal"]), "--json", "-o", target)
    one_line(p, 2, "error")
    assert p.stdout == "" and sorted(tmp_path.iterdir()) == before  # no temporary file left behind


@pytest.mark.parametrize("where", ["under_a_file", "read_only_fs"])
def test_adapt_run_dir_that_cannot_be_created_is_exit_2(env: dict[str, Path], where: str) -> None:
    run_dir = {"under_a_file": str(env["proposal"] / "run"), "read_only_fs": "/proc/harnesslearn-run"}[where]
    one_line(cli(*adapt_args(env, run_dir)), 2, "cannot use run directory")
    assert not Path(run_dir).exists()


# ---------------------------------------------------------------- numbers out of range
@pytest.mark.parametrize("option,value", [
    ("--n-test", "1" + "0" * 30), ("--seed", "1" + "0" * 30), ("--seed", "-1"), ("--proposer-max-tokens", "-1"),
    ("--proposer-temperature", "-1"), ("--rounds", "1" + "0" * 30), ("--candidates", "0"), ("--timeout", "0"),
    ("--timeout", "1e30"), ("--concurrency", "0"), ("--strategy", "greedy"), ("--proposer-prime", "none"),
])
def test_adapt_option_out_of_range_is_exit_2_before_anything_is_written(env: dict[str, Path], option: str,
                                                                         value: str) -> None:
    rd = env["dir"] / f"range{option}{value[:3]}"
    one_line(cli(*adapt_args(env, str(rd)), option, value), 2, option)  # the last value of an option wins
    assert not rd.exists()


@pytest.mark.parametrize("args", [
    ["run", "minimal", "--n", "1000000000"], ["run", "minimal", "--concurrency", "1" + "0" * 30],
    ["run", "minimal", "--seed", "-1"], ["run", "minimal", "--timeout", "1e9"],
    ["tasks", "jsonl:TASK", "--n", "-1"], ["tasks", "jsonl:TASK", "--seed", "1" + "0" * 30],
])
def test_run_and_tasks_bounds_are_exit_2_at_once(env: dict[str, Path], args: list[str]) -> None:
    args = [a.replace("TASK", str(env["task"])) for a in args]
    if args[0] == "run":
        args += ["--task", f"jsonl:{env['task']}", "--solver", f"python:{env['models']}:garbage"]
    t = time.monotonic()
    one_line(cli(*args), 2)
    assert time.monotonic() - t < 30


# ---------------------------------------------------------------- run: infrastructure failure
def test_run_exits_1_when_every_problem_is_an_infrastructure_failure(env: dict[str, Path]) -> None:
    p = cli("run", "minimal", "--task", f"jsonl:{env['task']}", "--solver", f"python:{env['models']}:down",
            "--n", "3", "--json")
    one_line(p, 1, "infrastructure failure", "solver server is down")
    out = json.loads(p.stdout)  # the records still come out: nothing was scored 0
    assert out["J"] is None and out["status_counts"] == {"infra_error": 3}


# ---------------------------------------------------------------- run directories
def test_resume_without_run_dir_and_an_empty_run_dir_are_exit_2(env: dict[str, Path], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # restored afterwards: later tests use paths relative to the repository
    one_line(cli(*adapt_args(env, None, "garbage", "--resume")), 2, "--resume needs --run-dir")
    one_line(cli(*adapt_args(env, "")), 2, "--run-dir")
    one_line(cli("demo", "--resume", "--model", f"python:{env['models']}:garbage"), 2, "--run-dir")
    assert list(tmp_path.iterdir()) == []  # nothing written into the current directory


def test_two_adapt_on_one_run_dir_the_second_exits_2_at_once(env: dict[str, Path]) -> None:
    rd = env["dir"] / "locked"
    first = subprocess.Popen([sys.executable, "-m", "harnesslearn.cli", *adapt_args(env, str(rd), "slow")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "HARNESSLEARN_PROGRESS": "0"})
    deadline = time.monotonic() + 120
    while not (rd / "runs.sqlite").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    t = time.monotonic()
    second = cli(*adapt_args(env, str(rd), "slow", "--resume"))
    assert time.monotonic() - t < 20
    one_line(second, 2, "in use by another harnesslearn process")
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]
    assert json.loads(out)["proposals"] == 1


def test_resume_with_a_changed_setting_names_it(env: dict[str, Path]) -> None:
    rd = env["dir"] / "changed"
    assert cli(*adapt_args(env, str(rd))).returncode == 0
    before = digest(rd)
    one_line(cli(*adapt_args(env, str(rd), "garbage", "--resume", "--proposer-temperature", "0.5")), 2,
             "--proposer-temperature (recorded 0.8, now 0.5)")
    one_line(cli(*adapt_args(env, str(rd), "compute", "--resume")), 2, "proposer")
    assert digest(rd) == before


@pytest.fixture(scope="module")
def finished(env: dict[str, Path]) -> Path:
    """A finished run whose best harness is a revision (two harness files)."""
    rd = env["dir"] / "finished"
    p = cli(*adapt_args(env, str(rd), "compute"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert len(list((rd / "harnesses").glob("*.py"))) == 2
    return rd


@pytest.mark.parametrize("damage", ["truncated", "deleted", "edited"])
def test_resume_refuses_harness_files_that_do_not_match_their_ids(env: dict[str, Path], finished: Path,
                                                                 tmp_path: Path, damage: str) -> None:
    rd = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(finished), str(rd)], check=True)
    (rd / ".lock").unlink(missing_ok=True)
    victim = sorted((rd / "harnesses").glob("*.py"))[0]
    if damage == "truncated":
        victim.write_text(victim.read_text()[:20])
    elif damage == "deleted":
        victim.unlink()
    else:
        victim.write_text(victim.read_text() + "\n# changed\n")
    db = (rd / "runs.sqlite").read_bytes()
    one_line(cli(*adapt_args(env, str(rd), "compute", "--resume")), 2, victim.name[:12])
    assert (rd / "runs.sqlite").read_bytes() == db


@pytest.mark.parametrize("content", [b"", b"this is not sqlite at all" * 50])
def test_resume_on_a_corrupt_store_is_exit_2_and_leaves_it(env: dict[str, Path], tmp_path: Path,
                                                           content: bytes) -> None:
    rd = tmp_path / "corrupt"
    rd.mkdir()
    (rd / "runs.sqlite").write_bytes(content)
    one_line(cli(*adapt_args(env, str(rd), "garbage", "--resume")), 2, "runs.sqlite")
    assert (rd / "runs.sqlite").read_bytes() == content
    assert sorted(x.name for x in rd.iterdir()) == ["runs.sqlite"]


def test_report_on_an_empty_store_is_exit_2_and_does_not_touch_it(tmp_path: Path) -> None:
    (tmp_path / "runs.sqlite").write_bytes(b"")
    one_line(cli("report", str(tmp_path)), 2, "empty")
    assert (tmp_path / "runs.sqlite").read_bytes() == b""
    assert sorted(x.name for x in tmp_path.iterdir()) == ["runs.sqlite"]


def test_store_with_another_schema_is_refused_untouched(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE other (x)")
    c.commit()
    c.close()
    before = db.read_bytes()
    one_line(cli("report", str(tmp_path)), 2, "not a harnesslearn run store")
    assert db.read_bytes() == before


# ---------------------------------------------------------------- a proposer that raises
def test_a_python_proposer_that_raises_is_an_infrastructure_failure_and_resumable(env: dict[str, Path]) -> None:
    rd = env["dir"] / "boom"
    flag = env["models"].with_name("flag")
    flag.write_text("x")
    try:
        line = one_line(cli(*adapt_args(env, str(rd), "flaky")), 1, "infrastructure failure", "RuntimeError",
                        "proposer exploded", "--resume")
    finally:
        flag.unlink()
    assert "round 1 candidate 0" in line
    c = sqlite3.connect(rd / "runs.sqlite")
    assert c.execute("SELECT COUNT(*) FROM proposals").fetchone()[0] == 0  # nothing recorded for it
    assert c.execute("SELECT status FROM runs").fetchone()[0] == "running"
    c.close()
    p = cli(*adapt_args(env, str(rd), "flaky", "--resume"))  # the cause fixed: the same run goes on
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["proposals"] == 1


def test_run_against_a_solver_server_that_is_down_exits_1(env: dict[str, Path]) -> None:
    """A real openai: backend against a closed port: retried, then infra_error on every problem:
    exit 1 with one line (before: exit 0, J null, nothing on stderr)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    t = time.monotonic()
    p = cli("run", "minimal", "--task", f"jsonl:{env['task']}", "--n", "2", "--json",
            "--solver", "openai:gemma?timeout=2&max_retries=1&base_delay=0.01&max_delay=0.02",
            "--solver-base-url", f"http://127.0.0.1:{port}/v1")
    one_line(p, 1, "infrastructure failure")
    assert json.loads(p.stdout)["status_counts"] == {"infra_error": 2}
    assert time.monotonic() - t < 120
