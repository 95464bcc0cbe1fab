"""Test helpers: a tiny OpenAI-compatible HTTP server and a fault-injecting HTTP proxy.

Both are plain asyncio (no test dependency) and run in a background thread with their own
event loop, so a test can point a client or a subprocess (the CLI) at them.

``FaultProxy`` forwards HTTP/1.1 requests to an upstream server, one request per
connection (it sends ``Connection: close`` both ways), except that for a chosen fraction
of requests it injects a fault instead: ``"500"`` (an HTTP 500 answer), ``"stall"``
(reads the request, then sends nothing for ``stall_s`` seconds and closes) or ``"drop"``
(closes the connection without answering). Faults are drawn from a seeded RNG, or taken in
order from an explicit ``schedule`` list (``None`` entries forward normally).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

FAULTS = ("500", "stall", "drop")


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str], bytes] | None:
    """(request line + headers as raw bytes, lower-cased headers, body) or None at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    headers: dict[str, str] = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
    return head, headers, body


def set_connection_close(head: bytes) -> bytes:
    lines = [ln for ln in head.decode("latin-1").split("\r\n") if ln and not ln.lower().startswith("connection:")]
    return ("\r\n".join(lines) + "\r\nConnection: close\r\n\r\n").encode("latin-1")


def http_response(status: int, body: bytes, reason: str = "OK", content_type: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n"
    ).encode() + body


class _ThreadServer:
    """Runs ``self._handle`` as an asyncio server on 127.0.0.1 in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def start(self) -> _ThreadServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        async def _close() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(_close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def echo_reply(path: str, req: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-shaped answer echoing the prompt: ``"echo: <last 20 chars>"`` per choice."""
    n = int(req.get("n", 1))
    if "chat" in path:
        prompt = req["messages"][-1]["content"]
        text = f"echo: {prompt[-20:]}"
        choices = [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                   for i in range(n)]
        obj = "chat.completion"
    else:
        prompt = req["prompt"]
        text = f"echo: {prompt[-20:]}"
        choices = [{"index": i, "text": text, "finish_reason": "stop", "logprobs": None} for i in range(n)]
        obj = "text_completion"
    return {"id": "x", "object": obj, "created": 0, "model": req.get("model", "m"), "choices": choices,
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 2 * n,
                      "total_tokens": len(prompt.split()) + 2 * n}}


class FakeOpenAIServer(_ThreadServer):
    """Answers ``/v1/completions`` and ``/v1/chat/completions`` with ``reply(path, json)``."""

    def __init__(self, reply: Callable[[str, dict[str, Any]], dict[str, Any]] = echo_reply) -> None:
        super().__init__()
        self.reply = reply
        self.requests: list[dict[str, Any]] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                got = await read_request(reader)
                if got is None:
                    break
                head, _, body = got
                path = head.split(b" ")[1].decode()
                req = json.loads(body or b"{}")
                self.requests.append(req)
                writer.write(http_response(200, json.dumps(self.reply(path, req)).encode()))
                await writer.drain()
                break
        finally:
            writer.close()


class FaultProxy(_ThreadServer):
    """Forwards to ``upstream`` (host, port), injecting faults; ``counts`` tallies them."""

    def __init__(self, upstream: tuple[str, int], *, fraction: float = 0.0, faults: tuple[str, ...] = FAULTS,
                 schedule: list[str | None] | None = None, stall_s: float = 30.0, seed: int = 0) -> None:
        super().__init__()
        self.upstream, self.fraction, self.faults = upstream, fraction, faults
        self.schedule = list(schedule) if schedule is not None else None
        self.stall_s = stall_s
        self.rng = random.Random(seed)
        self.counts: Counter[str] = Counter()

    def _pick(self) -> str | None:
        if self.schedule is not None:
            return self.schedule.pop(0) if self.schedule else None
        return self.rng.choice(self.faults) if self.rng.random() < self.fraction else None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            got = await read_request(reader)
            if got is None:
                return
            head, _, body = got
            fault = self._pick()
            self.counts[fault or "forwarded"] += 1
            if fault == "500":
                writer.write(http_response(500, b'{"error": {"message": "injected fault"}}', "Internal Server Error"))
                await writer.drain()
            elif fault == "stall":
                await asyncio.sleep(self.stall_s)
            elif fault == "drop":
                return
            else:
                await self._forward(set_connection_close(head) + body, writer)
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _forward(self, raw: bytes, writer: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection(*self.upstream)
        try:
            uw.write(raw)
            await uw.drain()
            data = await ur.read()  # upstream closes after one response (Connection: close)
        finally:
            uw.close()
        head, sep, rest = data.partition(b"\r\n\r\n")
        writer.write(set_connection_close(head) + rest if sep else data)
        await writer.drain()


if __name__ == "__main__":  # serve the echo server until killed: python tests/fault_proxy.py
    import sys
    import time

    srv = FakeOpenAIServer().start()
    sys.stdout.write(f"{srv.url}\n")
    sys.stdout.flush()
    while True:
        time.sleep(3600)
