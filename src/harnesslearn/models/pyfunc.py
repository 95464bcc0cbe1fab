"""``python:MODULE:FUNCTION`` and ``python:FILE.py:FUNCTION``: a Python callable as a model.

The callable receives the prompt (a str, or the list of chat messages) as its first
argument and the sampling parameters as keywords: ``n``, ``temperature``, ``top_p``,
``max_tokens``, ``stop``, ``seed``. Only the keywords its signature accepts are passed (all
of them if it takes ``**kwargs``). It may be a plain function or ``async def``.

It returns one of:
- a ``str`` (one completion),
- a ``list[str]`` (``n`` completions; only when it accepts ``n``),
- a ``dict`` with ``"text"`` or ``"texts"`` and optionally ``"prompt_tokens"`` and
  ``"completion_tokens"`` (or an OpenAI-style ``"usage"`` dict),
- a ``Completion``.

If it does not accept ``n`` and ``n > 1``, it is called ``n`` times. Without reported usage,
tokens are estimated by a whitespace split. Sync callables run in a worker thread so the
event loop is never blocked; they must be thread-safe if ``concurrency > 1``.
Exceptions raised by the callable propagate unchanged (an ``InfraError`` it raises is
treated as an infrastructure fault by the executor; anything else is a model error).
Stop strings are applied to what it returns (text is cut before the first stop string).
The response cache is off by default for this provider (callables are cheap and may be
stateful); pass ``cache=True`` to ``load_model`` to turn it on.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, ClassVar

from harnesslearn import pyref
from harnesslearn.models.accounting import estimate_tokens
from harnesslearn.models.base import Completion, GenerateRequest
from harnesslearn.models.common import Backend, apply_stop, prompt_text

PARAMS = ("n", "temperature", "top_p", "max_tokens", "stop", "seed")


def load_callable(ref: str) -> Callable[..., Any]:
    """Resolve ``MODULE:FUNCTION`` or ``FILE.py:FUNCTION`` of a ``python:`` model (UserError when it cannot)."""
    return pyref.load(ref, "python model", "python:MODULE:FUNCTION or python:FILE.py:FUNCTION")


def accepted_params(fn: Callable[..., Any]) -> frozenset[str]:
    """The sampling keywords ``fn`` accepts (all of them if it takes ``**kwargs``)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return frozenset(PARAMS)
    ps = sig.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ps):
        return frozenset(PARAMS)
    return frozenset(
        p.name for p in ps
        if p.name in PARAMS and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )


class PythonBackend(Backend):
    provider: ClassVar[str] = "python"
    OPTIONS: ClassVar[dict[str, type]] = {}
    DEFAULT_CONCURRENCY: ClassVar[int] = 8
    CACHE_BY_DEFAULT: ClassVar[bool] = False

    def __init__(self, name: str, *, fn: Callable[..., Any] | None = None, concurrency: int | None = None) -> None:
        super().__init__(name, concurrency=concurrency)
        self.fn = fn if fn is not None else load_callable(name)
        self.accepts = accepted_params(self.fn)
        self.is_async = inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(
            getattr(self.fn, "__call__", None)  # noqa: B004 - async __call__ objects
        )

    async def _call(self, request: GenerateRequest, n: int) -> Any:
        params = {"n": n, "temperature": request.temperature, "top_p": request.top_p,
                  "max_tokens": request.max_tokens, "stop": list(request.stop) if request.stop else None,
                  "seed": request.seed}
        kw = {k: v for k, v in params.items() if k in self.accepts}
        prompt = list(request.prompt) if isinstance(request.prompt, list) else request.prompt
        if self.is_async:
            return await self.fn(prompt, **kw)
        result = await asyncio.to_thread(self.fn, prompt, **kw)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _generate(self, request: GenerateRequest) -> Completion:
        if "n" in self.accepts or request.n == 1:
            results = [await self._call(request, request.n)]
        else:
            results = [await self._call(request, 1) for _ in range(request.n)]
        texts: list[str] = []
        p_tok: int | None = None
        c_tok = 0
        for r in results:
            t, pt, ct = _unpack(r)
            texts.extend(t)
            p_tok = pt if p_tok is None else p_tok
            c_tok += ct if ct is not None else sum(estimate_tokens(x) for x in t)
        if len(texts) != request.n:
            raise TypeError(f"python model {self.name} returned {len(texts)} completions for n={request.n}")
        texts = [apply_stop(t, request.stop) for t in texts]
        if p_tok is None:
            p_tok = estimate_tokens(prompt_text(request.prompt))
        return Completion(texts=texts, prompt_tokens=p_tok, completion_tokens=c_tok)


def _unpack(r: Any) -> tuple[list[str], int | None, int | None]:
    """(texts, prompt_tokens or None, completion_tokens or None) from a callable's return."""
    if isinstance(r, Completion):
        return list(r.texts), r.prompt_tokens, r.completion_tokens
    if isinstance(r, str):
        return [r], None, None
    if isinstance(r, list | tuple) and all(isinstance(x, str) for x in r):
        return list(r), None, None
    if isinstance(r, dict):
        texts = r.get("texts", [r["text"]] if "text" in r else None)
        if isinstance(texts, list) and all(isinstance(x, str) for x in texts):
            usage = r.get("usage") or {}
            pt = r.get("prompt_tokens", usage.get("prompt_tokens"))
            ct = r.get("completion_tokens", usage.get("completion_tokens"))
            return texts, (int(pt) if pt is not None else None), (int(ct) if ct is not None else None)
    raise TypeError(
        f"python model returned {type(r).__name__}; expected str, list[str], a dict with 'text'/'texts', or Completion"
    )
