"""Accounting: tokens, latency, retries, faults and cost, rolled up per backend.

Per-problem and per-evaluation rollups are built by the executor from its ``CallRecord``s;
this module only keeps the per-backend totals that ``ModelBackend.stats()`` reports.
Cost is computed only where a price is known (the ``genai-prices`` table, kept up to date by its
maintainers); for local models and unknown hosted models it stays ``None`` rather than a guessed 0.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any


def cost_of(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """USD cost of one call from the maintained price table of ``genai-prices`` (by model name, the provider
    guessed from it), or None when the model is not in it (local models, unknown hosted ones): never a
    guessed 0."""
    try:
        from genai_prices import Usage, calc_price
    except ImportError:  # a machine set up without it (the GPU machine's carried wheels): no price, not a failure
        return None
    name = model.split("?", 1)[0].rsplit("/", 1)[-1]
    if not name:
        return None
    try:
        price = calc_price(Usage(input_tokens=prompt_tokens, output_tokens=completion_tokens), model_ref=name)
    except (LookupError, ValueError):
        return None
    return float(price.total_price)


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
