"""The broker: the trusted side of one worker's frame channel.

It receives the worker's call frames, validates each request, enforces the per-problem budgets
(model calls, tokens, tool calls; wall time is enforced by the executor), limits concurrent
model calls across the executor (one shared semaphore), calls the solver or a tool, logs every
call as a ``CallRecord`` and sends the response back. The worker's final frame is validated
here too: the answer must be a plain ``str`` under the cap, whatever the worker claims.

An ``InfraError`` from the solver (server down after the backend's own retries) is not a harness
failure: it propagates out of ``serve`` so that the executor can retry the whole problem run.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from harnesslearn.errors import InfraError
from harnesslearn.models.base import GenerateRequest, ModelBackend
from harnesslearn.sandbox.launcher import ProtocolError, Worker
from harnesslearn.sandbox.records import Budgets, CallRecord, Status

WORKER_ERROR_KINDS = {"harness_error": Status.HARNESS_ERROR, "memory": Status.MEMORY,
                      "no_result": Status.NO_RESULT, "bad_result": Status.BAD_RESULT}
MAX_N = 16
MAX_LOGGED_CHARS = 20_000


@dataclass
class Outcome:
    """How a worker's run ended, as far as the channel tells. ``status`` None: the channel
    closed without a final frame (the executor looks at how the process ended)."""

    status: Status | None
    answer: str | None = None
    error: str | None = None


class InvalidRequest(ValueError):
    """A call frame whose request does not follow the runtime API."""


def _clip(x: Any) -> Any:
    if isinstance(x, str) and len(x) > MAX_LOGGED_CHARS:
        return x[:MAX_LOGGED_CHARS] + f"[... {len(x) - MAX_LOGGED_CHARS} chars]"
    return x


def parse_generate(req: Any) -> GenerateRequest:
    """Build a GenerateRequest from an untrusted request dict, checking every field."""
    if not isinstance(req, dict):
        raise InvalidRequest("request must be an object")
    prompt = req.get("prompt")
    if isinstance(prompt, list):
        ok = all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                 for m in prompt)
        if not ok or not prompt:
            raise InvalidRequest("messages must be a non-empty list of {'role': str, 'content': str}")
        prompt = [{"role": m["role"], "content": m["content"]} for m in prompt]
    elif not isinstance(prompt, str):
        raise InvalidRequest(f"prompt must be a str or a list of messages, not {type(prompt).__name__}")
    n, max_tokens, seed = req.get("n", 1), req.get("max_tokens", 256), req.get("seed")
    temperature, top_p, stop = req.get("temperature", 0.0), req.get("top_p", 1.0), req.get("stop")
    if type(n) is not int or not 1 <= n <= MAX_N:
        raise InvalidRequest(f"n must be an int in 1..{MAX_N}")
    if type(max_tokens) is not int or max_tokens < 1:
        raise InvalidRequest("max_tokens must be a positive int")
    for name, v in (("temperature", temperature), ("top_p", top_p)):
        if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
            raise InvalidRequest(f"{name} must be a finite non-negative number")
    if seed is not None and type(seed) is not int:
        raise InvalidRequest("seed must be an int or None")
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)):
        raise InvalidRequest("stop must be a str, a list of str, or None")
    return GenerateRequest(prompt=prompt, n=n, temperature=float(temperature), top_p=float(top_p),
                           max_tokens=max_tokens, stop=tuple(stop) if stop else None, seed=seed)


class BudgetExceeded(Exception):
    """A per-problem budget ran out (the run ends with status budget_exceeded)."""


@dataclass
class Broker:
    """Serves one worker for one problem. ``python_tool(code, timeout)`` and ``search_tool(query,
    k)`` are provided by the executor; ``tools`` names the tools the task allows."""

    solver: ModelBackend
    budgets: Budgets
    model_semaphore: asyncio.Semaphore
    python_tool: Callable[[str, float], Awaitable[str]]
    search_tool: Callable[[str, int], Awaitable[list[dict[str, str]]]]
    tools: tuple[str, ...]
    answer_max_chars: int
    calls: list[CallRecord] = field(default_factory=list)
    _model_calls: int = 0
    _tool_calls: int = 0
    _tokens: int = 0
    _in_flight: int = 0  # model calls of this problem now in flight
    _model_wait: float = 0.0  # finished seconds during which a model call was in flight
    _since: float = 0.0  # when the current in-flight stretch began

    def model_wait_s(self) -> float:
        """Wall seconds this problem spent waiting on the solver (queueing, generation, the
        backend's retries of server faults). The executor does not charge them to the harness's
        ``timeout_s``: model use is budgeted by calls and tokens, and a slow or faulty server must
        not turn into a harness ``timeout`` scored 0."""
        extra = time.perf_counter() - self._since if self._in_flight else 0.0
        return self._model_wait + extra

    @contextlib.asynccontextmanager
    async def _model_in_flight(self) -> AsyncIterator[None]:
        if self._in_flight == 0:
            self._since = time.perf_counter()
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._model_wait += time.perf_counter() - self._since

    async def serve(self, worker: Worker) -> Outcome:
        """Handle frames until the worker's final frame, end of stream, or a budget/protocol
        violation. Raises InfraError when the solver is unreachable."""
        events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        pending: set[asyncio.Task[None]] = set()
        pump = asyncio.create_task(self._pump(worker, events))
        try:
            while True:
                kind, payload = await events.get()
                if kind == "eof":
                    return Outcome(None)
                if kind == "protocol":
                    return Outcome(Status.BAD_RESULT, error=f"protocol violation: {payload}")
                if kind == "budget":
                    return Outcome(Status.BUDGET_EXCEEDED, error=str(payload))
                if kind == "infra":
                    raise payload
                t = payload.get("type")
                if t == "call":
                    try:
                        self._charge(payload.get("kind"))
                    except BudgetExceeded as e:
                        return Outcome(Status.BUDGET_EXCEEDED, error=str(e))
                    task = asyncio.create_task(self._handle(worker, payload, events))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                elif t in ("result", "error"):
                    return self._final(payload)
                else:
                    return Outcome(Status.BAD_RESULT, error=f"protocol violation: unexpected frame type {t!r}")
        finally:
            pump.cancel()
            for task in list(pending):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(pump, *pending, return_exceptions=True)

    async def _pump(self, worker: Worker, events: asyncio.Queue[tuple[str, Any]]) -> None:
        while True:
            try:
                frame = await worker.recv()
            except ProtocolError as e:
                await events.put(("protocol", str(e)))
                return
            if frame is None:
                await events.put(("eof", None))
                return
            await events.put(("frame", frame))

    def _charge(self, kind: Any) -> None:
        if kind == "model":
            self._model_calls += 1
            if self._model_calls > self.budgets.max_calls:
                raise BudgetExceeded(f"more than {self.budgets.max_calls} model calls")
        else:
            self._tool_calls += 1
            if self._tool_calls > self.budgets.tool_calls:
                raise BudgetExceeded(f"more than {self.budgets.tool_calls} tool calls")

    def _final(self, frame: dict[str, Any]) -> Outcome:
        if frame["type"] == "result":
            answer = frame.get("answer")
            if type(answer) is not str:
                return Outcome(Status.BAD_RESULT, error=f"answer is {type(answer).__name__}, not str")
            if len(answer) > self.answer_max_chars:
                return Outcome(Status.BAD_RESULT, error=f"answer of {len(answer)} chars exceeds {self.answer_max_chars}")
            return Outcome(Status.OK, answer=answer)
        status = WORKER_ERROR_KINDS.get(str(frame.get("kind")), Status.HARNESS_ERROR)
        tb = frame.get("traceback")
        return Outcome(status, error=str(tb)[-4000:] if tb is not None else None)

    async def _handle(self, worker: Worker, frame: dict[str, Any], events: asyncio.Queue[tuple[str, Any]]) -> None:
        kind, rid, req = frame.get("kind"), frame.get("id"), frame.get("request")
        t0 = time.perf_counter()
        record = CallRecord(kind=str(kind)[:20], request={}, response=None)
        try:
            value = await self._dispatch(kind, req, record)
            response: dict[str, Any] = {"type": "response", "id": rid, "ok": True, "value": value}
        except InvalidRequest as e:
            record.error = f"invalid request: {e}"
            response = {"type": "response", "id": rid, "ok": False, "error": record.error}
        except InfraError as e:
            record.error = f"infra: {e}"
            self.calls.append(record)
            await events.put(("infra", e))
            return
        except BudgetExceeded as e:
            await events.put(("budget", e))
            return
        except Exception as e:  # a model/tool error becomes ModelError in the harness
            record.error = f"{type(e).__name__}: {e}"[:1000]
            response = {"type": "response", "id": rid, "ok": False, "error": record.error}
        record.latency_s = time.perf_counter() - t0
        self.calls.append(record)
        with contextlib.suppress(ConnectionError, OSError):
            await worker.send(response)

    async def _dispatch(self, kind: Any, req: Any, record: CallRecord) -> Any:
        if kind == "model":
            gen = parse_generate(req)
            record.request = {"prompt": _clip(gen.prompt) if isinstance(gen.prompt, str) else gen.prompt,
                              "n": gen.n, "temperature": gen.temperature, "max_tokens": gen.max_tokens,
                              "stop": list(gen.stop) if gen.stop else None, "top_p": gen.top_p, "seed": gen.seed}
            async with self._model_in_flight(), self.model_semaphore:
                completion = await self.solver.generate(gen)
            record.prompt_tokens, record.completion_tokens = completion.prompt_tokens, completion.completion_tokens
            texts = [str(t) for t in completion.texts]
            record.response = [_clip(t) for t in texts]
            self._tokens += completion.prompt_tokens + completion.completion_tokens
            if self._tokens > self.budgets.max_tokens:
                raise BudgetExceeded(f"more than {self.budgets.max_tokens} tokens")
            return texts
        if kind not in self.tools:
            raise InvalidRequest(f"tool {str(kind)[:40]!r} is not available for this task (tools: {', '.join(self.tools)})")
        if not isinstance(req, dict):
            raise InvalidRequest("request must be an object")
        if kind == "python":
            code, timeout = req.get("code"), req.get("timeout", 5.0)
            if not isinstance(code, str) or type(timeout) not in (int, float) or not math.isfinite(timeout):
                raise InvalidRequest("python(code: str, timeout: float)")
            record.request = {"code": _clip(code), "timeout": timeout}
            out = await self.python_tool(code, float(timeout))
            record.response = _clip(out)
            return out
        query, k = req.get("query"), req.get("k", 5)
        if not isinstance(query, str) or type(k) is not int or k < 0:
            raise InvalidRequest("search(query: str, k: int)")
        record.request = {"query": _clip(query), "k": k}
        docs = await self.search_tool(query, min(k, 50))
        record.response = docs
        return docs
