"""Model servers run as child processes and reached through the ``openai:`` provider.

One engine for everyone: the GPU engine of the field is vLLM (``vllm serve``: continuous batching,
prefix caching, LoRA adapters by name); on the CPU the same path runs llama.cpp's server
(``python -m llama_cpp.server``). Either way the solver, the proposer and the peers talk to one
OpenAI-compatible endpoint, and ``ServerProcess`` owns the process:

- started in a process group of its own (vLLM starts an engine-core process beside its API server),
- ready when ``GET /v1/models`` answers 200; if it exits or does not answer within ``ready_timeout``
  seconds, ``InfraError`` with the last lines of its log,
- stopped with SIGTERM to the whole group, then SIGKILL after ``grace`` seconds; also at interpreter
  exit (``atexit``) if nobody stopped it. A parent killed with SIGKILL leaves it running: nothing in
  user space can prevent that without tying it to one thread (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path

from harnesslearn.errors import InfraError

_live: weakref.WeakSet[ServerProcess] = weakref.WeakSet()


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path | None, n: int = 15) -> str:
    if path is None or not path.is_file():
        return ""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:]
    return " | ".join(line.strip() for line in lines if line.strip())[-1500:]


class ServerProcess:
    """An OpenAI-compatible server as a child process (see the module docstring)."""

    def __init__(self, argv: Sequence[str], port: int, *, name: str = "server", log: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.argv, self.port, self.name = list(argv), port, name
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.log = log or Path(tempfile.gettempdir()) / f"harnesslearn-{name}-{port}.log"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_s: float | None = None  # seconds from start to the first 200 of /v1/models

    def start(self) -> None:
        """Spawn the process (returns at once; ``wait_ready`` waits for it)."""
        if self.proc is not None:
            return
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **(self.env or {})}, start_new_session=True)
        self._t0 = time.monotonic()
        _live.add(self)

    def ready(self) -> bool:
        """One probe of ``/v1/models``; InfraError if the process has exited."""
        proc = self.proc
        if proc is None:  # stopped (by a failed wait of another caller): no assert reachable from a model call
            raise InfraError(f"{self.name} is not running (log {self.log}: {_tail(self.log)})")
        if proc.poll() is not None:
            raise InfraError(f"{self.name} exited with code {proc.returncode} before it was ready "
                             f"(log {self.log}: {_tail(self.log)})")
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def wait_ready(self, timeout: float) -> None:
        """Block until the server answers (InfraError, and the process stopped, if it does not)."""
        self.start()
        deadline = time.monotonic() + timeout
        try:
            while not self.ready():
                if time.monotonic() > deadline:
                    raise InfraError(f"{self.name} did not answer within {timeout:g} s (log {self.log}: "
                                     f"{_tail(self.log)})")
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - self._t0

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the process group, SIGKILL after ``grace`` seconds; idempotent."""
        proc, self.proc = self.proc, None
        _live.discard(self)
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError, PermissionError):  # stragglers of the group
            os.killpg(proc.pid, signal.SIGKILL)


@atexit.register
def _stop_all() -> None:
    for s in list(_live):
        s.stop(grace=3.0)


# ---------------------------------------------------------------------------- the engines' command lines
def vllm_argv(model: str, port: int, *, served_name: str, gpu_memory_utilization: float = 0.85,
              max_model_len: int | None = None, max_num_seqs: int | None = None, enforce_eager: bool = False,
              lora: dict[str, str] | None = None, max_lora_rank: int = 64, extra: Sequence[str] = ()) -> list[str]:
    """``vllm serve`` (its API server module, run by this interpreter) for a transformers folder."""
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
            "--gpu-memory-utilization", str(gpu_memory_utilization), "--disable-uvicorn-access-log",
            "--dtype", "bfloat16", "--seed", "0"]
    if max_model_len:
        argv += ["--max-model-len", str(max_model_len)]
    if max_num_seqs:
        argv += ["--max-num-seqs", str(max_num_seqs)]
    if enforce_eager:
        argv += ["--enforce-eager"]
    if lora:
        argv += ["--enable-lora", "--max-lora-rank", str(max_lora_rank), "--max-loras", str(max(1, len(lora))),
                 "--lora-modules", *[f"{k}={v}" for k, v in lora.items()]]
    return argv + list(extra)


def llamacpp_argv(gguf: str, port: int, *, alias: str, n_ctx: int = 4096, n_threads: int | None = None,
                  extra: Sequence[str] = ()) -> list[str]:
    """``python -m llama_cpp.server`` for a GGUF file (the CPU engine)."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--model_alias", alias,
            "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
            "--n_threads", str(n_threads or os.cpu_count() or 1), *extra]


@contextlib.contextmanager
def llama_server(gguf: Path, *, n_threads: int | None = None, n_ctx: int = 2048, log: Path | None = None,
                 alias: str = "gemma", ready_timeout: float = 120.0) -> Iterator[str]:
    """A llama.cpp server for ``gguf`` under ``alias``; yields its base URL and stops it afterwards."""
    port = free_port()
    server = ServerProcess(llamacpp_argv(str(gguf), port, alias=alias, n_ctx=n_ctx, n_threads=n_threads), port,
                           name="llama_cpp.server", log=log)
    server.wait_ready(ready_timeout)
    try:
        yield server.base_url
    finally:
        server.stop()
