"""The proposer formats (propose/formats.py, propose/decode.py): each format's prompt ending, decoding
and SFT target; the one place the format is decided."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from propose_fixtures import Task, ctx, feedback

from harnesslearn.harness import Harness, seed_source
from harnesslearn.models import load_model
from harnesslearn.models.base import Completion, GenerateRequest, ModelBackend
from harnesslearn.propose.decode import PRIME, as_proposal
from harnesslearn.propose.formats import ChatBlocks, ChatFunction, ChatPrefill, PlainRewrite


def test_as_proposal_adds_the_prime_only_when_missing() -> None:
    assert as_proposal("x\n=======\ny\n>>>>>>> REPLACE") == PRIME + "x\n=======\ny\n>>>>>>> REPLACE"
    full = "Edit:\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n"
    assert as_proposal(full) == full


def test_rewrite_prime_opens_a_block_on_solve() -> None:
    from harnesslearn.propose.edits import apply_proposal

    h = Harness(seed_source("minimal"))
    p = str(PlainRewrite().render(ctx(h)))
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
    from harnesslearn.propose.formats import PlainRewrite
    from harnesslearn.propose.rounds import sample

    p = PlainRewrite().render(ctx(Harness(seed_source("minimal"))))
    out, _, _ = asyncio.run(sample(_Stopper(text, tokens), PlainRewrite(), p, max_tokens=64))
    return out


def test_rewrite_decoding_ends_the_body_like_humaneval() -> None:
    from harnesslearn.propose.edits import apply_proposal

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


# ---------------------------------------------------------------- resolve and targets
def test_chat_rewrite_prime_is_an_open_assistant_turn() -> None:
    from harnesslearn.propose.decode import rewrite_tail
    from harnesslearn.propose.edits import apply_proposal

    h = Harness(seed_source("minimal"))
    msgs = ChatPrefill().render(ctx(h))
    assert msgs[-1]["role"] == "assistant" and msgs[-1]["content"] == rewrite_tail(h.source)
    body = "    import re\n    return re.sub('x', '', question)\n\nThis edit removes x.\n"
    r = apply_proposal(h.source, ChatPrefill().decode(body, msgs, hit_max_tokens=False))
    assert r.valid and r.source is not None and "re.sub" in r.source and "This edit" not in r.source
    assert not apply_proposal(h.source, ChatPrefill().decode("    return (", msgs, hit_max_tokens=True)).valid


def test_chat_completion_without_blocks_stays_invalid() -> None:
    from harnesslearn.propose.edits import apply_proposal

    msgs = ChatBlocks().render(ctx(Harness(seed_source("minimal"))))
    whole_file = "```python\ndef solve(model, question):\n    return '2'\n```"
    assert as_proposal(whole_file, msgs) == whole_file  # nothing is put in front of a chat answer
    assert apply_proposal(seed_source("minimal"), as_proposal(whole_file, msgs)).reason == "no_blocks"


def test_auto_follows_the_chat_template_of_real_backends() -> None:
    from harnesslearn.propose.formats import resolve

    assert resolve(load_model("openai:x?endpoint=completions", cache=False)).name == "plain-search"
    assert resolve(load_model("openai:x", cache=False)).name == "chat-function"  # a chat API: no prefill
    assert resolve(load_model("openai:x?prefill=true", cache=False)).name == "chat-prefill"


def test_chat_without_an_assistant_start_asks_for_the_block_and_otherwise_is_the_same() -> None:
    from harnesslearn.propose.prompt import template

    h = Harness(seed_source("minimal"))
    plain_user = ChatBlocks().render(ctx(h))[1]["content"]
    primed_user = ChatPrefill().render(ctx(h))[1]["content"]
    ask = template("chat_open")
    assert ask in plain_user and ask not in primed_user
    assert plain_user.replace("\n" + ask, "") == primed_user  # the only difference


def test_each_chat_format_says_in_the_system_message_what_its_reply_is() -> None:
    """The system message ends with the format's own line on the reply: edit blocks only where edit blocks are
    asked for (until session 46 every chat format's system message said "You reply with SEARCH/REPLACE edit
    blocks", while chat-function and chat-file ask for a function or a file), and the edit formats' prompt is the
    one the RL adapter was trained on, word for word."""
    from harnesslearn.propose.formats import ChatFile

    h = Harness(seed_source("minimal"))
    system = {f.name: f().render(ctx(h))[0]["content"] for f in (ChatBlocks, ChatPrefill, ChatFunction, ChatFile)}
    assert len({s.rsplit("\n", 1)[0] for s in system.values()}) == 1  # the same words up to the last line
    for name in ("chat-blocks", "chat-prefill"):
        assert system[name].endswith("\n\nYou reply with SEARCH/REPLACE edit blocks.")
    assert "SEARCH" not in system["chat-function"] and "solve function" in system["chat-function"].rsplit("\n", 1)[1]
    assert "SEARCH" not in system["chat-file"] and "harness file" in system["chat-file"].rsplit("\n", 1)[1]
    user = ChatFile().render(ctx(h))[1]["content"]  # the harness it replaces is shown above the request, not below
    assert user.index("## Current harness") < user.index("harness (above)") and "(below)" not in user


def test_chat_rewrite_without_an_assistant_start_wraps_the_reply_function_in_a_block() -> None:
    from harnesslearn.propose.edits import apply_proposal
    from harnesslearn.propose.prompt import template

    src = seed_source("minimal")
    msgs = ChatFunction().render(ctx(Harness(src)))
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


def test_the_format_is_decided_once_from_the_settings_and_the_backend() -> None:
    from harnesslearn.propose.formats import FORMATS, resolve

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
    assert resolve(M(True, True), memory=True).name == "chat-file"  # memory entries come with helpers
    assert resolve(M(False, True), memory=True).name == "plain-search"  # a base model cannot write a chat file
    for name in FORMATS:  # a name is that format, whatever the backend (training has none)
        assert resolve(M(False, False), name).name == name and resolve(None, name, memory=True).name == name
    with pytest.raises(ValueError, match="needs the proposer backend"):
        resolve(None)
    with pytest.raises(ValueError, match="unknown proposer format"):
        resolve(M(True, True), "chat")
    assert set(FORMATS) == {"plain-search", "plain-rewrite", "chat-blocks", "chat-prefill", "chat-function",
                            "chat-file"}


def test_every_format_writes_a_target_that_its_own_decoding_turns_back_into_the_child() -> None:
    """target(parent, child) is an SFT completion: decoded in the same format it must make the child."""
    from harnesslearn import zoo
    from harnesslearn.harness import normalise
    from harnesslearn.propose.blocks import inline_solve
    from harnesslearn.propose.edits import apply_proposal
    from harnesslearn.propose.formats import FORMATS
    from harnesslearn.propose.prompt import PromptContext

    parent = Harness(seed_source("minimal"))
    child = zoo.source("interpreter_loop")
    for name, cls in FORMATS.items():
        fmt = cls()
        prompt = fmt.render(PromptContext(Task(), parent, feedback()))
        completion = fmt.target(parent.source, child)
        r = apply_proposal(parent.source, fmt.decode(completion, prompt, source=parent.source))
        assert r.valid and r.source is not None, (name, r.reason, r.detail)
        want = normalise(child) if name in ("plain-search", "chat-blocks", "chat-file") else None
        # rewrite formats rebuild the child inside solve (helpers inlined); whole blocks give the file itself
        assert r.source == want if want else "model.python" in r.source and r.source.count("def solve(") == 1, name
        if want is None:
            assert normalise(inline_solve(child)).split("def solve(")[1].split("\n")[1:3] == \
                r.source.split("def solve(")[1].split("\n")[1:3], name
