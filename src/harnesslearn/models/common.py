"""What every provider shares: spec parsing, the concurrency limit and the accounting.

A provider subclasses ``Backend`` and implements ``_generate``; ``Backend.generate`` adds
the concurrency limit (an ``asyncio.Semaphore`` per event loop, so a backend may be used
from successive ``asyncio.run`` calls), timing, and the per-backend ``Stats``.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from abc import abstractmethod
from typing import Any, ClassVar

from harnesslearn.errors import InfraError, UserError
from harnesslearn.models.accounting import Stats
from harnesslearn.models.base import Completion, GenerateRequest, Messages, ModelBackend
from harnesslearn.specs import parse_spec

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def split_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """``"PROVIDER:NAME?k=v&k2=v2"`` -> (provider, name, {k: v}) through the shared spec parser
    (``harnesslearn.specs``). Raises UserError."""
    s = parse_spec(spec, "model spec", "PROVIDER:NAME (for example openai:Qwen3-8B)")
    return s.prefix, s.name, s.options


def coerce_option(provider: str, key: str, value: Any, typ: type) -> Any:
    """Convert a spec option (a string from ``?k=v``, or a keyword) to ``typ``."""
    if value is None or isinstance(value, typ) and not (typ is int and isinstance(value, bool)):
        return value
    if typ is bool and isinstance(value, str):
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
    else:
        try:
            return typ(value)
        except (TypeError, ValueError):
            pass
    raise UserError(f"bad value {value!r} for option {key!r} of provider {provider!r}: expected {typ.__name__}")


def render_messages(messages: Messages) -> str:
    """Render chat messages as one plain prompt for a base model with no chat template.

    The format, deterministic and documented for users::

        System: <system content>

        User: <user content>

        Assistant: <assistant content>

        User: <...>

        Assistant:

    Each message becomes ``"<Role>: <content>"`` (role capitalised; unknown roles are kept
    as written), messages are separated by a blank line, and the prompt ends with
    ``"Assistant:"`` so that the model continues as the assistant. If the last message is
    already from the assistant, its content is continued instead (no new turn is opened).
    """
    parts = []
    for m in messages:
        role = str(m.get("role", "user"))
        parts.append(f"{role[:1].upper()}{role[1:]}: {m.get('content', '')}")
    if messages and messages[-1].get("role") == "assistant":
        return "\n\n".join(parts)
    parts.append("Assistant:")
    return "\n\n".join(parts)


def prompt_text(prompt: str | Messages) -> str:
    """The prompt as plain text (messages rendered with ``render_messages``)."""
    return prompt if isinstance(prompt, str) else render_messages(prompt)


def apply_stop(text: str, stop: tuple[str, ...] | list[str] | None) -> str:
    """Cut ``text`` before the earliest occurrence of any stop string."""
    if not stop:
        return text
    cut = len(text)
    for s in stop:
        if s:
            i = text.find(s)
            if i != -1:
                cut = min(cut, i)
    return text[:cut]


def validate_request(request: GenerateRequest) -> None:
    """Reject requests no provider can serve (a harness mistake, raised as ValueError)."""
    if not isinstance(request.prompt, str | list):
        raise ValueError("prompt must be a str or a list of chat messages")
    if isinstance(request.prompt, list) and not all(
        isinstance(m, dict) and isinstance(m.get("content", ""), str) for m in request.prompt
    ):
        raise ValueError("messages must be dicts with a str 'content'")
    if request.n < 1:
        raise ValueError(f"n must be >= 1, got {request.n}")
    if request.max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {request.max_tokens}")


class Backend(ModelBackend):
    """Base class of the providers in this package.

    Subclasses set ``provider``, ``OPTIONS`` (option name -> type, validated by
    ``load_model``), ``DEFAULT_CONCURRENCY`` and ``CACHE_BY_DEFAULT``, and implement
    ``_generate``. ``identity()`` is what, besides the request, tells two backends' answers
    apart (the cache keys on it): by default the spec without options.
    """

    provider: ClassVar[str] = ""
    OPTIONS: ClassVar[dict[str, type]] = {}
    DEFAULT_CONCURRENCY: ClassVar[int] = 8
    CACHE_BY_DEFAULT: ClassVar[bool] = True

    def __init__(self, name: str, *, concurrency: int | None = None) -> None:
        self.name = name
        self.spec = f"{self.provider}:{name}"
        self.concurrency = int(concurrency or self.DEFAULT_CONCURRENCY)
        if self.concurrency < 1:
            raise UserError(f"concurrency must be >= 1, got {self.concurrency}")
        self._stats = Stats()
        self._sems: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def identity(self) -> str:
        return self.spec

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._sems.get(loop)
        if sem is None:
            sem = self._sems[loop] = asyncio.Semaphore(self.concurrency)
        return sem

    async def generate(self, request: GenerateRequest) -> Completion:
        validate_request(request)
        async with self._semaphore():
            t0 = time.perf_counter()
            try:
                c = await self._generate(request)
            except InfraError:
                self._stats.bump(infra_errors=1)
                raise
            except Exception:
                self._stats.bump(errors=1)
                raise
            if not c.latency_s:
                c.latency_s = time.perf_counter() - t0
        self._stats.add_call(c.prompt_tokens, c.completion_tokens, c.latency_s, c.cost)
        return c

    @abstractmethod
    async def _generate(self, request: GenerateRequest) -> Completion:
        """Produce ``request.n`` completions (called under the concurrency limit)."""

    def stats(self) -> dict[str, Any]:
        d = self._stats.as_dict()
        d["spec"] = self.spec
        return d
