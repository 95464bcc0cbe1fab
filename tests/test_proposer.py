"""Proposer prompt: contents, caps, determinism, styles; sampling seeds; the SEARCH prime."""

from __future__ import annotations

import asyncio
from typing import Any

from harnesslearn.evaluation import Evaluation, ProblemResult
from harnesslearn.harness import Harness, runtime_api_doc, seed_source
from harnesslearn.models import load_model
from harnesslearn.models.base import Completion, GenerateRequest, ModelBackend
from harnesslearn.proposer import PRIME, Attempt, as_proposal, build_prompt, candidate_seed
from harnesslearn.sandbox.records import CallRecord, RunRecord, Status


class _Task:
    description = "Add two integers. Answer with the number only."


def _feedback() -> Evaluation:
    probs = []
    for i in range(6):
        ok = i % 3 == 0
        rec = RunRecord(f"p{i}", Status.OK, answer="x",
                        calls=[CallRecord("model", {"prompt": f"Question: {i}+1\nAnswer:"}, "LONG" * 500)])
        probs.append(ProblemResult(f"p{i}", f"What is {i} + 1? " + "pad " * 400, str(i + 1), 1.0 if ok else 0.0,
                                   {}, "ok", str(i + 1) if ok else "garbage", 1, 5, 0.1,
                                   None if ok else "Traceback...\nValueError: boom", rec))
    return Evaluation("h", "jsonl:x", "feedback", 6, 0, 2 / 6, 1.0, 6, 30, 0.5, probs)


def test_prompt_holds_every_section_and_ends_with_prime() -> None:
    h = Harness(seed_source("minimal"))
    hist = [Attempt(1, 0, False, "not_found", 0.3, None, "junk"), Attempt(1, 1, True, None, 0.3, 0.5, "EDIT-X")]
    p = build_prompt(_Task(), h, _feedback(), hist)
    assert _Task.description in p and h.source.strip() in p
    assert runtime_api_doc().strip()[:200] in p
    assert "J (mean score) = 0.333" in p and "ok 6" in p
    assert "Gold answer:" in p and "Harness answer: garbage" in p and "ValueError: boom" in p
    assert "invalid edit (not_found)" in p and "0.300 -> 0.500" in p and "EDIT-X" in p
    assert ">>>>>>> REPLACE" in p and p.endswith(PRIME)


def test_traces_are_capped_and_failures_first() -> None:
    p = build_prompt(_Task(), Harness(seed_source("minimal")), _feedback(), n_traces=2)
    assert "LONG" * 100 not in p and "pad " * 300 not in p
    assert p.count("### Problem") == 2 and "score 1.0" not in p  # 4 failures exist: both sampled are failures
    assert len(p) < 12000


def test_prompt_is_deterministic_and_varied_style_differs() -> None:
    h, fb = Harness(seed_source("minimal")), _feedback()
    assert build_prompt(_Task(), h, fb, rng_seed=3) == build_prompt(_Task(), h, fb, rng_seed=3)
    v = build_prompt(_Task(), h, fb, style="varied", rng_seed=3)
    assert v != build_prompt(_Task(), h, fb, rng_seed=3) and h.source.strip() in v and v.endswith(PRIME)
    assert len({build_prompt(_Task(), h, fb, style="varied", rng_seed=s) for s in range(6)}) > 1


def test_as_proposal_adds_the_prime_only_when_missing() -> None:
    assert as_proposal("x\n=======\ny\n>>>>>>> REPLACE") == PRIME + "x\n=======\ny\n>>>>>>> REPLACE"
    full = "Edit:\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n"
    assert as_proposal(full) == full


class _Recorder(ModelBackend):
    spec = "rec:x"

    def __init__(self) -> None:
        self.requests: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest) -> Completion:
        self.requests.append(request)
        return Completion([f"seed {request.seed}"])


def _propose(m: ModelBackend, prompt: str, k: int, seed: int = 0) -> list[str]:
    from harnesslearn.formats import PlainSearch
    from harnesslearn.rounds import revise

    cands = asyncio.run(revise(Harness(seed_source("minimal")), prompt, PlainSearch(), m, k, seed=seed, round=1,
                               concurrent=False))
    return [c.proposal for c in cands]


def test_propose_seeds_each_candidate() -> None:
    m = _Recorder()
    out = _propose(m, "P\n" + PRIME, 3, seed=10)
    assert [r.seed for r in m.requests] == [candidate_seed(10, 1, i) for i in range(3)]  # the one seed rule
    assert out[0] == PRIME + f"seed {candidate_seed(10, 1, 0)}"
    assert candidate_seed(0, 1, 0) != candidate_seed(0, 1, 1) != candidate_seed(0, 2, 0)


def test_propose_through_a_python_model(tmp_path: Any) -> None:
    f = tmp_path / "prop.py"
    f.write_text("def fn(prompt, **kw):\n    return 'x\\n=======\\ny\\n>>>>>>> REPLACE\\n'\n")
    m = load_model(f"python:{f}:fn")
    out = _propose(m, "P\n" + PRIME, 2)
    assert out == [PRIME + "x\n=======\ny\n>>>>>>> REPLACE\n"] * 2


def test_rewrite_prime_opens_a_block_on_solve() -> None:
    from harnesslearn.edits import apply_proposal

    h = Harness(seed_source("minimal"))
    p = build_prompt(_Task(), h, _feedback(), prime="rewrite")
    assert p.endswith("=======\ndef solve(model, question):\n") and "<<<<<<< SEARCH\ndef solve(" in p
    r = apply_proposal(h.source, as_proposal("    return '1'\n>>>>>>> REPLACE\n", p))
    assert r.valid and r.source is not None and "return '1'" in r.source and '"""Seed harness' in r.source


class _Stopper(ModelBackend):
    """Returns fixed text, honouring stop strings like a real server."""

    spec = "stop:x"

    def __init__(self, text: str, tokens: int) -> None:
        self.text, self.tokens = text, tokens

    async def generate(self, request: GenerateRequest) -> Completion:
        from harnesslearn.models.common import apply_stop

        return Completion([apply_stop(self.text, request.stop)], completion_tokens=self.tokens)


def _rewrite(text: str, tokens: int) -> str:
    from harnesslearn.formats import PlainRewrite
    from harnesslearn.rounds import sample

    p = build_prompt(_Task(), Harness(seed_source("minimal")), _feedback(), prime="rewrite")
    out, _, _ = asyncio.run(sample(_Stopper(text, tokens), PlainRewrite(), p, max_tokens=64))
    return out


def test_rewrite_decoding_ends_the_body_like_humaneval() -> None:
    from harnesslearn.edits import apply_proposal

    src = seed_source("minimal")
    # stops at the first marker; junk after it never reaches the edit
    out = _rewrite("    return '1'\n>>>>>>> REPLACE\n<<<<<<< SEARCH\nbroken", 20)
    assert "broken" not in out and apply_proposal(src, out).valid
    # prose after the body (a dedented line) ends it
    out = _rewrite("    return '2'\n\nan edit that does things:\n", 20)
    assert "an edit" not in out and apply_proposal(src, out).valid
    # cut by max_tokens inside the body: no marker added, the edit stays invalid
    out = _rewrite("    return (", 64)
    assert ">>>>>>> REPLACE" not in out and not apply_proposal(src, out).valid


# ---------------------------------------------------------------- chat form (instruction-tuned proposers)
def test_chat_messages_hold_every_section_and_no_foreign_example() -> None:
    from harnesslearn.proposer import build_messages, solve_lines, template

    h = Harness(seed_source("minimal"))
    hist = [Attempt(1, 1, True, None, 0.3, 0.5, "EDIT-X")]
    msgs = build_messages(_Task(), h, _feedback(), hist)
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert _Task.description in user and h.source.strip() in user and "Gold answer:" in user and "EDIT-X" in user
    assert runtime_api_doc().strip()[:200] in user
    # the lines offered for SEARCH are the current harness's own solve function ...
    lines = solve_lines(h.source)
    assert lines and user.rstrip().endswith(lines)
    # ... and nothing of the plain form's worked example (a foreign harness) is shown
    example = template("few_shot")
    assert "Think step by step, then give the final answer on the last line" in example
    assert "Think step by step, then give the final answer on the last line" not in user
    assert PRIME not in user  # markers are described in words, never as a block to copy


def test_chat_rewrite_prime_is_an_open_assistant_turn() -> None:
    from harnesslearn.edits import apply_proposal
    from harnesslearn.formats import ChatPrefill
    from harnesslearn.proposer import build_messages, rewrite_tail

    h = Harness(seed_source("minimal"))
    msgs = build_messages(_Task(), h, _feedback(), prime="rewrite")
    assert msgs[-1]["role"] == "assistant" and msgs[-1]["content"] == rewrite_tail(h.source)
    body = "    import re\n    return re.sub('x', '', question)\n\nThis edit removes x.\n"
    r = apply_proposal(h.source, ChatPrefill().decode(body, msgs, hit_max_tokens=False))
    assert r.valid and r.source is not None and "re.sub" in r.source and "This edit" not in r.source
    assert not apply_proposal(h.source, ChatPrefill().decode("    return (", msgs, hit_max_tokens=True)).valid


def test_chat_completion_without_blocks_stays_invalid() -> None:
    from harnesslearn.edits import apply_proposal
    from harnesslearn.proposer import build_messages

    msgs = build_messages(_Task(), Harness(seed_source("minimal")), _feedback())
    whole_file = "```python\ndef solve(model, question):\n    return '2'\n```"
    assert as_proposal(whole_file, msgs) == whole_file  # nothing is put in front of a chat answer
    assert apply_proposal(seed_source("minimal"), as_proposal(whole_file, msgs)).reason == "no_blocks"


def test_prompt_form_follows_the_chat_template() -> None:
    from harnesslearn.proposer import prompt_form

    class M(ModelBackend):
        def __init__(self, chat: bool | None) -> None:
            self.chat = chat

        async def generate(self, request: GenerateRequest) -> Completion:
            return Completion(["x"])

        def chat_template(self) -> bool | None:
            return self.chat

    assert prompt_form(M(True)) == "chat" and prompt_form(M(False)) == "plain" and prompt_form(M(None)) == "plain"
    assert prompt_form(M(False), "chat") == "chat" and prompt_form(M(True), "plain") == "plain"
    assert prompt_form(load_model("openai:x?endpoint=completions", cache=False)) == "plain"
    assert prompt_form(load_model("openai:x", cache=False)) == "chat"


def test_chat_without_an_assistant_start_asks_for_the_block_and_otherwise_is_the_same() -> None:
    from harnesslearn.proposer import build_messages, template

    h = Harness(seed_source("minimal"))
    plain_user = build_messages(_Task(), h, _feedback())[1]["content"]
    primed_user = build_messages(_Task(), h, _feedback(), prime="rewrite")[1]["content"]
    ask = template("chat_open")
    assert ask in plain_user and ask not in primed_user
    assert plain_user.replace("\n" + ask, "") == primed_user  # the only difference


def test_chat_rewrite_without_an_assistant_start_wraps_the_reply_function_in_a_block() -> None:
    from harnesslearn.edits import apply_proposal
    from harnesslearn.formats import ChatFunction
    from harnesslearn.proposer import build_messages, template

    src = seed_source("minimal")
    msgs = build_messages(_Task(), Harness(src), _feedback(), prime="rewrite", prefill=False)
    assert msgs[-1]["role"] == "user" and template("chat_function").split("\n")[0] in msgs[-1]["content"]
    fn = "def solve(model, question):\n    import re\n    return re.sub('x', '', question)\n"

    def finish(text: str, hit: bool = False) -> Any:
        return apply_proposal(src, ChatFunction().decode(text, msgs, hit_max_tokens=hit, source=src))

    r = finish(f"Here is the new function:\n```python\n{fn}```\nIt removes every x.")
    assert r.valid and r.source is not None and "re.sub" in r.source and "removes" not in r.source
    assert finish(f"```python\n{fn}").valid  # no closing fence, but the text ended before the token limit
    assert not finish("```python\ndef solve(model, question):\n    return (", hit=True).valid  # cut by max_tokens
    # imports and a docstring around it are fine (the imports land in front of the new solve) ...
    r = finish(f"```python\n\"\"\"A harness.\"\"\"\nimport math\nfrom re import sub\n\n{fn}```")
    assert r.valid and r.source is not None and "import math\nfrom re import sub\ndef solve" in r.source
    assert r.source.count("A harness.") == 0
    # ... but other module code is a rewritten file: still invalid, as is a reply with no solve at all
    assert finish(f"```python\nimport re\n\n{fn}\nprint(solve(None, 'x'))\n```").reason == "no_blocks"
    assert finish(f"```python\ndef helper():\n    return 1\n\n{fn}```").reason == "no_blocks"
    assert finish("I would change the prompt.").reason == "no_blocks"
    # a fence inside the code (in a string) does not close the block
    inner = "def solve(model, question):\n    reply = model(question)\n    return reply.split('```')[0]\n"
    r = finish(f"```python\n{inner}```\n")
    assert r.valid and r.source is not None and "split('```')[0]" in r.source
    # comments around the function are fine
    assert finish(f"```python\n# revised\n{fn}```").valid
    # unfenced, the whole reply is the code: prose before or after the function makes it no function
    assert finish(fn).valid
    assert finish(f"Here is the fix:\n\n{fn}\nThis should work better.").reason == "no_blocks"
    assert finish(f"Sure!\n{fn}").reason == "no_blocks"
    assert finish(f"{fn}\nThe regex drops every x.").reason == "no_blocks"


# ---------------------------------------------------------------- formats (harnesslearn.formats)
def test_the_format_is_decided_once_from_the_settings_and_the_backend() -> None:
    from harnesslearn.formats import FORMATS, resolve

    class M(ModelBackend):
        def __init__(self, chat: bool | None, prefill: bool) -> None:
            self.chat, self.prefill = chat, prefill

        async def generate(self, request: GenerateRequest) -> Completion:
            return Completion(["x"])

        def chat_template(self) -> bool | None:
            return self.chat

        def continues_assistant(self) -> bool:
            return self.prefill

    assert resolve(M(True, True)).name == "chat-prefill"  # in process: the turn is continued
    assert resolve(M(True, False)).name == "chat-function"  # a chat API: the rewrite asked in words
    assert resolve(M(False, True)).name == "plain-search" and resolve(M(None, False)).name == "plain-search"
    assert resolve(M(True, True), prime="search").name == "chat-blocks"
    assert resolve(M(False, True), prime="rewrite").name == "plain-rewrite"
    assert resolve(M(True, True), form="plain", prime="rewrite").name == "plain-rewrite"
    assert resolve(None, "chat", "rewrite", prefill=True).name == "chat-prefill"  # training: the policy continues
    assert set(FORMATS) == {"plain-search", "plain-rewrite", "chat-blocks", "chat-prefill", "chat-function",
                            "chat-file"}


def test_every_format_writes_a_target_that_its_own_decoding_turns_back_into_the_child() -> None:
    """target(parent, child) is an SFT completion: decoded in the same format it must make the child."""
    from harnesslearn import zoo
    from harnesslearn.blocks import inline_solve
    from harnesslearn.edits import apply_proposal
    from harnesslearn.formats import FORMATS, PromptContext
    from harnesslearn.harness import normalise

    parent = Harness(seed_source("minimal"))
    child = zoo.source("interpreter_loop")
    for name, cls in FORMATS.items():
        fmt = cls()
        prompt = fmt.render(PromptContext(_Task(), parent, _feedback()))
        completion = fmt.target(parent.source, child)
        r = apply_proposal(parent.source, fmt.decode(completion, prompt, source=parent.source))
        assert r.valid and r.source is not None, (name, r.reason, r.detail)
        want = normalise(child) if name in ("plain-search", "chat-blocks", "chat-file") else None
        # rewrite formats rebuild the child inside solve (helpers inlined); whole blocks give the file itself
        assert r.source == want if want else "model.python" in r.source and r.source.count("def solve(") == 1, name
        if want is None:
            assert normalise(inline_solve(child)).split("def solve(")[1].split("\n")[1:3] == \
                r.source.split("def solve(")[1].split("\n")[1:3], name
