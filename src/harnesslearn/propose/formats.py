"""Proposer formats: how the proposer is asked for a revision, and how what it writes becomes a proposal.

One small class per format, resolved once (:func:`resolve`) from the one setting ``proposer_format`` and the
backend's capabilities, then carried by adaptation, the GRPO contexts and reward, both SFT-data generators and
the experiments:

    plain-search    a plain text ending in an open SEARCH marker; the model writes whole blocks (base models)
    plain-rewrite   a plain text ending in a block opened on the current ``solve`` (divider and ``def``
                    line written): the model writes the new body
    chat-blocks     chat messages asking for whole SEARCH/REPLACE blocks
    chat-prefill    chat messages plus the rewrite block opened in a last assistant message, which the
                    engine continues (in process, or a server that takes ``continue_final_message``)
    chat-function   chat messages asking in words for the new ``solve`` in a code block (chat APIs that
                    cannot continue an assistant turn); the reply's function becomes the block's REPLACE
    chat-file       chat messages asking for the complete new harness file (module helpers allowed): a
                    whole-file rewrite, judged like any edit (it must parse, define solve, pass the
                    checks and differ from the parent); chosen for chat proposers that are shown
                    harness memory, whose entries come with module-level helpers

Each has ``render(context)`` (the prompt: the sections of ``prompt.py`` and the format's own ending or
answer request), ``stop`` (stop strings while sampling), ``decode(completion,
prompt, ...)`` (the proposal text, which ``edits.apply_proposal`` judges) and ``target(parent, child)``
(what the model should have written: an SFT row's completion, for a revision given as a child
harness). Adding a format is one class and one line in ``FORMATS``.
"""

from __future__ import annotations

from string import Template
from typing import ClassVar, Literal

from harnesslearn.harness import normalise
from harnesslearn.models.base import Messages, ModelBackend
from harnesslearn.propose.blocks import diff_blocks, inline_solve, rewrite_completion
from harnesslearn.propose.decode import (
    DIVIDER,
    END,
    PRIME,
    as_proposal,
    finish_body,
    finish_file,
    finish_function,
    primed_tail,
    rewrite_tail,
    solve_lines,
)
from harnesslearn.propose.prompt import PromptContext, chat_prompt, plain_prompt, template

REWRITE_STOP = (END, "\n<<<<<<<", f"\n{DIVIDER}")


def _search(ctx: PromptContext) -> str:
    """The lines a chat prompt shows as the SEARCH to copy: the harness's own ``solve``."""
    return solve_lines(ctx.harness.source) or ctx.harness.source.rstrip("\n")


class ProposerFormat:
    """Base of the formats (see the module docstring)."""

    name: ClassVar[str] = ""
    chat: ClassVar[bool] = False  # the prompt is chat messages
    rewrite: ClassVar[bool] = False  # the model writes a new ``solve`` rather than whole blocks
    stop: ClassVar[tuple[str, ...] | None] = None

    def render(self, ctx: PromptContext) -> str | Messages:
        raise NotImplementedError

    def decode(self, completion: str, prompt: str | Messages, *, hit_max_tokens: bool = False,
               source: str | None = None) -> str:
        """The proposal text for a raw completion of ``prompt`` (``source``: the harness revised).
        Whole blocks are the proposal as they stand (after the prompt's open SEARCH marker, if any)."""
        return as_proposal(completion, prompt)

    def target(self, parent: str, child: str) -> str:
        """The completion that makes ``child`` from ``parent`` in this format (verified to apply)."""

        blocks = diff_blocks(parent, child)
        return blocks[len(PRIME):] if not self.chat and blocks.startswith(PRIME) else blocks

    def __repr__(self) -> str:
        return f"<format {self.name}>"


class PlainSearch(ProposerFormat):
    name = "plain-search"

    def render(self, ctx: PromptContext) -> str:
        return plain_prompt(ctx) + PRIME


class _RewriteTarget(ProposerFormat):
    rewrite = True
    stop: ClassVar[tuple[str, ...] | None] = REWRITE_STOP

    def decode(self, completion: str, prompt: str | Messages, *, hit_max_tokens: bool = False,
               source: str | None = None) -> str:
        return finish_body(completion, prompt, hit_max_tokens=hit_max_tokens)

    def target(self, parent: str, child: str) -> str:

        return rewrite_completion(parent, inline_solve(child))[0]


class PlainRewrite(_RewriteTarget):
    name = "plain-rewrite"

    def render(self, ctx: PromptContext) -> str:
        return plain_prompt(ctx) + (rewrite_tail(ctx.harness.source) or PRIME)


class ChatBlocks(ProposerFormat):
    name = "chat-blocks"
    chat = True

    def render(self, ctx: PromptContext) -> Messages:
        opening = "\n" + template("chat_open")
        return chat_prompt(ctx, Template(template("chat_format")).substitute(search=_search(ctx), open=opening),
                           template("chat_reply_blocks"))


class ChatPrefill(_RewriteTarget):
    name = "chat-prefill"
    chat = True
    stop: ClassVar[tuple[str, ...] | None] = (*REWRITE_STOP, "\n```")

    def render(self, ctx: PromptContext) -> Messages:
        msgs = chat_prompt(ctx, Template(template("chat_format")).substitute(search=_search(ctx), open=""),
                           template("chat_reply_blocks"))
        return [*msgs, {"role": "assistant", "content": rewrite_tail(ctx.harness.source) or PRIME}]


class ChatFunction(ProposerFormat):
    name = "chat-function"
    chat = True
    rewrite = True

    def render(self, ctx: PromptContext) -> Messages:
        return chat_prompt(ctx, Template(template("chat_function")).substitute(search=_search(ctx)),
                           template("chat_reply_function"))

    def decode(self, completion: str, prompt: str | Messages, *, hit_max_tokens: bool = False,
               source: str | None = None) -> str:
        return finish_function(completion, source, hit_max_tokens=hit_max_tokens)

    def target(self, parent: str, child: str) -> str:

        fn = solve_lines(inline_solve(child))
        if fn is None:
            raise ValueError("the child has no top-level solve")
        return f"```python\n{fn}\n```\n"


class ChatFile(ProposerFormat):
    name = "chat-file"
    chat = True
    rewrite = True

    def render(self, ctx: PromptContext) -> Messages:
        return chat_prompt(ctx, template("chat_file"), template("chat_reply_file"))

    def decode(self, completion: str, prompt: str | Messages, *, hit_max_tokens: bool = False,
               source: str | None = None) -> str:
        return finish_file(completion, source, hit_max_tokens=hit_max_tokens)

    def target(self, parent: str, child: str) -> str:
        return f"```python\n{normalise(child).rstrip()}\n```\n"


FORMATS: dict[str, type[ProposerFormat]] = {
    f.name: f for f in (PlainSearch, PlainRewrite, ChatBlocks, ChatPrefill, ChatFunction, ChatFile)
}
# the names, and the values of the ``proposer_format`` setting (a test keeps them equal to ``FORMATS``)
FormatName = Literal["plain-search", "plain-rewrite", "chat-blocks", "chat-prefill", "chat-function", "chat-file"]
FormatChoice = Literal["auto", FormatName]


def by_name(name: str) -> ProposerFormat:
    """A format by its name (``FORMATS``); ValueError for an unknown one."""
    if name not in FORMATS:
        raise ValueError(f"unknown proposer format {name!r} (known: {', '.join(FORMATS)})")
    return FORMATS[name]()


def resolve(proposer: ModelBackend | None, name: str = "auto", *, memory: bool = False) -> ProposerFormat:
    """The one place the format is decided, from the ``proposer_format`` setting: a format's name is that
    format; ``auto`` asks the backend. A proposer whose chat template the messages go through gets a chat
    format: ``chat-file`` when the prompt shows harness ``memory`` (borrowed harnesses come with
    module-level helpers), else a rewrite of ``solve`` (the measured best for the untrained Qwen coders,
    which as a rule fail to write whole blocks: 0/8 valid on gcd), continued in an open assistant turn
    where the backend can (``chat-prefill``) and asked for in words where it cannot (``chat-function``).
    Base models and python: callables get ``plain-search`` (a text ending in an open SEARCH marker)."""
    if name != "auto":
        return by_name(name)
    if proposer is None:
        raise ValueError("proposer_format 'auto' needs the proposer backend")
    if not proposer.chat_template():
        return PlainSearch()
    if memory:
        return ChatFile()
    return ChatPrefill() if proposer.continues_assistant() else ChatFunction()


def continuation(proposal: str, prompt: str | Messages) -> str:
    """What the model wrote after ``prompt`` for ``proposal``: the proposal without the open block the
    prompt already ends with (``decode.primed_tail``)."""
    tail = primed_tail(prompt)
    return proposal[len(tail):] if tail and proposal.startswith(tail) else proposal
