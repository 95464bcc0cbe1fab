"""The reward's cap on the slow tail (``grpo.reward_cap_s``, ``training/tailcap.py``): a harness run past it, model
waits counted, is a timeout -- a harness failure scoring 0 on that problem -- never an infrastructure failure."""

from __future__ import annotations

import asyncio
import json

import pytest

from harnesslearn.harness import load_harness
from harnesslearn.training.reward import harness_reward, reward_value
from harnesslearn.training.tailcap import TailCap

# the minimal seed's call to the model stays; the harness then computes nothing itself
KEEP = """<<<<<<< SEARCH
    return completion.strip()
=======
    return completion.strip() + ""
>>>>>>> REPLACE
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    from harnesslearn.tasks import load_task

    d = tmp_path_factory.mktemp("tailcap")
    rows = [{"id": f"q{i}", "question": f"Compute: {i} + {i + 3}", "answer": str(2 * i + 3)} for i in range(50)]
    (d / "arith.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # a slow solver: 3 s a call, all of it a model wait, which budgets.timeout_s does not count
    (d / "slow.py").write_text("import asyncio\n\nasync def solve(prompt, **kw):\n    await asyncio.sleep(3)\n"
                               "    return '0'\n")
    return load_task(f"jsonl:{d / 'arith.jsonl'}?scorer=exact"), f"python:{d / 'slow.py'}:solve"


def test_a_run_past_the_cap_scores_as_a_timeout_not_an_infra_failure(env) -> None:
    from harnesslearn.models import load_model
    from harnesslearn.sandbox import Executor, ExecutorConfig
    from harnesslearn.sandbox.records import Budgets, Status

    task, solver = env
    budgets = Budgets(timeout_s=60)  # the harness's own time is far from its limit

    async def go():
        async with Executor(load_model(solver), ExecutorConfig(concurrency=2)) as ex:
            capped = TailCap(ex, 0.5, 2)
            r = await harness_reward(load_harness("minimal"), KEEP, task, capped, n=3, seed=0, budgets=budgets)
            # the executor still runs harnesses after the cap stopped three of them mid-run
            after = await ex.run("def solve(model, question):\n    return '1'\n", task.problems("score", 1, 0),
                                 budgets=budgets)
            return r, capped.capped, after

    r, n_capped, after = asyncio.run(go())
    assert r.reward is not None and r.reward == pytest.approx(reward_value(0.0, True, True, 0.0))
    assert r.J == 0.0 and r.completion_rate == 0.0 and r.n_infra == 0 and r.n_scored == 3
    assert r.statuses == {str(Status.TIMEOUT): 3} and n_capped == 3
    assert r.seconds < 3  # the reward did not wait for the slow solver
    assert [a.status for a in after] == [Status.OK]


def test_the_cap_counts_from_a_lane_not_from_the_queue(env) -> None:
    """Six runs through two lanes, each run 0.3 s: a 0.5 s cap stops none of them, though the last four end 0.6 and
    0.9 s after the batch was handed over."""
    from harnesslearn.sandbox.records import RunRecord, Status

    class Quick:
        isolation = "none"

        async def start(self) -> None: ...

        async def run(self, source, problems, tools=None, budgets=None, on_record=None, settle=True):
            await asyncio.sleep(0.3)
            return [RunRecord(p.id, Status.OK, answer="1") for p in problems]

    task, _ = env
    capped = TailCap(Quick(), 0.5, 2)  # type: ignore[arg-type]
    recs = asyncio.run(capped.run("", task.problems("score", 6, 0)))
    assert [r.status for r in recs] == [Status.OK] * 6 and capped.capped == 0
