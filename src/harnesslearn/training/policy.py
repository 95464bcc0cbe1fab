"""The policy being trained, seen as a ModelBackend, so that the multistep variant can run
revision rounds of the *current* policy through the same ``propose`` code as test time.

Generation runs in a worker thread (the event loop is never blocked) under a lock (one
generate at a time on the shared model), with gradients off and the model put back in its
previous train/eval mode afterwards. Stop strings are applied after generation.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from harnesslearn.models.base import Completion, GenerateRequest, ModelBackend
from harnesslearn.models.common import apply_stop, prompt_text


class PolicyBackend(ModelBackend):
    def __init__(self, model: Any, tokenizer: Any, spec: str = "policy:current") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.spec = spec
        self._lock = threading.Lock()

    def _generate_sync(self, request: GenerateRequest) -> Completion:
        import torch

        text = prompt_text(request.prompt)
        enc = self.tokenizer(text, return_tensors="pt").to(self.model.device)
        t0 = time.perf_counter()
        with self._lock, torch.no_grad():
            was_training = self.model.training
            self.model.eval()
            if request.seed is not None:
                torch.manual_seed(request.seed)
            sample = request.temperature > 0
            out = self.model.generate(
                **enc,
                max_new_tokens=request.max_tokens,
                do_sample=sample,
                temperature=request.temperature if sample else None,
                top_p=request.top_p if sample else None,
                num_return_sequences=request.n,
                pad_token_id=self.tokenizer.pad_token_id,
            )
            if was_training:
                self.model.train()
        n_prompt = enc["input_ids"].shape[1]
        new = out[:, n_prompt:]  # [n, new_tokens]
        texts = [apply_stop(t, request.stop) for t in self.tokenizer.batch_decode(new, skip_special_tokens=True)]
        return Completion(texts=texts, prompt_tokens=n_prompt, completion_tokens=int(new.numel()),
                          latency_s=time.perf_counter() - t0)

    async def generate(self, request: GenerateRequest) -> Completion:
        return await asyncio.to_thread(self._generate_sync, request)
