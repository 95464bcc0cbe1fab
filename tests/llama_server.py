"""Start a real OpenAI-compatible server (``python -m llama_cpp.server``) on a free loopback port.

Used by the real-server tests, ``benchmarks/model_throughput.py`` and ``benchmarks/peers/run.py``. The model is a GGUF
served under an alias (``gemma`` by default, for the embedded Gemma 3 270M).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 120.0, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}" + (f"; see {log}" if log else ""))
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"llama_cpp.server not ready after {timeout} s")


@contextlib.contextmanager
def llama_server(gguf: Path, *, n_threads: int | None = None, n_ctx: int = 2048,
                 log: Path | None = None, alias: str = "gemma", ready_timeout: float = 120.0) -> Iterator[str]:
    """Yield the server's base URL (``http://127.0.0.1:PORT/v1``); stop it afterwards."""
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias,
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
           "--n_threads", str(n_threads or os.cpu_count() or 1)]
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_ready(url, proc, ready_timeout, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]
