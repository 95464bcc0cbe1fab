"""The prompt's sections (propose/prompt.py): contents, caps, determinism, styles, the chat form."""

from __future__ import annotations

from propose_fixtures import Task, build_prompt, ctx, feedback

from harnesslearn.harness import Harness, runtime_api_doc, seed_source
from harnesslearn.propose.decode import PRIME
from harnesslearn.propose.formats import ChatBlocks
from harnesslearn.propose.prompt import Attempt


def test_prompt_holds_every_section_and_ends_with_prime() -> None:
    h = Harness(seed_source("minimal"))
    hist = [Attempt(1, 0, False, "not_found", 0.3, None, "junk"), Attempt(1, 1, True, None, 0.3, 0.5, "EDIT-X")]
    p = build_prompt(Task(), h, feedback(), hist)
    assert Task.description in p and h.source.strip() in p
    assert runtime_api_doc().strip()[:200] in p
    assert "J (mean score) = 0.333" in p and "ok 6" in p
    assert "Gold answer:" in p and "Harness answer: garbage" in p and "ValueError: boom" in p
    assert "invalid edit (not_found)" in p and "0.300 -> 0.500" in p and "EDIT-X" in p
    assert ">>>>>>> REPLACE" in p and p.endswith(PRIME)


def test_traces_are_capped_and_failures_first() -> None:
    p = build_prompt(Task(), Harness(seed_source("minimal")), feedback(), n_traces=2)
    assert "LONG" * 100 not in p and "pad " * 300 not in p
    assert p.count("### Problem") == 2 and "score 1.0" not in p  # 4 failures exist: both sampled are failures
    assert len(p) < 12000


def test_prompt_is_deterministic_and_varied_style_differs() -> None:
    h, fb = Harness(seed_source("minimal")), feedback()
    assert build_prompt(Task(), h, fb, rng_seed=3) == build_prompt(Task(), h, fb, rng_seed=3)
    v = build_prompt(Task(), h, fb, style="varied", rng_seed=3)
    assert v != build_prompt(Task(), h, fb, rng_seed=3) and h.source.strip() in v and v.endswith(PRIME)
    assert len({build_prompt(Task(), h, fb, style="varied", rng_seed=s) for s in range(6)}) > 1


def test_chat_messages_hold_every_section_and_no_foreign_example() -> None:
    from harnesslearn.propose.decode import solve_lines
    from harnesslearn.propose.prompt import template

    h = Harness(seed_source("minimal"))
    hist = [Attempt(1, 1, True, None, 0.3, 0.5, "EDIT-X")]
    msgs = ChatBlocks().render(ctx(h, hist))
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert Task.description in user and h.source.strip() in user and "Gold answer:" in user and "EDIT-X" in user
    assert runtime_api_doc().strip()[:200] in user
    # the lines offered for SEARCH are the current harness's own solve function ...
    lines = solve_lines(h.source)
    assert lines and user.rstrip().endswith(lines)
    # ... and nothing of the plain form's worked example (a foreign harness) is shown
    example = template("few_shot")
    assert "Think step by step, then give the final answer on the last line" in example
    assert "Think step by step, then give the final answer on the last line" not in user
    assert PRIME not in user  # markers are described in words, never as a block to copy
