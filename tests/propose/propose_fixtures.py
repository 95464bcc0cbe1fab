"""What the tests of the proposer format share: a task, a feedback evaluation with long fields and
failures, and the prompts of the default formats."""

from __future__ import annotations

from typing import Any

from harnesslearn.evaluation import Evaluation, ProblemResult
from harnesslearn.harness import Harness
from harnesslearn.propose.formats import PlainSearch
from harnesslearn.propose.prompt import PromptContext
from harnesslearn.sandbox.records import CallRecord, RunRecord, Status


class Task:
    description = "Add two integers. Answer with the number only."


def feedback() -> Evaluation:
    probs = []
    for i in range(6):
        ok = i % 3 == 0
        rec = RunRecord(f"p{i}", Status.OK, answer="x",
                        calls=[CallRecord("model", {"prompt": f"Question: {i}+1\nAnswer:"}, "LONG" * 500)])
        probs.append(ProblemResult(f"p{i}", f"What is {i} + 1? " + "pad " * 400, str(i + 1), 1.0 if ok else 0.0,
                                   {}, "ok", str(i + 1) if ok else "garbage", 1, 5, 0.1,
                                   None if ok else "Traceback...\nValueError: boom", rec))
    return Evaluation("h", "jsonl:x", "feedback", 6, 0, 2 / 6, 1.0, 6, 30, 0.5, probs)


def build_prompt(task: Any, h: Harness, fb: Evaluation, history: Any = (), **kw: Any) -> str:
    """The plain-search prompt (the default of a base model)."""
    return str(PlainSearch().render(PromptContext(task, h, fb, history, **kw)))


def ctx(h: Harness, history: Any = ()) -> PromptContext:
    return PromptContext(Task(), h, feedback(), history)
