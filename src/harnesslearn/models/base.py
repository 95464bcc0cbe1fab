"""The ModelBackend interface shared by every provider.

A request is the full description of one generation; the response cache keys on it.
Providers implement ``_generate``; ``generate`` adds nothing but is the one entry point so
that wrappers (cache, accounting, concurrency) compose.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class GenerateRequest:
    prompt: str | Messages  # plain text (completion) or chat messages
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] | None = None
    seed: int | None = None

    def key(self) -> str:
        """Canonical JSON of the full request (for caching)."""
        return json.dumps(asdict(self), sort_keys=True, ensure_ascii=False)


@dataclass
class Completion:
    texts: list[str]  # n completions
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cached: bool = False
    cost: float | None = None  # USD where a price is known
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.texts[0] if self.texts else ""


class ModelBackend(ABC):
    """One model behind one interface. ``spec`` is the ``PROVIDER:NAME`` string."""

    spec: str = ""

    @abstractmethod
    async def generate(self, request: GenerateRequest) -> Completion:
        """Generate ``request.n`` completions. Raises ``InfraError`` when the model cannot be
        reached after retries (never returns an empty completion to hide a failure)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release resources (servers, threads)."""

    def chat_template(self) -> bool | None:
        """How chat messages reach this model: True when they go through the model's own chat
        template (an instruction-tuned model), False when they are rendered as plain text (a base
        model, ``render_messages``), None when unknown. The proposer writes chat prompts for
        True and primed plain-text prompts for False."""
        return None

    def continues_assistant(self) -> bool:
        """Whether a last assistant message is continued (the model writes on from its text, a
        "prefill") rather than closed. In-process engines do; the OpenAI chat API does not."""
        return False

    def stats(self) -> dict[str, Any]:
        """Counters rolled up over this backend's life (calls, tokens, cache hits, retries,
        faults, latency, cost). Providers in ``harnesslearn.models`` fill it; the default is
        empty so that third-party backends need not."""
        return {}
