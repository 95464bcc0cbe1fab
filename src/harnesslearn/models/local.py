"""``local:NAME``: an embedded model from PyPI (``models/embedded.py`` lists them and assembles
their GGUF files): ``gemma-3-270m`` (base, the default smoke-test model),
``qwen2.5-coder-1.5b-instruct`` and ``qwen2.5-coder-0.5b-instruct`` (instruction-tuned).

Engine (``engine=auto``): llama.cpp when ``llama_cpp`` is importable (Gemma 270M about 35
tok/s, Qwen 1.5B 12-20 tok/s for one sequence on 2 cores), else transformers, which needs a
bfloat16 copy converted once from the GGUF (``embedded.ensure_hf_copy``, minutes the first
time; later loads take seconds). ``engine=llamacpp`` or ``engine=hf`` forces one. A one-time
line on stderr says where the file is and which engine runs it. ``adapter=DIR``: a LoRA adapter (a proposer
trained on this model with ``harnesslearn train``), or ``adapter=NAME`` for one shipped with the package
(``harnesslearn.adapters``: ``rl``, the GRPO-trained proposer of the 1.5B): on llama.cpp it is converted once to a GGUF LoRA file
(``models/lora_gguf.py``, cached by content) and applied at load; on transformers it is merged into the weights at
load (``engine=auto`` picks transformers for a model whose architecture has no llama.cpp LoRA form here: Gemma).
The cache names the adapter's content either way.

Chat messages go through the model's own chat template on both engines (the Qwen models);
Gemma 270M has none, so its messages are rendered as ``System: ...\\n\\nUser: ...\\n\\nAssistant:``
(``models.common.render_messages``). Sampling: greedy at temperature 0; otherwise the
request's temperature and top_p with the model's own top_k and repeat penalty
(``embedded.EmbeddedModel``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from typing import Any, ClassVar

from harnesslearn.errors import UserError
from harnesslearn.models.base import Completion, GenerateRequest
from harnesslearn.models.common import Backend
from harnesslearn.models.embedded import ensure_gguf, ensure_hf_copy, hf_copy_dir, model_info
from harnesslearn.models.hf import adapter_sha
from harnesslearn.models.lora_gguf import ARCHS as LORA_ARCHS

ENGINES = ("auto", "llamacpp", "hf")
_announced: set[str] = set()


def best_engine() -> str:
    return "llamacpp" if importlib.util.find_spec("llama_cpp") is not None else "hf"


class LocalBackend(Backend):
    provider: ClassVar[str] = "local"
    OPTIONS: ClassVar[dict[str, type]] = {"engine": str, "n_threads": int, "max_batch": int, "n_ctx": int,
                                          "adapter": str}
    DEFAULT_CONCURRENCY: ClassVar[int] = 64
    CACHE_BY_DEFAULT: ClassVar[bool] = True

    def __init__(self, name: str, *, engine: str = "auto", n_threads: int | None = None, max_batch: int = 16,
                 n_ctx: int | None = None, adapter: str | None = None, concurrency: int | None = None) -> None:
        info = model_info(name)
        for opt, v, hi in (("n_ctx", n_ctx, 1 << 20), ("n_threads", n_threads, 1024), ("max_batch", max_batch, 4096)):
            if v is not None and not 1 <= v <= hi:  # else llama.cpp fails at load: called an infrastructure failure
                raise UserError(f"local: {opt} must be in 1..{hi}, not {v}")
        if engine not in ENGINES:
            raise UserError(f"local: engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        super().__init__(name, concurrency=concurrency)
        self.engine = best_engine() if engine == "auto" else engine
        if adapter and engine == "auto" and info.arch not in LORA_ARCHS:  # no llama.cpp LoRA form: transformers
            self.engine = "hf"
        if adapter:
            from harnesslearn.adapters import resolve

            adapter = resolve(name, adapter)  # a shipped adapter's name -> its folder in the package
        self.adapter_digest = adapter_sha(adapter) if adapter else None  # UserError for a folder without one
        self.path = ensure_gguf(name)
        self.chat = info.chat
        self.inner: Backend
        if self.engine == "llamacpp":
            from harnesslearn.models.llamacpp import LlamaCppBackend
            from harnesslearn.models.lora_gguf import gguf_lora

            lora = str(gguf_lora(adapter, info.arch, self.adapter_digest)) if adapter and self.adapter_digest else None
            try:
                self.inner = LlamaCppBackend(str(self.path), n_threads=n_threads, top_k=info.top_k,
                                             repeat_penalty=info.repeat_penalty, n_ctx=n_ctx or info.n_ctx,
                                             lora=lora, concurrency=self.concurrency)
            except UserError as e:
                raise UserError(f"local:{name}: adapter {adapter}: {e}") from None
        else:
            from harnesslearn.models.hf import HFBackend

            # the folder is created by ensure_hf_copy() on first use (see warm)
            self.inner = HFBackend(str(hf_copy_dir(name)), max_batch=max_batch, top_k=info.top_k, adapter=adapter,
                                   concurrency=self.concurrency)
        if name not in _announced:
            _announced.add(name)
            sys.stderr.write(f"harnesslearn: local:{name}: model file {self.path}, engine {self.engine}\n")

    def identity(self) -> str:
        # the engines' greedy outputs differ: cache them apart; an adapter's answers are its own (its content)
        return f"{self.spec}#{self.engine}" + (f"+adapter:{self.adapter_digest}" if self.adapter_digest else "")

    def warm(self) -> None:
        """Load the model now (for transformers, converting the GGUF first if needed)."""
        if self.engine == "hf":
            ensure_hf_copy(self.name)
        self.inner.warm()  # type: ignore[attr-defined]

    async def _generate(self, request: GenerateRequest) -> Completion:
        if self.engine == "hf" and not (hf_copy_dir(self.name) / "config.json").is_file():
            await asyncio.to_thread(ensure_hf_copy, self.name)
        return await self.inner.generate(request)

    def chat_template(self) -> bool:
        return self.chat

    def continues_assistant(self) -> bool:
        return True

    async def aclose(self) -> None:
        await self.inner.aclose()

    def stats(self) -> dict[str, Any]:
        d = super().stats()
        d["engine"] = self.engine
        return d
