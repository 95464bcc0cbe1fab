"""``mock:`` models for unit tests only (an ordinary provider going through the registry).

- ``mock:echo``: returns the prompt (the last message's content for chat).
- ``mock:constant?text=42``: always returns ``text``.
- ``mock:fail?kind=infra``: always raises ``InfraError`` (``kind=error``: ``RuntimeError``).
- ``mock:flaky?every=2&text=ok``: raises ``InfraError`` on every ``every``-th call,
  otherwise returns ``text`` (to test retry paths in callers).

Options common to all: ``delay`` (seconds to sleep per call). Never used by end-to-end
tests, which use a real model.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import ClassVar

from harnesslearn.errors import InfraError, UserError
from harnesslearn.models.accounting import estimate_tokens
from harnesslearn.models.base import Completion, GenerateRequest
from harnesslearn.models.common import Backend, apply_stop, prompt_text

KINDS = ("echo", "constant", "fail", "flaky")


class MockBackend(Backend):
    provider: ClassVar[str] = "mock"
    OPTIONS: ClassVar[dict[str, type]] = {"text": str, "kind": str, "every": int, "delay": float}
    DEFAULT_CONCURRENCY: ClassVar[int] = 64
    CACHE_BY_DEFAULT: ClassVar[bool] = False

    def __init__(self, name: str, *, text: str = "", kind: str = "infra", every: int = 2, delay: float = 0.0,
                 concurrency: int | None = None) -> None:
        if name not in KINDS:
            raise UserError(f"unknown mock model {name!r}; known: {', '.join(KINDS)}")
        super().__init__(name, concurrency=concurrency)
        self.text, self.kind, self.every, self.delay = text, kind, max(1, every), delay
        self._counter = itertools.count(1)

    async def _generate(self, request: GenerateRequest) -> Completion:
        if self.delay:
            await asyncio.sleep(self.delay)
        i = next(self._counter)
        if self.name == "fail" or (self.name == "flaky" and i % self.every == 0):
            if self.kind == "error":
                raise RuntimeError("mock model error")
            raise InfraError(f"mock model infrastructure fault (call {i})")
        if self.name == "echo":
            p = request.prompt
            text = p if isinstance(p, str) else (p[-1].get("content", "") if p else "")
        else:
            text = self.text
        text = apply_stop(text, request.stop)
        return Completion(
            texts=[text] * request.n,
            prompt_tokens=estimate_tokens(prompt_text(request.prompt)),
            completion_tokens=estimate_tokens(text) * request.n,
        )
