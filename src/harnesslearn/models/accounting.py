"""Accounting: tokens, latency, retries, faults and cost, rolled up per backend.

Per-problem and per-evaluation rollups are built by the executor from its ``CallRecord``s;
this module only keeps the per-backend totals that ``ModelBackend.stats()`` reports.
Cost is computed only where a price is known (``PRICES``, USD per million tokens); for
local models and unknown hosted models it stays ``None`` rather than a guessed 0.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

# USD per 1M tokens (input, output). A small table of well-known hosted models; prices
# change, so treat these as indicative. Matching is on the model name's suffix after any
# "org/" prefix, longest key first, so "openai/gpt-4o-mini" finds "gpt-4o-mini".
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
    "claude-3-5-haiku-latest": (0.80, 4.00),
    "claude-sonnet-4-0": (3.00, 15.00),
    "deepseek-chat": (0.27, 1.10),
}


def price_for(model: str) -> tuple[float, float] | None:
    """(input, output) USD per 1M tokens for ``model``, or None when not in ``PRICES``."""
    name = model.rsplit("/", 1)[-1].lower()
    if name in PRICES:
        return PRICES[name]
    return None


def cost_of(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """USD cost of one call, or None when the price of ``model`` is unknown."""
    p = price_for(model)
    if p is None:
        return None
    return (prompt_tokens * p[0] + completion_tokens * p[1]) / 1e6


def estimate_tokens(text: str) -> int:
    """A rough token count (whitespace split) for providers that report no usage."""
    return len(text.split())


@dataclass
class Stats:
    """Totals over a backend's life. Thread-safe through ``add``/``bump``.

    ``faults`` counts failed attempts (HTTP 429/5xx, timeouts, dropped connections) whether
    or not a retry then succeeded; ``retries`` counts the retries made; ``infra_errors``
    counts calls that failed for good (InfraError raised to the caller).
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    retries: int = 0
    faults: int = 0
    infra_errors: int = 0
    errors: int = 0  # other exceptions raised to the caller (bad request, callable errors)
    cost: float | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def bump(self, **counts: int) -> None:
        with self._lock:
            for k, v in counts.items():
                setattr(self, k, getattr(self, k) + v)

    def add_call(self, prompt_tokens: int, completion_tokens: int, latency_s: float, cost: float | None) -> None:
        with self._lock:
            self.calls += 1
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            self.latency_s += latency_s
            if cost is not None:
                self.cost = (self.cost or 0.0) + cost

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            d = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        lookups = d["cache_hits"] + d["cache_misses"]
        d["cache_hit_rate"] = d["cache_hits"] / lookups if lookups else None
        d["mean_latency_s"] = d["latency_s"] / d["calls"] if d["calls"] else None
        return d
