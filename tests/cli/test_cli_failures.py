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

def sleepy(prompt, **kw):  # a solver that keeps every sandbox slot busy for a second
    time.sleep(1.0)
    return "1"

def huge(prompt, **kw):  # an edit whose harness is over the 1 MiB a worker frame allows
    return EDIT.replace("    import re", "    _pad = '" + "x" * 1_200_000 + "'; import re")
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
    ("--timeout", "1e30"), ("--concurrency", "0"), ("--strategy", "greedy"), ("--proposer-format", "none"),
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
    one_line(cli(*adapt_args(env, str(rd), "garbage", "--resume", "--timeout", "30")), 2,
             "--timeout (recorded 60.0, now 30.0)")
    one_line(cli(*adapt_args(env, str(rd), "garbage", "--resume", "--n-test", "4")), 2, "--n-test (recorded 3, now 4)")
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


# ---------------------------------------------------------------- issue 23: the second probe
def interrupt(args: list[str], after: Path | float) -> subprocess.CompletedProcess[str]:
    """Run the CLI and send it SIGINT once ``after`` exists (then 2 s more) or after ``after`` seconds."""
    import signal

    p = subprocess.Popen([sys.executable, "-m", "harnesslearn.cli", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "HARNESSLEARN_PROGRESS": "0"})
    if isinstance(after, Path):
        deadline = time.monotonic() + 120
        while not after.exists() and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        time.sleep(2.0)
    else:
        time.sleep(after)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


@pytest.mark.parametrize("after", [2.5, 4.0, 6.0])
def test_ctrl_c_during_run_is_exit_130_and_one_line(env: dict[str, Path], after: float) -> None:
    """Before: up to 272 lines of 'Task exception was never retrieved' (refills after the loop's executor
    closed), and never the CLI's own line. Sent at different moments: starting, running, refilling."""
    p = interrupt(["run", "minimal", "--task", f"jsonl:{env['task']}", "--solver",
                   f"python:{env['models']}:sleepy", "--n", "27", "--concurrency", "4"], after)
    one_line(p, 130, "interrupted")


def assert_intact_then_resumed(env: dict[str, Path], rd: Path, proposals: int, proposer: str, *args: str) -> None:
    """The interrupted run's database passes SQLite's integrity check and ``--resume`` finishes it."""
    c = sqlite3.connect(rd / "runs.sqlite")
    assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    c.close()
    done = cli(*adapt_args(env, str(rd), proposer, *args, "--resume"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["proposals"] == proposals


def test_ctrl_c_during_adapt_then_resume_finishes(env: dict[str, Path]) -> None:
    rd = env["dir"] / "interrupted"
    p = interrupt(adapt_args(env, str(rd), "slow", "--candidates", "2", "--rounds", "2"), rd / "runs.sqlite")
    one_line(p, 130, "interrupted")
    assert_intact_then_resumed(env, rd, 4, "slow", "--candidates", "2", "--rounds", "2")


HANGING_SCORER = """
import pathlib, time

def grade(answer, problem):  # hangs while a file named "hang" sits beside this one
    while pathlib.Path(__file__).with_name("hang").exists():
        time.sleep(0.05)
    return float(answer.strip() == problem.answer)
"""


def test_ctrl_c_ends_a_run_whose_scorer_hangs_and_resume_finishes_it(env: dict[str, Path], tmp_path: Path) -> None:
    """Issue 65, item 4: a user scorer runs in the trusted process; before, one that hangs blocked the event loop and
    every Ctrl-C with it (only SIGTERM/SIGKILL ended the run). Now it runs off the loop: exit 130 within 10 s."""
    import signal

    (tmp_path / "hang.py").write_text(HANGING_SCORER)
    (tmp_path / "hang").touch()
    rd = tmp_path / "run"
    args = adapt_args(env, str(rd), "compute")
    args[args.index("--task") + 1] = f"jsonl:{env['task']}?scorer={tmp_path / 'hang.py'}:grade"
    p = subprocess.Popen([sys.executable, "-m", "harnesslearn.cli", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "HARNESSLEARN_PROGRESS": "0"},
                         start_new_session=True)
    deadline = time.monotonic() + 120
    while not (rd / "runs.sqlite").exists() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    time.sleep(3.0)  # the seed's first answers are being scored: the scorer hangs
    os.killpg(p.pid, signal.SIGINT)
    try:
        out, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        pytest.fail("Ctrl-C did not end the run within 10 s")
    one_line(subprocess.CompletedProcess(p.args, p.returncode, out, err), 130, "interrupted")
    (tmp_path / "hang").unlink()
    done = cli(*args, "--resume")
    assert done.returncode == 0 and json.loads(done.stdout)["proposals"] == 1, done.stderr[-2000:]


LOUD = """
import os, sys
print("importing loud")

def solver(prompt, **kw):
    print("solver says hi")
    os.write(1, b"raw fd 1 from the solver\\n")
    return "1"

def grade(answer, problem):
    print("scorer says hi")
    sys.stdout.write("scorer again\\n")
    return 0.5
"""


def test_json_output_is_one_object_even_when_user_code_prints(env: dict[str, Path], tmp_path: Path) -> None:
    """Issue 65, item 5: a custom scorer's and a python: model's prints (through sys.stdout and fd 1) landed on
    stdout before the JSON object. Now user code's output goes to stderr for the whole command."""
    (tmp_path / "loud.py").write_text(LOUD)
    loud = tmp_path / "loud.py"
    p = cli("run", "minimal", "--task", f"jsonl:{env['task']}?scorer={loud}:grade", "--solver", f"python:{loud}:solver",
            "--n", "2", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count("\n") == 1 and json.loads(p.stdout)["J"] == 0.5, p.stdout[:500]
    for said in ("importing loud", "solver says hi", "raw fd 1 from the solver", "scorer says hi", "scorer again"):
        assert said in p.stderr, said


def test_a_full_disk_mid_adapt_is_one_line_exit_1_and_resumable(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A real SQLITE_FULL ("database or disk is full"): the store's database may not grow past its first
    pages. Before: a traceback from the store's COMMIT. The run is then resumed with room and finishes."""
    from harnesslearn import cli as cli_mod
    from harnesslearn.store import Store

    monkeypatch.setenv("HARNESSLEARN_PROGRESS", "0")
    monkeypatch.setenv("HARNESSLEARN_CACHE", "0")
    rd = env["dir"] / "full"
    real_open = Store.open.__func__  # type: ignore[attr-defined]

    def cramped(cls: type[Store], *a: object, **kw: object) -> Store:
        store = real_open(cls, *a, **kw)
        pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
        store.conn.execute(f"PRAGMA max_page_count = {pages + 2}")
        return store

    monkeypatch.setattr(Store, "open", classmethod(cramped))
    with pytest.raises(SystemExit) as e:
        cli_mod.main(adapt_args(env, str(rd), "compute", "--n-score", "20", "--n-test", "40"))
    err = capsys.readouterr().err
    assert e.value.code == 1 and len(err.strip().splitlines()) == 1, err[-2000:]
    assert "disk full" in err and "Traceback" not in err
    monkeypatch.undo()
    assert_intact_then_resumed(env, rd, 1, "compute", "--n-score", "20", "--n-test", "40")


def test_run_dir_naming_a_regular_file_says_so(env: dict[str, Path]) -> None:
    f = env["dir"] / "a-file"
    f.write_text("x")
    one_line(cli(*adapt_args(env, str(f))), 2, "is a file, not a directory")
    one_line(cli(*adapt_args(env, str(f), "garbage", "--resume")), 2, "is a file, not a directory")
    assert f.read_text() == "x"


@pytest.mark.parametrize("shape", ["json_list", "jsonl"])
def test_a_task_file_nested_too_deeply_names_the_file(tmp_path: Path, shape: str) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    if shape == "json_list":
        (tmp_path / "t.json").write_text(deep)
        p = cli("tasks", f"jsonl:{tmp_path / 't.json'}")
        one_line(p, 2, "t.json", "nested too deeply")
    else:
        (tmp_path / "t.jsonl").write_text('{"id": "a", "question": "q", "answer": "1"}\n' + deep + "\n")
        p = cli("tasks", f"jsonl:{tmp_path / 't.jsonl'}")
        one_line(p, 2, "t.jsonl", "line 2", "nested too deeply")


def test_a_harness_file_nested_too_deeply_is_refused(env: dict[str, Path], tmp_path: Path) -> None:
    h = tmp_path / "deep.py"
    h.write_text("def solve(model, question):\n    return " + "-" * 100_000 + "1\n")
    rd = tmp_path / "rd"
    one_line(cli(*adapt_args(env, str(rd), "garbage", "--harness", str(h))), 2, "deep.py", "syntax error")
    assert not rd.exists()


def test_oversize_inputs_are_refused_or_invalid_not_infrastructure_failures(env: dict[str, Path],
                                                                           tmp_path: Path) -> None:
    """Before: a 10 MB harness was exit 1 'resumable' and left a 9.8 MB run dir; an edit to a 9 MB harness
    failed every --resume again; a 20 MB question was silently left out of J."""
    big = tmp_path / "big.py"
    big.write_text("def solve(model, question):\n    return '1'\n# " + "x" * 10_000_000 + "\n")
    rd = tmp_path / "rd"
    one_line(cli(*adapt_args(env, str(rd), "garbage", "--harness", str(big))), 2, "big.py", "too large")
    one_line(cli("run", str(big), "--task", f"jsonl:{env['task']}", "--solver", f"python:{env['models']}:garbage",
                 "--n", "2"), 2, "too large")
    assert not rd.exists()
    q = tmp_path / "q.jsonl"
    q.write_text('{"id": "small", "question": "1 + 1?", "answer": "2"}\n'
                 + json.dumps({"id": "huge-q", "question": "y" * (5 << 20), "answer": "1"}) + "\n")
    one_line(cli("run", "minimal", "--task", f"jsonl:{q}", "--solver", f"python:{env['models']}:garbage",
                 "--n", "2"), 2, "huge-q", "MiB")
    rd2 = tmp_path / "rd2"
    p = cli(*adapt_args(env, str(rd2), "huge"))  # the proposal is invalid for its size; the run finishes
    assert p.returncode == 0, p.stderr[-2000:]
    c = sqlite3.connect(rd2 / "runs.sqlite")
    assert [r[0] for r in c.execute("SELECT reason FROM proposals")] == ["too_large"]
    c.close()


def test_split_sizes_larger_than_the_file_record_what_ran(env: dict[str, Path]) -> None:
    rd = env["dir"] / "small-file"
    p = cli(*adapt_args(env, str(rd))[:-2], "--n-feedback", "100000", "--run-dir", str(rd))
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [x for x in p.stderr.splitlines() if "fewer problems than asked" in x]
    assert len(lines) == 1 and "feedback" in lines[0] and "asked 100000" in lines[0], p.stderr
    c = sqlite3.connect(rd / "runs.sqlite")
    ns = {n for (n,) in c.execute("SELECT n FROM evaluations WHERE split = 'feedback'")}
    config = json.loads(c.execute("SELECT config FROM runs").fetchone()[0])
    ran = c.execute("SELECT COUNT(*) FROM problem_records pr JOIN evaluations e ON pr.evaluation_id = e.id "
                    "WHERE e.split = 'feedback'").fetchone()[0]
    c.close()
    assert ns == {ran} and config["splits.n_feedback"] == ran < 100000
    again = cli(*adapt_args(env, str(rd))[:-2], "--n-feedback", "100000", "--run-dir", str(rd), "--resume")
    assert again.returncode == 0, again.stderr[-2000:]  # the same asking resumes the same run


def test_a_cache_folder_that_is_a_file_is_exit_2_for_an_openai_solver(env: dict[str, Path], tmp_path: Path) -> None:
    f = tmp_path / "cache-file"
    f.write_text("x")
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "run", "minimal", "--task", f"jsonl:{env['task']}",
                        "--n", "2", "--solver", "openai:gemma?timeout=2&max_retries=0",
                        "--solver-base-url", "http://127.0.0.1:9/v1"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HARNESSLEARN_PROGRESS": "0", "HARNESSLEARN_CACHE_DIR": str(f)})
    one_line(p, 2, str(f), "HARNESSLEARN_CACHE=0")


def test_zoo_with_the_solver_down_is_exit_1_in_one_line_and_no_nan(env: dict[str, Path]) -> None:
    """As `run` does: every zoo run an infrastructure failure is exit 1 and one line; the JSON printed
    before it holds null where an interval could not be computed, never NaN or Infinity."""
    p = cli("zoo", "--task", f"jsonl:{env['task']}", "--solver", f"python:{env['models']}:down", "--n-score", "2",
            "--n-test", "2", "--only", "interpreter_loop", "--json")
    one_line(p, 1, "infrastructure failure")
    assert "NaN" not in p.stdout and "Infinity" not in p.stdout
    rows = json.loads(p.stdout)["rows"]
    assert rows and all(r["score"]["J"] is None and r["score"]["lo"] is None for r in rows)
