"""The execution reward r = J + 0.05*parsed + 0.10*produced + 0.15*completion_rate, checked
against hand-computed values through the real executor with a `python:` solver, and None (not 0)
for infrastructure failures."""

from __future__ import annotations

import asyncio
import json

import pytest

from harnesslearn.errors import InfraError
from harnesslearn.harness import load_harness
from harnesslearn.sandbox.records import RunRecord, Status
from harnesslearn.training.reward import (
    RewardRequest,
    harness_reward,
    harness_rewards,
    parent_scores,
    reward_value,
)

COMPUTE = """<<<<<<< SEARCH
    return completion.strip()
=======
    return str(eval(question.split(":")[-1]))
>>>>>>> REPLACE
"""
NOT_FOUND = """<<<<<<< SEARCH
    return no_such_line
=======
    return "1"
>>>>>>> REPLACE
"""
RAISES = """<<<<<<< SEARCH
    return completion.strip()
=======
    raise ValueError("boom")
>>>>>>> REPLACE
"""
# compute the answer only for even left operands: J = 1/2 on the problems below
HALF = """<<<<<<< SEARCH
    return completion.strip()
=======
    a = int(question.split(":")[-1].split("+")[0])
    return str(eval(question.split(":")[-1])) if a % 2 == 0 else completion.strip()
>>>>>>> REPLACE
"""


def test_reward_value_formula() -> None:
    assert reward_value(0.5, True, True, 0.5) == pytest.approx(0.5 + 0.05 + 0.10 + 0.075)
    assert reward_value(0.0, True, False, 0.0) == pytest.approx(0.05)
    assert reward_value(1.0, False, True, 1.0) == 0.0  # unparsed is a real zero whatever else


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    from harnesslearn.tasks import load_task

    d = tmp_path_factory.mktemp("reward")
    rows = [{"id": f"q{i}", "question": f"Compute: {i} + {i + 3}", "answer": str(2 * i + 3)} for i in range(200)]
    (d / "arith.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "solver.py").write_text("def solve(prompt, **kw):\n    return '0'\n")
    task = load_task(f"jsonl:{d / 'arith.jsonl'}?scorer=exact")
    return task, f"python:{d / 'solver.py'}:solve"


def _run(task, solver_spec: str, completions: list[str], n: int = 4):
    from harnesslearn.models import load_model
    from harnesslearn.sandbox import Executor, ExecutorConfig

    async def go():
        async with Executor(load_model(solver_spec), ExecutorConfig(concurrency=2)) as ex:
            parent = load_harness("minimal")
            return await harness_rewards([RewardRequest(parent, c, task, 0) for c in completions], ex, n=n)

    return asyncio.run(go())


def test_hand_computed_rewards_through_the_executor(env) -> None:
    task, solver = env
    probs = task.problems("score", 4, 0)
    even = sum(1 for p in probs if int(p.question.split(":")[-1].split("+")[0]) % 2 == 0) / len(probs)
    out = _run(task, solver, [COMPUTE, "no blocks at all", NOT_FOUND, RAISES, HALF, "<<<<<<< SEARCH\n", COMPUTE])
    compute, unparsed, not_found, raises, half, malformed, again = out
    assert compute.reward == pytest.approx(1.0 + 0.05 + 0.10 + 0.15) and compute.J == 1.0
    assert compute.completion_rate == 1.0 and compute.valid
    assert unparsed.reward == 0.0 and not unparsed.parsed
    assert not_found.reward == pytest.approx(0.05) and not_found.parsed and not not_found.produced
    assert raises.reward == pytest.approx(0.05 + 0.10) and raises.J == 0.0 and raises.completion_rate == 0.0
    assert half.J == pytest.approx(even)
    assert half.reward == pytest.approx(even + 0.05 + 0.10 + 0.15)
    assert malformed.reward == 0.0
    assert again == compute  # identical requests share one evaluation


def test_parent_scores_are_the_parents_J_on_the_candidates_problems_once_per_context(env) -> None:
    """``parent_scores`` (GRPOSettings.score_parent): each request's parent harness on the same score-split
    problems as its candidates, evaluated once per (parent, task, seed); None where infrastructure failed. The
    rollout log keeps it as the bar a candidate must clear to beat what it was shown."""
    from harnesslearn.harness import Harness
    from harnesslearn.models import load_model
    from harnesslearn.propose.edits import apply_proposal
    from harnesslearn.sandbox import Executor, ExecutorConfig

    task, solver = env
    minimal = load_harness("minimal")
    half = Harness(source=apply_proposal(minimal.source, HALF).source or "")
    probs = task.problems("score", 4, 0)
    even = sum(1 for p in probs if int(p.question.split(":")[-1].split("+")[0]) % 2 == 0) / len(probs)
    reqs = [RewardRequest(minimal, COMPUTE, task, 0), RewardRequest(minimal, RAISES, task, 0),
            RewardRequest(half, COMPUTE, task, 0), RewardRequest(half, COMPUTE, task, 5)]

    async def go():
        async with Executor(load_model(solver), ExecutorConfig(concurrency=2)) as ex:
            return await parent_scores(reqs, ex, n=4)

    got = asyncio.run(go())
    assert got.keys() == {(minimal.id, task.spec, 0), (half.id, task.spec, 0), (half.id, task.spec, 5)}
    assert got[(minimal.id, task.spec, 0)] == 0.0  # the solver always answers 0
    assert got[(half.id, task.spec, 0)] == pytest.approx(even)
    assert asyncio.run(parent_scores(reqs[:1], _InfraExecutor(raise_it=True), n=3)) == {(minimal.id, task.spec, 0): None}


class _InfraExecutor:
    """Every run is an infrastructure failure (as the executor reports after its retries)."""

    def __init__(self, raise_it: bool = False, ok_first: bool = False) -> None:
        self.raise_it, self.ok_first = raise_it, ok_first

    async def run(self, source, problems, task, budgets=None, on_record=None):
        if self.raise_it:
            raise InfraError("solver server down")
        out = [RunRecord(p.id, Status.INFRA_ERROR, error="server down") for p in problems]
        if self.ok_first:
            out[0] = RunRecord(problems[0].id, Status.OK, answer=str(problems[0].answer))
        return out


def test_infra_failure_is_none_not_zero(env) -> None:
    task, _ = env
    parent = load_harness("minimal")
    every = asyncio.run(harness_reward(parent, COMPUTE, task, _InfraExecutor(), n=3, seed=0))
    raised = asyncio.run(harness_reward(parent, COMPUTE, task, _InfraExecutor(raise_it=True), n=3, seed=0))
    assert every.reward is None and every.J is None and every.n_infra == 3
    assert raised.reward is None and raised.reason is not None and raised.reason.startswith("infra_error")


def test_partial_infra_failure_scores_the_runs_that_happened(env) -> None:
    task, _ = env
    r = asyncio.run(harness_reward(load_harness("minimal"), COMPUTE, task, _InfraExecutor(ok_first=True), n=3, seed=0))
    assert r.J == 1.0 and r.completion_rate == 1.0 and r.n_scored == 1 and r.n_infra == 2
    assert r.reward == pytest.approx(1.3)


def test_invalid_edit_never_reaches_the_executor(env) -> None:
    task, _ = env
    r = asyncio.run(harness_reward(load_harness("minimal"), "prose only", task, _InfraExecutor(raise_it=True), n=3,
                                   seed=0))
    assert r.reward == 0.0  # the executor would have raised: it was not called


def test_rollout_log_gzip_appends_one_member_per_update_and_reads_back_whole(tmp_path) -> None:
    """A ``.gz`` rollout log (the transfer recipe's, committed between device stretches) is appended
    update by update and reads back as one stream of every group, in order, and is much smaller."""
    import gzip

    from harnesslearn.training.reward import RewardResult
    from harnesslearn.training.rollouts import Candidate, RolloutSink

    res = RewardResult(0.5, 0.5, True, True, 1.0, True, None)
    prompt = "a long shared prompt " * 200

    def update(step: int) -> list[Candidate]:
        return [Candidate(f"c{step}", "rg:x", step, "p", prompt, f"edit {i}", f"edit {i}", res) for i in range(4)]

    gz, plain = RolloutSink(tmp_path / "r.jsonl.gz"), RolloutSink(tmp_path / "r.jsonl")
    for step in range(3):
        gz.write(step, update(step))
        plain.write(step, update(step))
    with gzip.open(gz.path, "rt", encoding="utf-8") as f:
        back = f.read()
    assert back == plain.path.read_text(encoding="utf-8")
    assert [json.loads(line)["step"] for line in back.splitlines()] == [0, 1, 2]
    assert gz.path.stat().st_size * 4 < plain.path.stat().st_size


def test_a_reward_says_where_its_time_went(env) -> None:
    """Each reward carries its evaluation's wall seconds, slowest run, solver calls and runs by status: the
    rollout log's view of GRPO's reward phase (stretch 5 on the H200: 20 s of a 44 s update)."""
    task, solver = env
    extra = COMPUTE.replace("    return str(eval", "    model('again', max_tokens=4)\n    return str(eval")
    compute, raises, twice, unparsed = _run(task, solver, [COMPUTE, RAISES, extra, "no blocks at all"])
    assert compute.solver_calls == 4 and twice.solver_calls == 8  # the minimal seed's one call a run, + one
    assert compute.statuses == {"ok": 4} and raises.statuses is not None and sum(raises.statuses.values()) == 4
    assert "ok" not in raises.statuses
    assert 0 < compute.slowest_run_s <= compute.seconds
    assert unparsed.seconds == 0.0 and unparsed.solver_calls == 0 and unparsed.statuses is None


@pytest.mark.skipif(not __import__("importlib").util.find_spec("ray"), reason="shards:K runs on a local Ray instance")
def test_grpo_rewards_through_trusted_shards_equal_the_local_executors(env, monkeypatch: pytest.MonkeyPatch) -> None:
    """GRPO's runtime opened on its reward thread (``grpo._open_runtime``) with ``runtime.executor: shards:2`` and
    a served solver (issue 31's engine setting, which the device recipe passes): every shard calls the server
    itself, and the batch's rewards are the ones the local executor gives."""
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    from harnesslearn.settings.groups import RuntimeSettings
    from harnesslearn.training.grpo import LoopThread, _open_runtime

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fault_proxy import FakeOpenAIServer

    task, _ = env
    monkeypatch.setenv("HARNESSLEARN_CACHE", "0")  # every call reaches the server (the shards inherit this)
    server = FakeOpenAIServer().start()
    try:
        got = {}
        for executor in ("local", "shards:2"):
            cfg = SimpleNamespace(solver=f"openai:fake?base_url={server.url}", solver_base_url=None,
                                  runtime=RuntimeSettings(executor=executor, concurrency=4))
            runner = LoopThread()
            rt = _open_runtime(cfg, runner)  # type: ignore[arg-type]
            try:
                before = len(server.requests)
                parent = load_harness("minimal")
                res = runner.run(harness_rewards([RewardRequest(parent, c, task, 0) for c in (COMPUTE, HALF, "x")],
                                                 rt.executor, n=4))
                got[executor] = ([r.reward for r in res], len(server.requests) - before)
            finally:
                runner.run(rt.aclose())
                runner.close()
        assert got["shards:2"] == got["local"] and got["local"][1] == 8  # 4 problems x the 2 valid ones
        assert got["local"][0][0] == pytest.approx(1.0 + 0.05 + 0.10 + 0.15) and got["local"][0][2] == 0.0
    finally:
        server.stop()
