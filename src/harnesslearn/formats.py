"""Proposer formats: how the proposer is asked for a revision, and how what it writes becomes a proposal.

One small class per format, resolved once (:func:`resolve`) from the settings and the backend's
capabilities, then carried by adaptation, the GRPO contexts and reward, both SFT-data generators and
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

Each has ``render(context)`` (the prompt), ``stop`` (stop strings while sampling), ``decode(completion,
prompt, ...)`` (the proposal text, which ``edits.apply_proposal`` judges) and ``target(parent, child)``
(what the model should have written: an SFT row's completion, for a revision given as a child
harness). Adding a format is one class and one line in ``FORMATS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from harnesslearn.blocks import diff_blocks, inline_solve, rewrite_completion
from harnesslearn.harness import Harness
from harnesslearn.models.base import Messages, ModelBackend
from harnesslearn.proposer import (
    END,
    PRIME,
    Attempt,
    Style,
    as_proposal,
    build_messages,
    build_prompt,
    finish_body,
    finish_file,
    finish_function,
    primed_tail,
    prompt_form,
    resolve_prime,
    solve_lines,
)

if TYPE_CHECKING:
    from harnesslearn.evaluation import Evaluation

REWRITE_STOP = (END, "\n<<<<<<<", "\n=======")


@dataclass(frozen=True)
class PromptContext:
    """What a revision prompt is made of: the task, the harness to revise, its feedback-split
    evaluation, earlier attempts, and the prompt's style and sampling of traces."""

    task: Any  # anything with a ``description``
    harness: Harness
    feedback: Evaluation | Any
    history: Sequence[Attempt] = ()
    style: Style = "canonical"
    n_traces: int = 4
    rng_seed: int = 0
    memory: Sequence[Any] = ()  # harness memory entries shown to the proposer (``memory.Entry``)


def _kw(ctx: PromptContext) -> dict[str, Any]:
    return {"style": ctx.style, "n_traces": ctx.n_traces, "rng_seed": ctx.rng_seed, "memory": ctx.memory}


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
        return build_prompt(ctx.task, ctx.harness, ctx.feedback, ctx.history, prime="search", **_kw(ctx))


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
        return build_prompt(ctx.task, ctx.harness, ctx.feedback, ctx.history, prime="rewrite", **_kw(ctx))


class ChatBlocks(ProposerFormat):
    name = "chat-blocks"
    chat = True

    def render(self, ctx: PromptContext) -> Messages:
        return build_messages(ctx.task, ctx.harness, ctx.feedback, ctx.history, prime="none", **_kw(ctx))


class ChatPrefill(_RewriteTarget):
    name = "chat-prefill"
    chat = True
    stop: ClassVar[tuple[str, ...] | None] = (*REWRITE_STOP, "\n```")

    def render(self, ctx: PromptContext) -> Messages:
        return build_messages(ctx.task, ctx.harness, ctx.feedback, ctx.history, prime="rewrite", prefill=True,
                              **_kw(ctx))


class ChatFunction(ProposerFormat):
    name = "chat-function"
    chat = True
    rewrite = True

    def render(self, ctx: PromptContext) -> Messages:
        return build_messages(ctx.task, ctx.harness, ctx.feedback, ctx.history, prime="rewrite", prefill=False,
                              **_kw(ctx))

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
        return build_messages(ctx.task, ctx.harness, ctx.feedback, ctx.history, prime="file", **_kw(ctx))

    def decode(self, completion: str, prompt: str | Messages, *, hit_max_tokens: bool = False,
               source: str | None = None) -> str:
        return finish_file(completion, source, hit_max_tokens=hit_max_tokens)

    def target(self, parent: str, child: str) -> str:
        from harnesslearn.harness import normalise

        return f"```python\n{normalise(child).rstrip()}\n```\n"


FORMATS: dict[str, type[ProposerFormat]] = {
    f.name: f for f in (PlainSearch, PlainRewrite, ChatBlocks, ChatPrefill, ChatFunction, ChatFile)
}


def by_name(name: str) -> ProposerFormat:
    """A format by its name (``FORMATS``); ValueError for an unknown one."""
    if name not in FORMATS:
        raise ValueError(f"unknown proposer format {name!r} (known: {', '.join(FORMATS)})")
    return FORMATS[name]()


def resolve(proposer: ModelBackend | None, form: str = "auto", prime: str = "auto", *,
            prefill: bool | None = None, memory: bool = False) -> ProposerFormat:
    """The one place the format is decided. ``form`` (``auto``: chat when messages reach the proposer
    through its own chat template) and ``prime`` (``auto``: rewrite for chat, search for plain; a whole
    file for chat when the prompt shows harness ``memory``) come from the settings; a chat rewrite of
    ``solve`` is continued in an assistant turn where the backend can (``prefill``, default
    ``proposer.continues_assistant()``), else asked for in words."""
    if proposer is None and "auto" in (form, prime):
        raise ValueError("an 'auto' form or prime needs the proposer backend")
    f = form if proposer is None else prompt_form(proposer, form)
    p = prime if proposer is None else resolve_prime(proposer, f, prime)  # type: ignore[arg-type]
    if p == "file" or (prime == "auto" and memory and f == "chat"):
        if f != "chat":
            raise ValueError("whole-file rewrites (prime 'file') need a chat prompt form")
        return ChatFile()
    if f == "plain":
        return PlainRewrite() if p == "rewrite" else PlainSearch()
    if p != "rewrite":
        return ChatBlocks()
    can = prefill if prefill is not None else proposer is not None and proposer.continues_assistant()
    return ChatPrefill() if can else ChatFunction()


def continuation(proposal: str, prompt: str | Messages) -> str:
    """What the model wrote after ``prompt`` for ``proposal``: the proposal without the open block the
    prompt already ends with (``proposer.primed_tail``)."""
    tail = primed_tail(prompt)
    return proposal[len(tail):] if tail and proposal.startswith(tail) else proposal
