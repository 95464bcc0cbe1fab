"""J and the completion rate from per-problem records, in the trusted process: scores are
clamped to [0, 1], infrastructure failures are kept out of both averages (never scored 0), and
every other failure scores 0. The gold answer never travels to a worker."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from harnesslearn.evaluation import evaluate, improves, score_records, summarise
from harnesslearn.harness import Harness, seed_source
from harnesslearn.sandbox.records import RunRecord, Status
from harnesslearn.tasks.base import Problem, Score, Task

RAW = {"over": 1.7, "under": -0.3, "half": 0.5}


class Table(Task):
    """Scores an answer by looking it up in RAW: out-of-range values on purpose."""

    spec = name = family = "table"
    tools = ()

    @property
    def description(self) -> str:
        return "table"

    def candidates(self, seed: int) -> Iterator[Problem]:
        for i in range(100):
            yield Problem(f"p{i}", f"question {i}", f"GOLD-{i}-SECRET", {"hidden": f"META-{i}"})

    def score(self, answer: str, problem: Problem) -> Score:
        return Score(RAW.get(answer, 0.0))


def _records() -> tuple[list[Problem], list[RunRecord]]:
    probs = list(Table().candidates(0))[:7]
    recs = [
        RunRecord("p0", Status.OK, answer="over"),  # scorer says 1.7 -> 1.0
        RunRecord("p1", Status.OK, answer="under"),  # scorer says -0.3 -> 0.0
        RunRecord("p2", Status.OK, answer="half"),
        RunRecord("p3", Status.TIMEOUT, error="no result within 1 s"),  # 0, not ok
        RunRecord("p4", Status.INFRA_ERROR, error="solver down"),  # not scored, left out
        RunRecord("p5", Status.HARNESS_ERROR, error="ValueError"),  # 0, not ok
        RunRecord("p6", Status.INFRA_ERROR, error="sandbox would not start"),  # not scored, left out
    ]
    return probs, recs


def test_scores_are_clamped_and_infra_errors_are_not_scored() -> None:
    probs, recs = _records()
    results = score_records(Table(), probs, recs)
    assert [r.score for r in results] == [1.0, 0.0, 0.5, 0.0, None, 0.0, None]


def test_J_and_completion_rate_over_mixed_records() -> None:
    probs, recs = _records()
    ev = summarise(Harness(seed_source("minimal")), Table(), "score", 0, score_records(Table(), probs, recs), 0.1)
    assert ev.J == pytest.approx((1.0 + 0.0 + 0.5 + 0.0 + 0.0) / 5)  # 5 scored problems, 2 infra left out
    assert ev.completion_rate == pytest.approx(3 / 5)  # ok among the scored ones
    assert ev.infra_failures == 2 and ev.n == 7
    assert ev.status_counts() == {"ok": 3, "timeout": 1, "infra_error": 2, "harness_error": 1}


def test_J_is_none_when_every_run_is_an_infra_error() -> None:
    probs, recs = _records()
    only = [(p, r) for p, r in zip(probs, recs, strict=True) if r.status == Status.INFRA_ERROR]
    results = score_records(Table(), [p for p, _ in only], [r for _, r in only])
    ev = summarise(Harness(seed_source("minimal")), Table(), "score", 0, results, 0.1)
    assert ev.J is None and ev.completion_rate is None  # "could not score", never 0


def test_improves_is_strict_and_none_never_wins() -> None:
    assert improves(0.6, 0.5) and not improves(0.5, 0.5) and not improves(0.4, 0.5)
    assert improves(0.0, None) and not improves(None, 0.0) and not improves(None, None)


@pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
def test_the_gold_answer_never_reaches_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every frame sent to a worker (job frames and call replies) is spied on: no gold answer
    and no problem metadata in any of them, while the questions do go."""
    from harnesslearn.models import load_model
    from harnesslearn.sandbox import Executor, ExecutorConfig
    from harnesslearn.sandbox.launcher import Worker

    sent: list[str] = []
    real_send = Worker.send

    async def spy(self: Worker, obj: dict[str, Any]) -> None:
        sent.append(repr(obj))
        await real_send(self, obj)

    monkeypatch.setattr(Worker, "send", spy)
    task = Table()
    src = "def solve(model, question):\n    return model(question)\n"

    async def go() -> Any:
        async with Executor(load_model("mock:echo"), ExecutorConfig(concurrency=2)) as ex:
            return await evaluate(Harness(src), task, "score", 4, 0, ex, progress=False)

    ev = asyncio.run(go())
    assert len(ev.problems) == 4 and all(p.status == "ok" for p in ev.problems)
    frames = "\n".join(sent)
    assert all(p.question in frames for p in ev.problems)
    assert "SECRET" not in frames and "META-" not in frames


class Stuck(Table):
    def score(self, answer: str, problem: Problem) -> Score:
        import time

        time.sleep(30)
        return Score(1.0)


def test_a_scorer_past_its_deadline_is_a_user_error_and_never_blocks_the_loop() -> None:
    """Issue 65, item 4: scoring runs off the event loop under a deadline per answer (a user's scorer hanging in
    the trusted process blocked the loop, and Ctrl-C with it)."""
    import time

    from harnesslearn.errors import UserError
    from harnesslearn.evaluation import score_off_loop

    ticks: list[float] = []

    async def main() -> None:
        async def tick() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.05)

        t = asyncio.create_task(tick())
        try:
            await score_off_loop(Stuck(), list(Stuck().candidates(0))[:1], [RunRecord("p0", Status.OK, answer="x")],
                                 timeout_s=0.5)
        finally:
            t.cancel()

    with pytest.raises(UserError, match="did not return within 0.5 s on problem 'p0'"):
        asyncio.run(main())
    assert len(ticks) >= 5  # the loop kept running while the scorer slept
