"""A pool of OpenAI-compatible endpoints serving one model: ``openai:NAME`` with several base URLs.

    load_model("openai:Qwen3-8B", base_url=["http://gpu1:8000/v1", "http://gpu2:8000/v1"])
    harnesslearn run ... --solver openai:Qwen3-8B --solver-base-url http://gpu1:8000/v1 \\
        --solver-base-url http://gpu2:8000/v1

Routing: each call goes to the endpoint with the fewest requests outstanding (ties: the one
picked least recently), so a slow server gets fewer calls and a fast one more, with no tuning.

Faults: every endpoint is an ``OpenAIBackend`` that makes exactly one attempt per call (its own
retries are off). An attempt that fails with an infrastructure fault (connection refused or
reset, timeout, HTTP 429/5xx, an unusable key or model on that server) *drains* the endpoint:
it gets no new calls for a cool-down of ``base_delay * 2**(k-1)`` seconds after its k-th fault in
a row (capped at ``max_delay``), and the call is retried at once on another endpoint. After the
cool-down one probe call is let through; its success puts the endpoint back in rotation, its
failure doubles the cool-down. A call fails (``InfraError``, which the executor retries and never
scores) only after ``max_retries`` retries; when every endpoint is drained it waits for the first
cool-down to end. A request the server rejects as invalid (HTTP 400/413/422: ``RequestRejected``)
is the caller's error: not retried, and the endpoint stays in rotation.

Counting: ``stats()`` has the pool's totals (``faults``: failed attempts on any endpoint,
``retries``: attempts made again elsewhere, ``infra_errors``: calls that failed for good) and,
under ``endpoints``, each endpoint's own calls, faults, drains and whether it is in rotation.

What it does not do: no health checks between calls (an idle dead endpoint is found by the next
call routed to it), no weights (use the same URL twice to give a server twice the share of ties),
and no cancellation of the slower copy of a call (calls are never sent twice at once).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from harnesslearn.errors import InfraError, UserError
from harnesslearn.models.base import Completion, GenerateRequest
from harnesslearn.models.common import Backend
from harnesslearn.models.openai_compat import OpenAIBackend


def split_urls(text: str) -> list[str]:
    """The base URLs of ``base_url=URL1,URL2`` (an endpoint pool written into a spec), stripped; an empty item
    stays empty, for the caller to refuse."""
    return [u.strip() for u in text.split(",")]


@dataclass
class Endpoint:
    """One server of the pool and its routing state."""

    backend: OpenAIBackend
    outstanding: int = 0  # calls in flight here now
    failures: int = 0  # faults in a row; > 0: drained
    drained_until: float = 0.0  # monotonic time until which no call is routed here
    probing: bool = False  # a probe call after a cool-down is in flight
    drains: int = 0  # times this endpoint was taken out of rotation
    last_pick: int = 0  # order of the last pick (ties go to the least recently picked)
    last_fault: str | None = None

    @property
    def url(self) -> str:
        return str(self.backend.base_url)

    def usable(self, now: float) -> bool:
        """In rotation, or drained with its cool-down over and no probe in flight."""
        return self.failures == 0 or (now >= self.drained_until and not self.probing)


class EndpointPool(Backend):
    """``openai:NAME`` over several base URLs (see the module docstring)."""

    provider: ClassVar[str] = "openai"
    OPTIONS: ClassVar[dict[str, type]] = OpenAIBackend.OPTIONS
    DEFAULT_CONCURRENCY: ClassVar[int] = OpenAIBackend.DEFAULT_CONCURRENCY  # per endpoint
    CACHE_BY_DEFAULT: ClassVar[bool] = True

    def __init__(self, name: str, *, base_urls: Sequence[str], base_url: str | None = None, endpoint: str = "auto",
                 timeout: float = 60.0, max_retries: int = 6, base_delay: float = 0.5, max_delay: float = 8.0,
                 prefill: bool = False, client: str = "openai", concurrency: int | None = None) -> None:
        urls = [str(u) for u in base_urls]
        if base_url is not None:
            raise UserError("give the base URLs of an endpoint pool as one list, not also as base_url= in the spec")
        if len(urls) < 2:
            raise UserError("an endpoint pool needs at least two base URLs")
        per_endpoint = int(concurrency or self.DEFAULT_CONCURRENCY)
        super().__init__(name, concurrency=per_endpoint * len(urls))
        self.endpoints = [
            Endpoint(OpenAIBackend(name, base_url=u, endpoint=endpoint, timeout=timeout, max_retries=0,
                                   base_delay=base_delay, max_delay=max_delay, prefill=prefill, client=client,
                                   concurrency=per_endpoint))
            for u in urls
        ]
        self.endpoint, self.max_retries = endpoint, max_retries
        self.base_delay, self.max_delay = base_delay, max_delay
        self._picks = 0

    def identity(self) -> str:
        return (f"{self.spec}@{','.join(sorted({e.url for e in self.endpoints}))}#{self.endpoint}"
                + ("+prefill" if self.endpoints[0].backend.prefill else ""))

    def chat_template(self) -> bool:
        """As for one endpoint: messages go to the servers' chat endpoint unless ``endpoint=completions``."""
        return self.endpoint != "completions"

    def continues_assistant(self) -> bool:
        """As for one endpoint (``prefill=true``: the servers continue an open assistant turn)."""
        return self.endpoints[0].backend.continues_assistant()

    # ------------------------------------------------------------------ routing
    async def _pick(self) -> Endpoint:
        """The usable endpoint with the fewest outstanding calls; waits while none is usable."""
        while True:
            now = time.monotonic()
            usable = [e for e in self.endpoints if e.usable(now)]
            if usable:
                ep = min(usable, key=lambda e: (e.outstanding, e.last_pick))
                self._picks += 1
                ep.last_pick = self._picks
                if ep.failures:
                    ep.probing = True
                return ep
            waits = [e.drained_until - now for e in self.endpoints if not e.probing]
            await asyncio.sleep(max(0.01, min(waits)) if waits else 0.05)  # only probes in flight: poll

    def _failed(self, ep: Endpoint, e: Exception) -> None:
        ep.probing = False
        ep.failures += 1
        if ep.failures == 1:
            ep.drains += 1
        ep.drained_until = time.monotonic() + min(self.max_delay, self.base_delay * 2 ** (ep.failures - 1))
        ep.last_fault = str(e).splitlines()[0][:300] if str(e) else type(e).__name__

    @staticmethod
    def _succeeded(ep: Endpoint) -> None:
        ep.probing = False
        ep.failures = 0
        ep.drained_until = 0.0

    async def _generate(self, request: GenerateRequest) -> Completion:
        faults: list[str] = []
        while True:
            ep = await self._pick()
            ep.outstanding += 1
            settled = False
            try:
                c = await ep.backend.generate(request)
                self._succeeded(ep)
                settled = True
            except InfraError as e:
                self._failed(ep, e)
                settled = True
                faults.append(f"{ep.url}: {ep.last_fault}")
                will_retry = len(faults) <= self.max_retries
                self._stats.bump(faults=1, retries=1 if will_retry else 0)
                if not will_retry:
                    raise InfraError(f"{self.spec}: {len(faults)} attempts over {len(self.endpoints)} endpoints "
                                     f"failed; last: {faults[-1]}") from e
                continue
            finally:
                ep.outstanding -= 1
                if not settled:  # rejected request or cancelled: says nothing about the endpoint
                    ep.probing = False
            c.meta = {**c.meta, "endpoint": ep.url, "faults": faults, "retries": len(faults)}
            return c

    # ------------------------------------------------------------------ reporting
    def stats(self) -> dict[str, Any]:
        d = super().stats()
        now = time.monotonic()
        rows = []
        for ep in self.endpoints:
            s = ep.backend.stats()
            rows.append({
                "base_url": ep.url, "calls": s["calls"], "faults": s["faults"], "drains": ep.drains,
                "in_rotation": ep.failures == 0, "outstanding": ep.outstanding,
                "drained_for_s": round(max(0.0, ep.drained_until - now), 3) if ep.failures else 0.0,
                "prompt_tokens": s["prompt_tokens"], "completion_tokens": s["completion_tokens"],
                "mean_latency_s": s["mean_latency_s"], "last_fault": ep.last_fault,
            })
        d["endpoints"] = rows
        return d

    async def aclose(self) -> None:
        for ep in self.endpoints:
            await ep.backend.aclose()
