"""The per-problem timeout charges the harness's own time, not time spent waiting on the solver
(a slow or faulty server must not become a harness `timeout` scored 0)."""

from __future__ import annotations

import asyncio
import sys

import pytest
from test_sandbox import run

from harnesslearn.models.base import Completion, GenerateRequest, ModelBackend
from harnesslearn.sandbox import Budgets, Status

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")


class Slow(ModelBackend):
    spec = "test:slow"

    async def generate(self, request: GenerateRequest) -> Completion:
        await asyncio.sleep(1.5)
        return Completion(texts=["slow answer"] * request.n, prompt_tokens=1, completion_tokens=1)


def test_waiting_on_a_slow_solver_is_not_a_timeout():
    src = "def solve(model, question):\n    return model(question) + model(question)\n"
    (rec,) = run(src, model=Slow(), budgets=Budgets(timeout_s=1.0))
    assert rec.status == Status.OK, rec.error
    assert rec.answer == "slow answerslow answer"
    assert rec.wall_s > 2.5


def test_harness_time_still_times_out_around_model_calls():
    src = "import time\n\ndef solve(model, question):\n    model(question)\n    time.sleep(30)\n    return 'x'\n"
    (rec,) = run(src, model=Slow(), budgets=Budgets(timeout_s=1.0))
    assert rec.status == Status.TIMEOUT
    assert rec.wall_s < 10
