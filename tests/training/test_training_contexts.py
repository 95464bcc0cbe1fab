"""GRPO contexts: built through the test-time prompt code, and the multistep / format-varied
variants change what the proposer sees."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from harnesslearn.training.contexts import Builder, ContextPlan, load_tasks

COMPUTE = """<<<<<<< SEARCH
    return completion.strip()
=======
    return str(eval(question.split(":")[-1]))
>>>>>>> REPLACE
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("ctx")
    rows = [{"id": f"q{i}", "question": f"Compute: {i} + {i + 3}", "answer": str(2 * i + 3)} for i in range(200)]
    (d / "arith.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "solver.py").write_text("def solve(prompt, **kw):\n    return '0'\n")
    (d / "proposer.py").write_text(f"def propose(prompt, **kw):\n    return {COMPUTE!r}\n")
    return {"spec": f"jsonl:{d / 'arith.jsonl'}?scorer=exact", "solver": f"python:{d / 'solver.py'}:solve",
            "proposer": f"python:{d / 'proposer.py'}:propose"}


def _realise(env: dict, plans: list[ContextPlan], **kw):
    from harnesslearn.propose.formats import PlainSearch
    from harnesslearn.runtime import SolverRuntime
    from harnesslearn.training.contexts import realise_contexts

    tasks = load_tasks([env["spec"]])
    fmt = kw.pop("fmt", PlainSearch())

    async def go():
        async with SolverRuntime(env["solver"], concurrency=2) as rt:
            return await realise_contexts(plans, Builder(rt.executor, n_feedback=2, n_score=3, fmt=fmt, n_traces=1,
                                                         **kw), tasks)

    return asyncio.run(go())


def test_single_step_context_is_the_test_time_prompt(env: dict) -> None:
    from harnesslearn.evaluation import evaluate
    from harnesslearn.harness import load_harness
    from harnesslearn.models import load_model
    from harnesslearn.propose.formats import PlainSearch
    from harnesslearn.propose.prompt import PromptContext
    from harnesslearn.propose.rounds import prompt_seed
    from harnesslearn.sandbox import Executor, ExecutorConfig

    (ctx,) = _realise(env, [ContextPlan("c0", env["spec"], "minimal", 5, 0)])
    task = load_tasks([env["spec"]])[env["spec"]]

    async def test_time() -> str:
        async with Executor(load_model(env["solver"]), ExecutorConfig(concurrency=2)) as ex:
            h = load_harness("minimal")
            fb = await evaluate(h, task, "feedback", 2, 5, ex, progress=False)
            return str(PlainSearch().render(PromptContext(task, h, fb, n_traces=1, rng_seed=prompt_seed(5, 1))))

    assert ctx.prompt == asyncio.run(test_time())
    assert ctx.row()["parent_source"] == ctx.harness.source and ctx.rounds == 0


def test_multistep_context_is_the_harness_after_policy_rounds(env: dict) -> None:
    from harnesslearn.models import load_model

    (ctx,) = _realise(env, [ContextPlan("c0", env["spec"], "minimal", 5, 1)],
                      proposer=load_model(env["proposer"]), candidates=1)
    assert "eval(question" in ctx.harness.source and ctx.parent_J == 1.0
    assert "Round 1, candidate 0: J 0" in ctx.prompt  # the revision sequence is in the history


def test_varied_style_and_seed_styles_change_the_context(env: dict) -> None:
    plans = [ContextPlan("c0", env["spec"], "minimal", 5, 0), ContextPlan("c1", env["spec"], "style:helpers", 5, 0)]
    canonical = _realise(env, plans)
    varied = _realise(env, plans, style="varied")
    assert canonical[0].prompt != varied[0].prompt
    assert "def extract_answer" in canonical[1].prompt and "def extract_answer" not in canonical[0].prompt


def test_unknown_seed_harness_is_a_user_error(tmp_path: Path) -> None:
    from harnesslearn.errors import UserError
    from harnesslearn.training.contexts import seed_harness

    with pytest.raises(UserError):
        seed_harness("style:nope")
    with pytest.raises(UserError):
        seed_harness(str(tmp_path / "missing.py"))


def test_chat_form_context_is_the_rendered_test_time_messages(env: dict) -> None:
    """The chat-prefill format: the context prompt is ChatPrefill's messages through the render
    function (the policy's chat template at training time), ending with the rewrite prefill, so the
    reward's decoding (the same format) completes the body into a block."""
    from harnesslearn.harness import load_harness
    from harnesslearn.propose.decode import rewrite_tail
    from harnesslearn.propose.formats import ChatPrefill

    seen: list = []

    def render(msgs: list) -> str:
        seen.append(msgs)
        return "<chat>" + "|".join(m["role"] for m in msgs) + "</chat>" + msgs[-1]["content"]

    (ctx,) = _realise(env, [ContextPlan("c0", env["spec"], "minimal", 5, 0)], fmt=ChatPrefill(), render=render)
    assert [m["role"] for m in seen[-1]] == ["system", "user", "assistant"]
    tail = rewrite_tail(load_harness("minimal").source)
    assert tail is not None and ctx.prompt.endswith(tail)
    proposal = ChatPrefill().decode("    return '7'\n", ctx.prompt, hit_max_tokens=False)
    assert proposal.startswith(tail) and proposal.rstrip().endswith(">>>>>>> REPLACE")


def test_context_stream_realises_as_read_keeps_order_and_skips_refused() -> None:
    """The stream realises contexts as they are read, ``ahead`` at a time beyond the one waited for (not the
    whole plan first), hands them out in plan order with their positions, skips refused ones, and says so
    when nothing is kept."""
    import threading

    from harnesslearn.errors import UserError
    from harnesslearn.harness import Harness
    from harnesslearn.training.contexts import Context, ContextStream

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    started: list[int] = []

    async def realise(plan: ContextPlan) -> Context:
        started.append(plan.seed)
        await asyncio.sleep(0.01 * (plan.seed % 3))  # finishing out of order must not reorder the rows
        return Context(plan.id, plan.task_spec, plan.seed, Harness(source="def solve(model, q):\n    return q\n"),
                       "x" * plan.seed, 0, None)

    def plan_at(i: int) -> ContextPlan:
        return ContextPlan(f"c{i}", "jsonl:x", "minimal", i % 10, 0)

    try:
        stream = ContextStream(plan_at, realise, loop, first=3, ahead=2, keep=lambda c: c.seed != 5)
        rows = stream.rows()
        first = [next(rows)["seed"] for _ in range(3)]
        assert first == [3, 4, 6]  # position 5 refused, skipped
        assert stream.positions == [3, 4, 6]
        assert len(started) <= 3 + 1 + 2  # read 4 positions, plus at most `ahead` more: not the plan
        rows.close()

        never = ContextStream(plan_at, realise, loop, keep=lambda c: False, max_skips=4, refused="nothing fits")
        with pytest.raises(UserError, match="nothing fits"):
            next(never.rows())
    finally:
        loop.call_soon_threadsafe(loop.stop)


def test_a_zoo_seed_harness_is_built_for_the_contexts_task_and_a_bad_one_fails_before_anything_runs(
        env: dict) -> None:
    """``grpo.seed_harnesses: [zoo:NAME]``: the context starts from that zoo harness made for its task (few_shot
    with the task's own examples), so that writing it back is no change; a zoo name that does not exist, or a
    QA-only one on a reasoning task, is a UserError from ``check_seed_harnesses`` before any context is built."""
    from harnesslearn import zoo
    from harnesslearn.errors import UserError
    from harnesslearn.propose.edits import apply_proposal
    from harnesslearn.training.contexts import check_seed_harnesses

    loop, shots = _realise(env, [ContextPlan("c0", env["spec"], "zoo:interpreter_loop", 5, 0),
                                 ContextPlan("c1", env["spec"], "zoo:few_shot", 5, 0)])
    assert loop.harness.source == zoo.build("interpreter_loop", load_tasks([env["spec"]])[env["spec"]]).source
    assert "Compute:" in shots.harness.source and "def solve" in loop.prompt
    back = apply_proposal(loop.harness.source, f"<<<<<<< SEARCH\n{loop.harness.source}=======\n"
                                               f"{zoo.source('interpreter_loop')}>>>>>>> REPLACE\n")
    assert not back.valid and str(back.reason) == "no_change"  # the copy earns no harness
    tasks = load_tasks([env["spec"]])
    check_seed_harnesses(["minimal", "zoo:interpreter_loop", "style:helpers"], tasks)
    qa_only = sorted(set(zoo.names()) - set(zoo.names(tasks[env["spec"]])))
    assert qa_only  # the zoo has QA-only harnesses (search), which do not apply here
    for bad in ["zoo:nope", f"zoo:{qa_only[0]}"]:
        with pytest.raises(UserError):
            check_seed_harnesses(["minimal", bad], tasks)
