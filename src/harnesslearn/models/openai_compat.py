"""``openai:NAME``: any OpenAI-compatible server (vLLM, SGLang, llama.cpp server, Ollama, hosted).

Base URL from ``base_url=`` (``--solver-base-url``) or ``OPENAI_BASE_URL``; key from
``OPENAI_API_KEY`` (``"EMPTY"`` when unset, as local servers expect). Chat messages go to
``/chat/completions`` and plain text to ``/completions``; ``endpoint=chat|completions``
forces one (a str prompt sent to chat becomes one user message; messages sent to
completions are rendered with ``render_messages``). ``prefill=true`` (servers that take vLLM's
``continue_final_message``: vLLM, SGLang) continues a last assistant message instead of closing it.
``client=aiohttp`` (the ``aiohttp`` extra) posts the same requests with a minimal aiohttp client instead of
openai's (httpx): ~0.12 ms of CPU a call instead of ~1.5 ms (``benchmarks/http_client_cpu.py``), for a
trusted process that makes hundreds of calls a second to a served model; answers and faults are the same.

Faults: the client is built with ``max_retries=0`` and this module retries itself (so the
retries are counted and testable): HTTP 429, 408 and 5xx, timeouts (``timeout=`` seconds,
default 60, a hard deadline per attempt), connection errors and resets, and a response with
no choices are retried with exponential backoff and full jitter, honouring ``Retry-After``;
after ``max_retries`` retries (default 6) ``InfraError`` is raised. HTTP 400/413/422 (the
request itself was rejected, for example a prompt too long for the context) raise
``RequestRejected`` (a ``ValueError``: the caller's mistake, not retried); other 4xx
(bad key, unknown model) raise ``InfraError`` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import weakref
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, ClassVar

import openai

from harnesslearn.errors import InfraError, UserError
from harnesslearn.models.accounting import cost_of, estimate_tokens
from harnesslearn.models.base import Completion, GenerateRequest
from harnesslearn.models.common import Backend, apply_stop, prompt_text
from harnesslearn.models.retry import retry_async


class RequestRejected(ValueError):
    """The server rejected the request as invalid (HTTP 400/413/422); not retried."""


class EmptyResponse(Exception):
    """The server answered with no choices (treated as a transient fault)."""


class BadResponse(Exception):
    """The server answered 200 with a body that is not a completion (an HTML page from a proxy, broken
    JSON): a fault of the server, retried and then an infrastructure error; never a harness's result."""


class HTTPStatusError(Exception):
    """A non-2xx answer to the aiohttp client (``openai.APIStatusError`` is the openai client's)."""

    def __init__(self, status_code: int, message: str, retry_after: str | None) -> None:
        super().__init__(f"HTTP {status_code}: {message}")
        self.status_code, self.message, self.retry_after = status_code, message, retry_after


class ConnectionFault(Exception):
    """The aiohttp client's connection failed or was reset (``openai.APIConnectionError``'s twin)."""


def classify(e: Exception) -> tuple[bool, float | None]:
    """(transient?, Retry-After seconds) for an exception from one attempt."""
    if isinstance(e, TimeoutError | openai.APIConnectionError | ConnectionFault | EmptyResponse | BadResponse):
        return True, None
    if isinstance(e, openai.APIStatusError | HTTPStatusError):
        code = e.status_code
        if code == 429 or code == 408 or code >= 500:
            if isinstance(e, HTTPStatusError):
                ra = e.retry_after
            else:
                ra = e.response.headers.get("retry-after") if e.response is not None else None
            try:
                return True, float(ra) if ra is not None else None
            except ValueError:
                return True, None
        return False, None
    return False, None


@contextlib.asynccontextmanager
async def _bad_body() -> AsyncIterator[None]:
    """A body the client cannot decode (HTTP 200 with broken JSON) is a ``BadResponse``."""
    try:
        yield
    except json.JSONDecodeError as e:
        raise BadResponse(f"the server's answer is not JSON ({e.msg})") from None


# far above any reply we ask for (max_tokens x a few characters a token); a longer one is not a completion
MAX_REPLY_CHARS = 4_000_000
MAX_USAGE_TOKENS = 10**9


def _texts(resp: Any, *, chat: bool) -> list[str]:
    """The texts of a completion's choices. A body that is not one is a ``BadResponse`` (retried, then an
    infrastructure fault, never a harness's answer): no ``choices`` list, a choice without ``text`` (or,
    from the chat endpoint, without a ``message``), or text that is not a string; no choices at all is an
    ``EmptyResponse``. A chat message with no content (``null``) is the empty answer it says. A reply longer
    than ``MAX_REPLY_CHARS`` is an infrastructure fault of its own, not retried."""
    choices = getattr(resp, "choices", None)
    if not isinstance(choices, list):
        raise BadResponse(f"the server's answer is not a completion: {str(resp)[:120]!r}")
    if not choices:
        raise EmptyResponse("the server returned no choices")
    texts = []
    for c in choices:
        text = getattr(getattr(c, "message", None), "content", None) if chat else getattr(c, "text", None)
        if (getattr(c, "message", None) if chat else text) is None:
            raise BadResponse(f"a choice without {'a message' if chat else 'text'}: {str(c)[:120]!r}")
        if text is not None and not isinstance(text, str):
            raise BadResponse(f"a choice whose text is not a string: {str(text)[:120]!r}")
        texts.append(text or "")
    size = sum(len(t) for t in texts)
    if size > MAX_REPLY_CHARS:
        raise InfraError(f"the server's reply is oversized: {size:,} characters (over {MAX_REPLY_CHARS:,})")
    return texts


def _tokens(usage: Any, name: str) -> int | None:
    """A usage count the server reported, or None (then estimated) when it is missing or not a sane count."""
    v = getattr(usage, name, None) if usage is not None else None
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_USAGE_TOKENS else None


class OpenAIBackend(Backend):
    provider: ClassVar[str] = "openai"
    OPTIONS: ClassVar[dict[str, type]] = {
        "base_url": str, "endpoint": str, "timeout": float, "max_retries": int,
        "base_delay": float, "max_delay": float, "prefill": bool, "client": str,
    }
    DEFAULT_CONCURRENCY: ClassVar[int] = 32
    CACHE_BY_DEFAULT: ClassVar[bool] = True

    def __init__(self, name: str, *, base_url: str | None = None, endpoint: str = "auto", timeout: float = 60.0,
                 max_retries: int = 6, base_delay: float = 0.5, max_delay: float = 8.0, prefill: bool = False,
                 client: str = "openai", concurrency: int | None = None) -> None:
        super().__init__(name, concurrency=concurrency)
        if endpoint not in ("auto", "chat", "completions"):
            raise UserError(f"endpoint must be auto, chat or completions, not {endpoint!r}")
        if client not in ("openai", "aiohttp"):
            raise UserError(f"client must be openai or aiohttp, not {client!r}")
        if client == "aiohttp":
            try:
                import aiohttp  # noqa: F401
            except ImportError:
                raise UserError("client=aiohttp needs aiohttp: pip install 'harnesslearn[aiohttp]'") from None
        self.client = client
        self._sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.api_key = os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.endpoint, self.timeout, self.max_retries = endpoint, timeout, max_retries
        self.base_delay, self.max_delay, self.prefill = base_delay, max_delay, prefill
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )
        self._rng = random.Random()

    def identity(self) -> str:
        return (f"{self.spec}@{self.base_url or 'https://api.openai.com/v1'}#{self.endpoint}"
                + ("+prefill" if self.prefill else ""))

    def _client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        c = self._clients.get(loop)
        if c is None:
            c = self._clients[loop] = openai.AsyncOpenAI(
                base_url=self.base_url, api_key=self.api_key, max_retries=0, timeout=self.timeout
            )
        return c

    def chat_template(self) -> bool:
        """Messages go to the server's chat endpoint (its own template) unless ``endpoint=completions``."""
        return self.endpoint != "completions"

    def continues_assistant(self) -> bool:
        return self.prefill and self.endpoint != "completions"

    def _use_chat(self, request: GenerateRequest) -> bool:
        return self.endpoint == "chat" or (self.endpoint == "auto" and not isinstance(request.prompt, str))

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        """One request through aiohttp (one session per event loop, no connection limit of its own: the
        backend's concurrency is the limit); the JSON answer as attributes, like openai's objects."""
        import aiohttp

        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None:
            session = self._sessions[loop] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                headers={"Authorization": f"Bearer {self.api_key}"})
        url = (self.base_url or "https://api.openai.com/v1").rstrip("/") + path
        try:
            async with session.post(url, json=body) as r:
                raw = await r.read()
                if r.status >= 300:
                    try:
                        err = json.loads(raw).get("error", {})
                        message = str(err.get("message", err) if isinstance(err, dict) else err)
                    except (ValueError, AttributeError):
                        message = raw[:200].decode(errors="replace")
                    raise HTTPStatusError(r.status, message, r.headers.get("retry-after"))
        except aiohttp.ClientError as e:
            raise ConnectionFault(f"{type(e).__name__}: {e}") from None
        return json.loads(raw, object_hook=lambda d: SimpleNamespace(**d))

    def _params(self, request: GenerateRequest, n: int) -> dict[str, Any]:
        """The sampling fields of one request (either client)."""
        params: dict[str, Any] = {"model": self.name, "n": n, "temperature": request.temperature,
                                  "top_p": request.top_p, "max_tokens": request.max_tokens}
        if request.stop:
            params["stop"] = list(request.stop)
        if request.seed is not None:
            params["seed"] = request.seed
        return params

    async def _once(self, request: GenerateRequest, n: int) -> tuple[list[str], int | None, int | None]:
        if self.client == "aiohttp":
            return await self._once_aiohttp(request, n)
        client = self._client()
        params = self._params(request, n)
        async with asyncio.timeout(self.timeout), _bad_body():
            if self._use_chat(request):
                msgs = request.prompt if isinstance(request.prompt, list) else [{"role": "user", "content": request.prompt}]
                if self.prefill and msgs and msgs[-1].get("role") == "assistant":
                    params["extra_body"] = {"continue_final_message": True, "add_generation_prompt": False}
                resp: Any = await client.chat.completions.create(messages=msgs, **params)  # type: ignore[arg-type]
                texts = _texts(resp, chat=True)
            else:
                resp = await client.completions.create(prompt=prompt_text(request.prompt), **params)
                texts = _texts(resp, chat=False)
        usage = getattr(resp, "usage", None)
        return texts, _tokens(usage, "prompt_tokens"), _tokens(usage, "completion_tokens")

    async def _once_aiohttp(self, request: GenerateRequest, n: int) -> tuple[list[str], int | None, int | None]:
        body = self._params(request, n)
        chat = self._use_chat(request)
        if chat:
            msgs = request.prompt if isinstance(request.prompt, list) else [{"role": "user", "content": request.prompt}]
            body["messages"] = msgs
            if self.prefill and msgs and msgs[-1].get("role") == "assistant":
                body.update(continue_final_message=True, add_generation_prompt=False)
        else:
            body["prompt"] = prompt_text(request.prompt)
        async with asyncio.timeout(self.timeout), _bad_body():
            resp = await self._post("/chat/completions" if chat else "/completions", body)
            texts = _texts(resp, chat=chat)
        usage = getattr(resp, "usage", None)
        return texts, _tokens(usage, "prompt_tokens"), _tokens(usage, "completion_tokens")

    def _on_fault(self, e: Exception, will_retry: bool, faults: list[str]) -> None:
        status = isinstance(e, openai.APIStatusError | HTTPStatusError)
        faults.append(f"HTTP {e.status_code}" if status else type(e).__name__)  # type: ignore[attr-defined]
        self._stats.bump(faults=1, retries=1 if will_retry else 0)

    async def _generate(self, request: GenerateRequest) -> Completion:
        texts: list[str] = []
        p_tok: int | None = None
        c_tok = 0
        faults: list[str] = []
        while len(texts) < request.n:  # some servers return fewer choices than n: ask again
            try:
                got, pt, ct = await retry_async(
                    lambda: self._once(request, request.n - len(texts)), classify,
                    max_retries=self.max_retries, base_delay=self.base_delay, max_delay=self.max_delay,
                    on_fault=lambda e, w: self._on_fault(e, w, faults), rng=self._rng,
                    what=f"{self.spec} at {self.base_url or 'api.openai.com'}",
                )
            except (openai.APIStatusError, HTTPStatusError) as e:
                if e.status_code in (400, 413, 422):
                    raise RequestRejected(f"{self.spec}: HTTP {e.status_code}: {e.message}") from e
                raise InfraError(f"{self.spec}: HTTP {e.status_code}: {e.message}") from e
            texts.extend(got)
            p_tok = pt if p_tok is None else p_tok
            c_tok += ct if ct is not None else sum(estimate_tokens(t) for t in got)
        texts = [apply_stop(t, request.stop) for t in texts[: request.n]]
        if p_tok is None:
            p_tok = estimate_tokens(prompt_text(request.prompt))
        return Completion(texts=texts, prompt_tokens=p_tok, completion_tokens=c_tok,
                          cost=cost_of(self.name, p_tok, c_tok),
                          meta={"faults": faults, "retries": len(faults)})

    async def aclose(self) -> None:
        """Close this event loop's client; clients of other (finished) loops are dropped."""
        loop = asyncio.get_running_loop()
        c = self._clients.pop(loop, None)
        self._clients.clear()
        if c is not None:
            await c.close()
        session = self._sessions.pop(loop, None)
        self._sessions.clear()
        if session is not None:
            await session.close()
