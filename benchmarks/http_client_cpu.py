"""CPU of the trusted process per model call: the ``openai:`` backend (openai's client on httpx) against raw
httpx and a minimal aiohttp client (issue 31's "a lighter HTTP client where it measurably pays").

A fake OpenAI-compatible server (keep-alive, one fixed chat completion of ~100 tokens) runs in a child
process, so only the client's CPU is counted. ``--n`` calls, ``--concurrency`` at a time, each client twice
(alternating). aiohttp is the ``aiohttp`` extra (``openai:NAME?client=aiohttp``): without it, its rows are skipped.

    .venv/bin/python benchmarks/http_client_cpu.py --n 3000 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

BODY = json.dumps({
    "id": "x", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "The answer is 42. " * 20}}],
    "usage": {"prompt_tokens": 50, "completion_tokens": 100, "total_tokens": 150},
}).encode()
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY
MESSAGES = [{"role": "user", "content": "What is six times seven? Think step by step. " * 10}]
PARAMS = {"model": "m", "messages": MESSAGES, "max_tokens": 128, "n": 1, "temperature": 0.0, "top_p": 1.0}


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            n = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(n)
            writer.write(RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve(port: int) -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


async def _bench(name: str, call: Callable[[], Awaitable[None]], n: int, concurrency: int) -> float:
    await asyncio.gather(*(call() for _ in range(concurrency)))  # warm: the connections open
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            await call()

    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    print(f"{name:32s} {1e3 * cpu / n:6.3f} ms CPU a call, {n / wall:7.0f} calls/s", flush=True)
    return 1e3 * cpu / n


async def _measure(url: str, n: int, concurrency: int) -> None:
    import httpx
    import openai

    from harnesslearn.models import GenerateRequest, load_model

    model = load_model(f"openai:m?base_url={url}&endpoint=chat", cache=False)
    request = GenerateRequest(prompt=MESSAGES, max_tokens=128)
    raw = openai.AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0)
    hx = httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency))

    async def backend() -> None:
        assert (await model.generate(request)).texts[0]

    async def openai_raw() -> None:
        r = await raw.chat.completions.create(**PARAMS)  # type: ignore[call-overload]
        assert r.choices[0].message.content

    async def httpx_raw() -> None:
        r = await hx.post(url + "/chat/completions", json=PARAMS, headers={"Authorization": "Bearer EMPTY"})
        r.raise_for_status()
        assert r.json()["choices"][0]["message"]["content"]

    clients: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("openai: backend (harnesslearn)", backend), ("openai.AsyncOpenAI", openai_raw), ("httpx, JSON only", httpx_raw)]
    session, fast = None, None
    try:
        import aiohttp
    except ImportError:
        print("aiohttp is not installed here: pip install aiohttp to measure it", file=sys.stderr)
    else:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))

        async def aiohttp_raw() -> None:
            assert session is not None
            async with session.post(url + "/chat/completions", json=PARAMS,
                                    headers={"Authorization": "Bearer EMPTY"}) as r:
                r.raise_for_status()
                body = await r.json()
            assert body["choices"][0]["message"]["content"]

        fast = load_model(f"openai:m?base_url={url}&endpoint=chat&client=aiohttp", cache=False)

        async def backend_aiohttp() -> None:
            assert (await fast.generate(request)).texts[0]

        clients += [("aiohttp, JSON only", aiohttp_raw), ("openai: backend, client=aiohttp", backend_aiohttp)]
    try:
        ms: dict[str, list[float]] = {}
        for _ in range(2):
            for name, call in clients:
                ms.setdefault(name, []).append(await _bench(name, call, n, concurrency))
        base = min(ms[clients[0][0]])
        print(f"CPU a call against the {clients[0][0]} (best of 2 each, same run):", flush=True)
        for name, v in ms.items():
            print(f"  {name:32s} x{min(v) / base:.2f}", flush=True)
    finally:
        if session is not None:
            await session.close()
        if fast is not None:
            await fast.aclose()
        await hx.aclose()
        await raw.close()
        await model.aclose()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=3000, help="calls per client and round")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--serve", type=int, default=0, help=argparse.SUPPRESS)  # the fake server's own process
    a = p.parse_args(argv)
    if a.serve:
        asyncio.run(_serve(a.serve))
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        asyncio.run(_measure(f"http://127.0.0.1:{port}/v1", a.n, a.concurrency))
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
