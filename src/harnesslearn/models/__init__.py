"""Model backends: one interface (``ModelBackend``), many providers, chosen by spec.

    from harnesslearn.models import load_model, GenerateRequest
    model = load_model("openai:Qwen3-8B", base_url="http://127.0.0.1:8000/v1")
    completion = await model.generate(GenerateRequest("Question: 2+2?\\nAnswer:", max_tokens=8))

Providers (``list_providers()``): ``openai:``, ``hf:``, ``llamacpp:``, ``local:``,
``python:`` and ``mock:`` (unit tests only). See ``registry.py`` for options and caching.
"""

from harnesslearn.models.accounting import Stats, cost_of
from harnesslearn.models.base import Completion, GenerateRequest, Messages, ModelBackend
from harnesslearn.models.cache import CachedBackend, ResponseCache, default_cache_path
from harnesslearn.models.common import Backend, render_messages
from harnesslearn.models.registry import PROVIDERS, list_providers, load_model

__all__ = [
    "PROVIDERS", "Backend", "CachedBackend", "Completion", "GenerateRequest", "Messages",
    "ModelBackend", "ResponseCache", "Stats", "cost_of", "default_cache_path", "list_providers",
    "load_model", "render_messages",
]
