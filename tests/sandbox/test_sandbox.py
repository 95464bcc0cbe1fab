"""Unit tests of the executor: broker validation, budgets, infrastructure retries, tools,
isolation modes. Hostile harnesses are in test_hostile.py."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harnesslearn.errors import InfraError, UserError
from harnesslearn.evaluation import task_tools
from harnesslearn.models.base import Completion, GenerateRequest, ModelBackend
from harnesslearn.sandbox import Budgets, Executor, ExecutorConfig, RunRecord, Status, find_python
from harnesslearn.sandbox.broker import InvalidRequest, parse_generate
from harnesslearn.sandbox.worker import seccomp_program
from harnesslearn.tasks.base import Problem, Score, Task

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

ECHO = "def solve(model, question):\n    return model('Q: ' + question)\n"


class Echo(ModelBackend):
    spec = "test:echo"

    def __init__(self, tokens: int = 4) -> None:
        self.tokens = tokens
        self.requests: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest) -> Completion:
        self.requests.append(request)
        text = request.prompt if isinstance(request.prompt, str) else request.prompt[-1]["content"]
        return Completion(texts=[f"echo {text}"] * request.n, prompt_tokens=self.tokens, completion_tokens=self.tokens)


class Down(ModelBackend):
    spec = "test:down"

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request: GenerateRequest) -> Completion:
        self.calls += 1
        raise InfraError("server down")


class Toy(Task):
    spec = name = family = "toy"
    tools = ("python", "search")

    @property
    def description(self) -> str:
        return "toy"

    def candidates(self, seed: int) -> Iterator[Problem]:
        for i in range(1000):
            yield Problem(f"p{i}", f"question {i}", f"answer {i}")

    def score(self, answer: str, problem: Problem) -> Score:
        return Score(float(answer == problem.answer))

    def search_documents(self, problem: Problem) -> list[dict[str, str]] | None:
        return [{"title": "Paris", "text": "Paris is the capital of France."},
                {"title": "Bananas", "text": "Bananas are yellow fruit."}]


def run(source: str, n: int = 1, model: ModelBackend | None = None, budgets: Budgets | None = None,
        **cfg: object) -> list[RunRecord]:
    problems = list(Toy().candidates(0))[:n]

    async def go() -> list[RunRecord]:
        config = ExecutorConfig(concurrency=2, **cfg)  # type: ignore[arg-type]
        async with Executor(model or Echo(), config) as ex:
            return await ex.run(source, problems, task_tools(Toy()), budgets or Budgets(timeout_s=10))

    return asyncio.run(go())


def test_find_python_falls_back_to_the_running_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """No system python among the candidates: a venv's base interpreter (here, a system one posing as
    the running interpreter) is used when every uid can execute it."""
    from harnesslearn.sandbox import launcher

    base = next((p for p in launcher.PYTHON_CANDIDATES if launcher._world_executable(p)), None)
    if base is None:
        pytest.skip("no world-executable python here")
    monkeypatch.setattr(launcher, "PYTHON_CANDIDATES", ("/nonexistent/python3.11",))
    monkeypatch.setattr(sys, "executable", base)
    assert find_python() == os.path.realpath(base)
    monkeypatch.setattr(sys, "executable", "/nonexistent/venv/bin/python")
    with pytest.raises(UserError, match="no worker interpreter"):
        find_python()


def test_find_python_rejects_a_shell_shim(tmp_path: Path) -> None:
    shim = tmp_path / "python3"
    shim.write_text("#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n")
    shim.chmod(0o755)
    with pytest.raises(UserError):
        find_python(str(shim))
    assert os.stat(find_python()).st_mode & stat.S_IXOTH


def test_seccomp_program_is_whole_instructions() -> None:
    prog = seccomp_program()
    assert len(prog) % 8 == 0 and len(prog) // 8 < 4096


def test_parse_generate_checks_every_field() -> None:
    ok = parse_generate({"prompt": "hi", "n": 2, "stop": ["\n"], "temperature": 0.5})
    assert ok.n == 2 and ok.stop == ("\n",) and ok.temperature == 0.5
    for bad in ({"prompt": 3}, {"prompt": "x", "n": 0}, {"prompt": "x", "n": True}, {"prompt": "x", "max_tokens": -1},
                {"prompt": "x", "temperature": float("nan")}, {"prompt": [{"role": "user"}]},
                {"prompt": "x", "stop": [1]}, {"prompt": "x", "seed": "1"}, []):
        with pytest.raises(InvalidRequest):
            parse_generate(bad)


def test_records_come_back_in_order_with_calls_logged() -> None:
    model = Echo()
    recs = run(ECHO, n=5, model=model)
    assert [r.problem_id for r in recs] == [f"p{i}" for i in range(5)]
    assert all(r.status == Status.OK for r in recs)
    assert [r.answer for r in recs] == [f"echo Q: question {i}" for i in range(5)]
    assert all(r.n_calls == 1 and r.tokens == 8 and r.calls[0].request["prompt"].startswith("Q: ") for r in recs)


def test_generate_params_and_messages_reach_the_solver() -> None:
    model = Echo()
    src = ("def solve(model, question):\n"
           "    a = model.generate([{'role': 'user', 'content': 'hello'}], n=3, temperature=0.7, stop='\\n')\n"
           "    return '|'.join(a)\n")
    rec = run(src, model=model)[0]
    assert rec.status == Status.OK and rec.answer == "echo hello|echo hello|echo hello"
    req = model.requests[0]
    assert req.n == 3 and req.temperature == 0.7 and req.stop == ("\n",)


def test_token_budget_ends_the_run() -> None:
    src = "def solve(model, question):\n    for _ in range(5):\n        model('x')\n    return 'done'\n"
    rec = run(src, model=Echo(tokens=100), budgets=Budgets(timeout_s=10, max_tokens=500))[0]
    assert rec.status == Status.BUDGET_EXCEEDED and "tokens" in (rec.error or "")


def test_solver_down_is_an_infra_error_after_retries() -> None:
    down = Down()
    rec = run(ECHO, model=down, infra_retries=2)[0]
    assert rec.status == Status.INFRA_ERROR and "server down" in (rec.error or "")
    assert down.calls == 3


def test_model_error_is_catchable_by_the_harness() -> None:
    src = ("def solve(model, question):\n    try:\n        model.generate('x', n=10**6)\n"
           "    except RuntimeError as e:\n        return 'caught ' + type(e).__name__\n")
    rec = run(src)[0]
    assert rec.status == Status.OK and rec.answer == "caught ModelError"


def test_python_and_search_tools() -> None:
    src = ("def solve(model, question):\n    out = model.python('print(sum(range(10)))')\n"
           "    err = model.python('1/0')\n    docs = model.search('capital of France', k=1)\n"
           "    return out.strip() + '|' + err + '|' + docs[0]['title']\n")
    rec = run(src)[0]
    assert rec.status == Status.OK, rec.error
    assert rec.answer == "45|Error: ZeroDivisionError: division by zero|Paris"
    assert [c.kind for c in rec.calls].count("python") == 2


def test_tool_budget() -> None:
    src = "def solve(model, question):\n    for _ in range(5):\n        model.python('print(1)')\n    return 'x'\n"
    rec = run(src, budgets=Budgets(timeout_s=10, tool_calls=2))[0]
    assert rec.status == Status.BUDGET_EXCEEDED


@pytest.mark.parametrize("kind", ["calls", "tools", "tokens"])
def test_budgets_allow_exactly_their_limit(kind: str) -> None:
    """The boundary of each per-problem budget: a run that uses exactly the limit ends ok, one more
    use ends budget_exceeded (a budget off by one either way fails one of the two)."""
    call = {"calls": "model('x')", "tools": "model.python('print(1)')", "tokens": "model('x')"}[kind]
    src = "def solve(model, question):\n    for _ in range(int(question.split()[-1]) % 100):\n        " + call + \
          "\n    return 'done'\n"
    limits = {"calls": {"max_calls": 3}, "tools": {"tool_calls": 3}, "tokens": {"max_tokens": 24}}[kind]
    budgets = Budgets(timeout_s=10, **limits)  # type: ignore[arg-type]
    problems = [Problem("a", "question 3", "x"), Problem("b", "question 4", "x")]  # 3 uses, then 4

    async def go() -> list[RunRecord]:
        async with Executor(Echo(tokens=4), ExecutorConfig(concurrency=2)) as ex:  # 8 tokens a call
            return await ex.run(src, problems, task_tools(Toy()), budgets)

    exact, over = asyncio.run(go())
    assert exact.status == Status.OK and exact.answer == "done", exact.error
    assert over.status == Status.BUDGET_EXCEEDED, over.status


def test_unsafe_mode_warns_every_run(capsys: pytest.CaptureFixture[str]) -> None:
    recs = run(ECHO, n=2, isolation="none")
    assert all(r.status == Status.OK for r in recs)
    assert "WARNING" in capsys.readouterr().err


def test_landlock_fallback_holds() -> None:
    src = ("import os, socket\ndef solve(model, question):\n    out = []\n"
           "    for p in ('/etc/hostname', '/root', '/work'):\n"
           "        try:\n            os.listdir(p) if os.path.isdir(p) else open(p).read()\n            out.append('read')\n"
           "        except OSError:\n            out.append('denied')\n"
           "    try:\n        socket.socket()\n        out.append('socket')\n    except OSError:\n        out.append('denied')\n"
           "    open('mine.txt', 'w').write('x')\n    return ','.join(out) + '|' + model('hi')\n")
    rec = run(src, isolation="landlock")[0]
    assert rec.status == Status.OK, rec.error
    assert rec.answer == "denied,denied,denied,denied|echo hi"


def test_executor_reopens_in_a_new_event_loop_after_aclose() -> None:
    ex = Executor(Echo(), ExecutorConfig(concurrency=1))
    problems = list(Toy().candidates(0))[:1]

    async def go() -> list[RunRecord]:
        try:
            return await ex.run(ECHO, problems, task_tools(Toy()), Budgets(timeout_s=10))
        finally:
            await ex.aclose()

    for _ in range(2):
        assert asyncio.run(go())[0].status == Status.OK


def test_unknown_isolation_is_a_user_error() -> None:
    with pytest.raises(UserError):
        ExecutorConfig(isolation="docker")


def test_no_child_is_reaped_behind_the_child_watchers_back(monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """Harnesses that time out in the middle of python tool calls (the tool's worker is being
    started, or torn down, when the run ends): nothing of ours polls a child (Popen.poll reaps an
    exited child before asyncio's watcher does, which then logs "Unknown child process pid N"), no
    such line is logged, and the runs end (a cancelled process creation used to hang)."""
    import logging
    import subprocess

    find_python()  # its one-off version check runs (and polls) its own child: done before spying
    polls: list[int] = []
    real_poll = subprocess.Popen.poll

    def spy(self: subprocess.Popen[bytes]) -> int | None:
        polls.append(self.pid)
        return real_poll(self)

    monkeypatch.setattr(subprocess.Popen, "poll", spy)
    caplog.set_level(logging.WARNING, logger="asyncio")
    loop_tool = "def solve(model, question):\n    while True:\n        model.python('import time; time.sleep(0.05)')\n"
    records = run(loop_tool, n=6, budgets=Budgets(timeout_s=0.7, tool_calls=10_000))
    assert [r.status for r in records] == [Status.TIMEOUT] * 6
    assert polls == []
    assert not [r for r in caplog.records if "child process" in r.getMessage()]


LIMITS_PROBE = r'''
import json, resource
NAMES = ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CPU", "RLIMIT_CORE")
def limits():
    return {n: list(resource.getrlimit(getattr(resource, n))) for n in NAMES}
def solve(model, question):
    tool = model.python("import json, resource\nprint(json.dumps({n: list(resource.getrlimit(getattr(resource, n)))"
                        " for n in %r}))" % (NAMES,))
    return json.dumps({"worker": limits(), "tool": json.loads(tool)})
'''


@pytest.mark.parametrize("isolation", ["bwrap", "landlock"])
def test_worker_and_tool_rlimits_are_the_configured_ones(isolation: str) -> None:
    """The limits a harness (and the python tool's code) really run under: address space, processes,
    file size, open files and CPU time as configured, hard limits equal to soft ones (CPU: one
    second of grace), no core dumps."""
    import json

    from harnesslearn.sandbox.launcher import find_bwrap

    if isolation == "bwrap" and find_bwrap() is None:
        pytest.skip("bubblewrap is not installed here")
    cfg = {"nproc": 37, "nofile": 41, "fsize_mb": 7, "python_tool_memory_mb": 300, "isolation": isolation}
    rec = run(LIMITS_PROBE, budgets=Budgets(timeout_s=6.0, memory_mb=700), **cfg)[0]
    assert rec.status == Status.OK, rec.error
    seen = json.loads(rec.answer or "{}")
    mib = 1024 * 1024
    w, t = seen["worker"], seen["tool"]
    assert w["RLIMIT_AS"] == [700 * mib] * 2
    assert w["RLIMIT_NPROC"] == [37, 37]
    assert w["RLIMIT_FSIZE"] == [7 * mib] * 2
    assert w["RLIMIT_NOFILE"] == [41, 41]
    assert w["RLIMIT_CORE"] == [0, 0]
    soft, hard = w["RLIMIT_CPU"]  # timeout + 1 s on top of the CPU time the start-up used
    assert 7 <= soft <= 8 and hard == soft + 1
    assert t["RLIMIT_AS"] == [300 * mib] * 2  # the tool's own tighter limits
    assert t["RLIMIT_NPROC"] == [16, 16] and t["RLIMIT_NOFILE"] == [32, 32] and t["RLIMIT_FSIZE"] == [4 * mib] * 2
    assert 6 <= t["RLIMIT_CPU"][0] <= 7 and t["RLIMIT_CPU"][1] == t["RLIMIT_CPU"][0] + 1


class Slow(Echo):
    """Echo that holds each call 50 ms and records the most calls in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.now = self.most = 0

    async def generate(self, request: GenerateRequest) -> Completion:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0.05)
            return await super().generate(request)
        finally:
            self.now -= 1


def test_spare_slots_keep_problems_in_flight_at_concurrency_and_answers_unchanged() -> None:
    """Spare slots are pre-started workers beyond ``concurrency`` (the freed slot rebuilds while the next
    problem runs in another); they do not raise the number of problems in flight."""
    model = Slow()
    recs = run(ECHO, n=12, model=model, spare_slots=3)  # concurrency 2
    assert [r.status for r in recs] == [Status.OK] * 12
    assert [r.answer for r in recs] == [f"echo Q: question {i}" for i in range(12)]
    assert model.most == 2
    with pytest.raises(UserError, match="spare"):
        ExecutorConfig(spare_slots=-1)
