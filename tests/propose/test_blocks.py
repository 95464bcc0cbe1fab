"""Zoo harnesses written as edits of the minimal seed (propose/blocks.py) and the teacher-free
SFT rows built from them (training/zoo_sft.py). No model: a rule-based solver."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from harnesslearn import zoo
from harnesslearn.harness import check_source, load_harness, normalise
from harnesslearn.propose.blocks import EditMismatch, diff_blocks, inline_solve, rewrite_completion
from harnesslearn.propose.decode import as_proposal, rewrite_tail
from harnesslearn.propose.edits import apply_proposal

SOLVER = f"python:{Path(__file__).resolve().parents[1] / 'zoo_solver.py'}:six"  # not relative to the cwd
REASONING = ["interpreter_loop", "reason_extract", "self_consistency", "verify_retry", "few_shot"]
SEED = load_harness("minimal").source


@pytest.mark.parametrize("name", REASONING)
def test_blocks_apply_exactly_both_ways(name: str) -> None:
    child = zoo.source(name)
    out = normalise(child)
    text = diff_blocks(SEED, out)
    assert text.startswith("<<<<<<< SEARCH\n") and text.rstrip().endswith(">>>>>>> REPLACE")
    ed = apply_proposal(SEED, text)
    assert ed.valid and normalise(ed.source or "") == normalise(child) == normalise(out)
    back = diff_blocks(child, SEED)  # and from the zoo harness back to the seed
    assert normalise(apply_proposal(child, back).source or "") == normalise(SEED)


def test_blocks_between_zoo_harnesses_and_context_growth() -> None:
    for a in REASONING:
        for b in REASONING:
            if a != b:
                diff_blocks(zoo.source(a), zoo.source(b))
    parent = "def f():\n    return 1\n\n\ndef g():\n    return 1\n\n\ndef solve(model, question):\n    return 'x'\n"
    child = parent.replace("def g():\n    return 1", "def g():\n    return 2")
    text = diff_blocks(parent, child)  # 'return 1' alone is ambiguous: the SEARCH must grow to include 'def g'
    assert "def g():" in text.split("=======")[0]
    with pytest.raises(EditMismatch):
        diff_blocks(parent, parent)


@pytest.mark.parametrize("name", REASONING)
def test_inline_solve_keeps_a_valid_self_contained_harness(name: str) -> None:
    inlined = inline_solve(zoo.source(name))
    assert check_source(inlined) is None
    assert inlined.startswith("def solve(model, question):\n")


def test_inline_solve_refuses_what_it_could_break() -> None:
    with pytest.raises(ValueError):
        inline_solve("X = 1\n\ndef solve(model, question):\n    global X\n    return str(X)\n")
    with pytest.raises(ValueError):
        inline_solve('P = """a\nb"""\n\ndef solve(model, question):\n    return P\n')


@pytest.mark.parametrize("name", REASONING)
def test_rewrite_completion_continues_the_rewrite_prefill(name: str) -> None:
    completion, child = rewrite_completion(SEED, inline_solve(zoo.source(name)))
    tail = rewrite_tail(SEED)
    assert tail is not None and completion.rstrip().endswith(">>>>>>> REPLACE")
    assert not completion.startswith("def ")  # the prefill already wrote the def line
    ed = apply_proposal(SEED, as_proposal(completion, tail))
    assert ed.valid and normalise(ed.source or "") == normalise(child)
    with pytest.raises(ValueError):
        rewrite_completion(SEED, "x = 1\n")


def test_rewritten_zoo_harness_runs_like_the_original(tmp_path: Path) -> None:
    """The inlined interpreter loop gives the same answers as the zoo file on a scripted solver."""
    from harnesslearn.evaluation import evaluate
    from harnesslearn.harness import Harness
    from harnesslearn.models import load_model
    from harnesslearn.sandbox import Executor, ExecutorConfig
    from harnesslearn.sandbox.records import Budgets
    from harnesslearn.tasks import load_task

    solver = load_model(SOLVER)
    task = load_task("rg:basic_arithmetic")
    _, child = rewrite_completion(SEED, inline_solve(zoo.source("interpreter_loop")))

    async def go() -> tuple[list[str], list[str]]:
        async with Executor(solver, ExecutorConfig(concurrency=2)) as ex:
            a = await evaluate(Harness(child), task, "score", 2, 0, ex, Budgets(timeout_s=30), progress=False)
            b = await evaluate(Harness(zoo.source("interpreter_loop")), task, "score", 2, 0, ex, Budgets(timeout_s=30),
                               progress=False)
        return [p.answer for p in a.problems], [p.answer for p in b.problems]

    got, want = asyncio.run(go())
    assert got == want == ["6", "6"]


def test_context_rows_keep_only_strict_improvements() -> None:
    from harnesslearn.models import load_model
    from harnesslearn.models.common import render_messages
    from harnesslearn.sandbox import Executor, ExecutorConfig
    from harnesslearn.sandbox.records import Budgets
    from harnesslearn.settings.groups import TrainSplits
    from harnesslearn.tasks import load_task
    from harnesslearn.training.zoo_sft import ZooSFTSettings, context_rows, summarise_rows

    solver = load_model(SOLVER)
    task = load_task("rg:basic_arithmetic")
    seed_h = load_harness("minimal")
    settings = ZooSFTSettings(splits=TrainSplits(n_feedback=2, n_score=2), budgets=Budgets(timeout_s=30))

    async def go() -> tuple[list[dict], object]:
        async with Executor(solver, ExecutorConfig(concurrency=2)) as ex:
            return await context_rows(task, seed_h, 5, ex, render_messages, settings)

    rows, counts = asyncio.run(go())
    for r in rows:
        p = r["provenance"]
        assert p["J_after"] > p["J_before"]
        assert r["messages"][0]["role"] == "user" and r["messages"][1]["role"] == "assistant"
        json.dumps(r)
    assert counts["zoo:screen:answer_table"] == 1  # few_shot carries feedback questions literally
    s = summarise_rows(rows, counts, 1)
    assert s["kept"] == len(rows) and 0.0 <= s["interpreter_loop_share"] <= 1.0


def test_context_rows_keep_the_zoo_edits_that_improve(tmp_path: Path) -> None:
    """On a task where every answer is 6 the seed scores 0 and the reasoning zoo edits score 1 with the rule-
    based solver: they are kept as rows (each a strict improvement, with its provenance), the rest counted."""
    from harnesslearn.models import load_model
    from harnesslearn.models.common import render_messages
    from harnesslearn.sandbox import Executor, ExecutorConfig
    from harnesslearn.sandbox.records import Budgets
    from harnesslearn.settings.groups import TrainSplits
    from harnesslearn.tasks import load_task
    from harnesslearn.training.zoo_sft import ZooSFTSettings, context_rows

    p = tmp_path / "six.jsonl"
    p.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} * 0 + 6?", "answer": "6"}) + "\n"
                         for i in range(60)))
    solver = load_model(SOLVER)
    task = load_task(f"jsonl:{p}?scorer=exact")
    settings = ZooSFTSettings(splits=TrainSplits(n_feedback=2, n_score=3), budgets=Budgets(timeout_s=30))

    async def go() -> tuple[list[dict], object]:
        async with Executor(solver, ExecutorConfig(concurrency=2)) as ex:
            return await context_rows(task, load_harness("minimal"), 5, ex, render_messages, settings)

    rows, counts = asyncio.run(go())
    kept = {r["provenance"]["candidate"] for r in rows}
    assert {"zoo:interpreter_loop", "zoo:reason_extract"} <= kept, (kept, counts)
    assert counts["zoo:kept"] == len(rows) and counts["zoo:proposed"] == 5
    for r in rows:
        prov = r["provenance"]
        assert prov["J_before"] == 0.0 and prov["J_after"] == 1.0 and prov["harness_id"] != prov["parent_id"]
        assert prov["source"] == "zoo" and prov["parent"] == "minimal" and prov["gain"] == 1.0
        assert prov["known"]["copy"] and prov["known"]["nearest"] == prov["candidate"]  # the zoo arm: zoo files
        assert prov["solver_code"] == (prov["candidate"] == "zoo:interpreter_loop")
        assert r["messages"][1]["content"].strip()
