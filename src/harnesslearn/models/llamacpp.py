"""``llamacpp:PATH.gguf``: llama.cpp in-process through llama-cpp-python (extra ``llamacpp``).

One ``Llama`` object per backend; calls are serialised with a lock and run in a worker
thread, so the event loop is never blocked (llama.cpp itself uses ``n_threads`` cores).
``n > 1`` is ``n`` sequential samples (with seeds ``seed, seed+1, ...`` when a seed is given).
Chat messages are rendered to a plain prompt with ``render_messages`` (GGUF chat templates
are not used: many small base models have none). Options: ``n_ctx`` (default 4096),
``n_threads`` (default: all cores), ``top_k`` (40), ``repeat_penalty`` (1.1).
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any, ClassVar

from harnesslearn.errors import UserError
from harnesslearn.models.base import Completion, GenerateRequest
from harnesslearn.models.common import Backend, apply_stop, prompt_text


class LlamaCppBackend(Backend):
    provider: ClassVar[str] = "llamacpp"
    OPTIONS: ClassVar[dict[str, type]] = {"n_ctx": int, "n_threads": int, "top_k": int, "repeat_penalty": float}
    DEFAULT_CONCURRENCY: ClassVar[int] = 4  # calls queue on the lock; this only bounds waiting threads
    CACHE_BY_DEFAULT: ClassVar[bool] = True

    def __init__(self, name: str, *, n_ctx: int = 4096, n_threads: int | None = None, top_k: int = 40,
                 repeat_penalty: float = 1.1, concurrency: int | None = None) -> None:
        super().__init__(name, concurrency=concurrency)
        path = Path(name).expanduser()
        if not path.is_file():
            raise UserError(f"GGUF file not found: {name}")
        self.path, self.n_ctx = path, n_ctx
        self.n_threads = n_threads or os.cpu_count() or 1
        self.top_k, self.repeat_penalty = top_k, repeat_penalty
        self._lock = threading.Lock()
        self._llm: Any = None

    def _load(self) -> Any:
        if self._llm is None:
            from llama_cpp import Llama

            self._llm = Llama(model_path=str(self.path), n_ctx=self.n_ctx, n_threads=self.n_threads,
                              verbose=False, seed=0)
        return self._llm

    def _complete(self, prompt: str, request: GenerateRequest) -> tuple[list[str], int, int]:
        texts, p_tok, c_tok = [], 0, 0
        with self._lock:
            llm = self._load()
            for i in range(request.n):
                seed = request.seed + i if request.seed is not None else None
                r = llm.create_completion(
                    prompt, max_tokens=request.max_tokens, temperature=request.temperature, top_p=request.top_p,
                    top_k=self.top_k, repeat_penalty=self.repeat_penalty,
                    stop=list(request.stop) if request.stop else None,
                    seed=seed,  # None: continue the sampler's random state
                )
                texts.append(r["choices"][0]["text"])
                p_tok = r["usage"]["prompt_tokens"]
                c_tok += r["usage"]["completion_tokens"]
        return texts, p_tok, c_tok

    async def _generate(self, request: GenerateRequest) -> Completion:
        texts, p_tok, c_tok = await asyncio.to_thread(self._complete, prompt_text(request.prompt), request)
        return Completion(texts=[apply_stop(t, request.stop) for t in texts], prompt_tokens=p_tok,
                          completion_tokens=c_tok)

    def warm(self) -> None:
        """Load the model now (otherwise it loads on the first call)."""
        with self._lock:
            self._load()
