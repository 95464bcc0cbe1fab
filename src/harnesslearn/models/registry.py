"""The provider registry: ``PROVIDER:NAME`` -> a backend, importing providers lazily.

Each provider is a ``"module:Class"`` string plus the modules it needs and the extra that
installs them (lm-evaluation-harness style): nothing optional is imported until used, and
a missing dependency is a one-line ``MissingExtraError`` naming the extra to install.
Options may be given in the spec (``openai:gemma?timeout=5&endpoint=completions``) or as
keywords to ``load_model``; keywords win.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harnesslearn.errors import MissingExtraError, UserError
from harnesslearn.models.base import ModelBackend
from harnesslearn.models.common import Backend, coerce_option, split_spec


@dataclass(frozen=True)
class Provider:
    target: str  # "module:Class"
    description: str
    example: str
    requires: tuple[str, ...] = ()  # importable module names
    extra: str | None = None  # the harnesslearn extra that installs them


PROVIDERS: dict[str, Provider] = {
    "openai": Provider("harnesslearn.models.openai_compat:OpenAIBackend",
                       "any OpenAI-compatible server (vLLM, SGLang, llama.cpp server, Ollama, hosted APIs)",
                       "openai:Qwen3-8B", ("openai",), None),
    "hf": Provider("harnesslearn.models.hf:HFBackend",
                   "Hugging Face transformers in-process (CPU or CUDA), dynamic batching",
                   "hf:google/gemma-3-270m", ("torch", "transformers"), "local"),
    "vllm": Provider("harnesslearn.models.vllm:VLLMBackend",
                     "a transformers folder served by vLLM in a child process (GPU; continuous batching, LoRA)",
                     "vllm:PATH", ("vllm", "openai"), "vllm"),
    "llamacpp": Provider("harnesslearn.models.llamacpp:LlamaCppBackend",
                         "llama.cpp in-process (llama-cpp-python)", "llamacpp:PATH.gguf", ("llama_cpp",), "llamacpp"),
    "local": Provider("harnesslearn.models.local:LocalBackend",
                      "embedded models from PyPI: gemma-3-270m (base, default), qwen2.5-coder-1.5b-instruct, "
                      "qwen2.5-coder-0.5b-instruct", "local:gemma-3-270m"),
    "python": Provider("harnesslearn.models.pyfunc:PythonBackend",
                       "a Python callable (rule-based models, tests)", "python:MODULE:FUNCTION"),
    "mock": Provider("harnesslearn.models.mock:MockBackend", "mock models for unit tests only", "mock:echo"),
}


def _missing(mods: tuple[str, ...]) -> list[str]:
    return [m for m in mods if importlib.util.find_spec(m) is None]


def provider_class(provider: str) -> type[Backend]:
    """The backend class of ``provider`` (imported now). UserError / MissingExtraError."""
    info = PROVIDERS.get(provider)
    if info is None:
        close = difflib.get_close_matches(provider, list(PROVIDERS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UserError(f"unknown model provider {provider!r}{hint} (known: {', '.join(PROVIDERS)})")
    missing = _missing(info.requires)
    if missing:
        raise MissingExtraError(f"model provider {provider!r}", info.extra or "all", ", ".join(missing))
    module, _, cls = info.target.partition(":")
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]


def _cache_enabled(cls: type[Backend], cache: bool | None) -> bool:
    if cache is not None:
        return cache
    if os.environ.get("HARNESSLEARN_CACHE", "").lower() in {"0", "false", "no", "off"}:
        return False
    return cls.CACHE_BY_DEFAULT


def load_model(spec: str, *, base_url: str | Sequence[str] | None = None, cache: bool | None = None,
               concurrency: int | None = None, **kw: Any) -> ModelBackend:
    """Build the backend for ``spec`` (``PROVIDER:NAME[?k=v&...]``).

    ``cache``: None (default) caches temperature-0 requests for model providers (openai, hf,
    llamacpp, local) and nothing for python:/mock: (set ``HARNESSLEARN_CACHE=0`` to turn the
    default off); True caches every request, sampled ones included; False turns it off.
    The cache file is ``default_cache_path()`` unless ``cache_path=`` is given.
    ``base_url`` applies to ``openai:`` only; a list of two or more URLs builds an endpoint pool
    (``models/pool.py``: least-outstanding-requests routing, failing endpoints drained and their
    calls retried elsewhere). The spec can carry the list itself, comma-separated
    (``openai:qwen?base_url=http://h:8000/v1,http://h:8001/v1``): settings trees and shards pass
    specs as strings. Other keywords are provider options.
    Raises UserError for a bad spec or option, MissingExtraError for a missing extra.
    """
    provider, name, opts = split_spec(spec)
    cls = provider_class(provider)
    if not name:
        raise UserError(f"bad model spec {spec!r}: missing the model name after '{provider}:'")
    cache_path = kw.pop("cache_path", None)
    merged: dict[str, Any] = {**opts, **kw}
    programmatic = {"fn"} if provider == "python" else set()  # python: accepts fn=<callable>
    if base_url is None and "," in str(opts.get("base_url", "")):  # a pool written into the spec
        base_url = str(merged.pop("base_url"))
    if isinstance(base_url, str) and "," in base_url:
        from harnesslearn.models.pool import split_urls

        base_url = split_urls(base_url)
        if not all(base_url):
            raise UserError(f"bad model spec {spec!r}: an empty URL in base_url's comma-separated list")
    if base_url is not None:
        if "base_url" not in cls.OPTIONS:
            raise UserError(f"a base URL applies only to openai: models, not {provider}:")
        urls = [base_url] if isinstance(base_url, str) else [str(u) for u in base_url]
        if not urls:
            raise UserError("an empty list of base URLs")
        if len(urls) == 1:
            merged["base_url"] = urls[0]
        else:  # an endpoint pool: same options, several servers
            from harnesslearn.models.pool import EndpointPool

            cls, merged["base_urls"] = EndpointPool, urls
            programmatic.add("base_urls")
    unknown = sorted(set(merged) - set(cls.OPTIONS) - programmatic)
    if unknown:
        known = ", ".join(sorted(cls.OPTIONS)) or "none"
        raise UserError(f"unknown option(s) {', '.join(unknown)} for {provider}: models (known: {known})")
    args = {k: coerce_option(provider, k, v, cls.OPTIONS[k]) if k in cls.OPTIONS else v for k, v in merged.items()}
    backend: ModelBackend = cls(name, concurrency=concurrency, **args)
    if _cache_enabled(cls, cache):
        from harnesslearn.models.cache import CachedBackend

        backend = CachedBackend(backend, cache_path, sampled=cache is True)
    return backend


def list_providers() -> list[dict[str, Any]]:
    """Every provider with whether it is usable here (its modules importable; for ``local:``,
    each embedded model: its pinned packages, whether they are installed and the GGUF assembled,
    and the engine that would run it)."""
    out = []
    for prefix, info in PROVIDERS.items():
        missing = _missing(info.requires)
        row: dict[str, Any] = {
            "provider": prefix, "example": info.example, "description": info.description,
            "available": not missing, "missing": missing,
            "install": f"pip install 'harnesslearn[{info.extra}]'" if info.extra and missing else None,
        }
        if prefix == "local":
            from harnesslearn.models import embedded, local

            row["engine"] = local.best_engine()
            row["models"] = [embedded.status(name) for name in embedded.MODELS]
        out.append(row)
    return out
