"""``vllm:PATH``: a transformers folder served by vLLM (continuous batching) in a child process.

The backend starts ``vllm serve`` on a free loopback port on first use (or at ``warm()``), talks to
it as ``openai:`` does (same retries, faults and accounting), and stops it at ``aclose()``. Chat
messages go through the model's own template on the server; a last assistant message is continued
(vLLM's ``continue_final_message``), so the proposer's rewrite prefill works as in process.

Options: ``gpu_memory_utilization`` (default 0.85), ``max_model_len`` (default 8192),
``max_num_seqs`` (default 512), ``enforce_eager`` (no CUDA graphs: faster start, slower decode),
``lora`` (``NAME=DIR,NAME2=DIR2``: adapters served by name beside the base model),
``ready_timeout`` (seconds, default 600), ``log`` (the server's log file), ``served_name``
(default ``model``), and ``timeout``/``max_retries`` as for ``openai:``.

Other processes (peers, a second backend for a LoRA adapter) reach the same server at
``base_url`` once it is up: ``load_model("openai:NAME", base_url=backend.base_url)``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from pathlib import Path
from typing import Any, ClassVar

from harnesslearn.errors import InfraError, MissingExtraError, UserError
from harnesslearn.models.base import Completion, GenerateRequest
from harnesslearn.models.openai_compat import OpenAIBackend
from harnesslearn.models.served import ServerProcess, free_port, vllm_argv


def parse_lora(text: str | None) -> dict[str, str]:
    """``"a=DIR,b=DIR2"`` -> {"a": "DIR", "b": "DIR2"} (UserError on a malformed entry)."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise UserError(f"vllm: lora entries are NAME=DIR, not {item!r}")
        out[name.strip()] = path.strip()
    return out


class VLLMBackend(OpenAIBackend):
    provider: ClassVar[str] = "vllm"
    OPTIONS: ClassVar[dict[str, type]] = {
        "gpu_memory_utilization": float, "max_model_len": int, "max_num_seqs": int, "enforce_eager": bool,
        "lora": str, "ready_timeout": float, "log": str, "served_name": str, "timeout": float, "max_retries": int,
    }
    DEFAULT_CONCURRENCY: ClassVar[int] = 512
    CACHE_BY_DEFAULT: ClassVar[bool] = True

    def __init__(self, name: str, *, gpu_memory_utilization: float = 0.85, max_model_len: int = 8192,
                 max_num_seqs: int = 512, enforce_eager: bool = False, lora: str | None = None,
                 ready_timeout: float = 600.0, log: str | None = None, served_name: str = "model",
                 timeout: float = 300.0, max_retries: int = 3, concurrency: int | None = None) -> None:
        if importlib.util.find_spec("vllm") is None:
            raise MissingExtraError("model provider 'vllm'", "vllm", "vllm (for a machine with an NVIDIA GPU; "
                                    "experiments/device/ installs it on one)")
        if not (Path(name) / "config.json").is_file():
            raise UserError(f"vllm: {name!r} is not a transformers model folder (no config.json)")
        port = free_port()
        self.loras = parse_lora(lora)
        super().__init__(served_name, base_url=f"http://127.0.0.1:{port}/v1", endpoint="auto", timeout=timeout,
                         max_retries=max_retries, concurrency=concurrency, prefill=True)
        self.model_path = name
        self.spec = f"vllm:{name}"
        self.ready_timeout = ready_timeout
        self.server = ServerProcess(
            vllm_argv(name, port, served_name=served_name, gpu_memory_utilization=gpu_memory_utilization,
                      max_model_len=max_model_len, max_num_seqs=max_num_seqs, enforce_eager=enforce_eager,
                      lora=self.loras),
            port, name="vllm", log=Path(log) if log else None,
            env={"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})
        self._up = False
        self._warming = threading.Lock()  # one start for all the calls that arrive before the server is up
        self._failed: str | None = None  # why the server did not come up: every later call fails with it

    def identity(self) -> str:
        return f"vllm:{self.model_path}#{self.name}"  # not the port: answers survive a restart

    def warm(self) -> None:
        """Start the server and wait until it answers (minutes the first time: weights, compile, graphs).
        A server that exits or never answers makes this call and every later one an InfraError with the
        server's reason (the tail of its log): each problem of an evaluation is then an infrastructure
        fault, never scored, and the server is not started again."""
        with self._warming:
            if self._failed is not None:
                raise InfraError(self._failed)
            if not self._up:
                try:
                    self.server.wait_ready(self.ready_timeout)
                except InfraError as e:
                    self._failed = f"the vllm: server for {self.model_path} did not come up: {e}"
                    raise InfraError(self._failed) from None
                self._up = True

    def chat_template(self) -> bool:
        return True

    async def _generate(self, request: GenerateRequest) -> Completion:
        if not self._up:
            await asyncio.to_thread(self.warm)
        return await super()._generate(request)

    async def aclose(self) -> None:
        await super().aclose()
        await asyncio.to_thread(self.server.stop)
        self._up = False

    def stats(self) -> dict[str, Any]:
        d = super().stats()
        d.update(engine="vllm", server_ready_s=self.server.ready_s, loras=sorted(self.loras))
        return d
