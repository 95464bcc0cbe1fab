"""``hf:PATH``: Hugging Face transformers in-process (CPU or CUDA) with a dynamic batcher.

Requests go on a queue served by one background thread that owns the model. The thread
takes the first waiting request, then gathers whatever else arrives within
``batch_wait_ms`` (default 5 ms) up to ``max_batch`` sequences (default 64; a request with
``n`` counts ``n``), groups them by sampling parameters (temperature, top_p, stop strings)
and runs one left-padded batched ``generate`` per group. The event loop only awaits a
future, so it is never blocked by the model.

Chat messages go through the tokenizer's chat template when it has one (instruction-tuned
models; a last assistant message is continued, not closed), else ``render_messages`` (base
models); ``chat=template|plain|auto`` forces one. Generation also ends at the template's
end-of-turn token.

Options: ``device`` (``auto``: CUDA when available), ``dtype`` (``auto``: bfloat16 on CUDA,
the checkpoint's dtype on CPU; or ``float32``/``bfloat16``/``float16``), ``max_batch``,
``batch_wait_ms``, ``static_cache`` (``cache_implementation="static"``; much faster on CUDA
with large batches), ``gguf_file`` (load from a GGUF file inside ``PATH``; slow), ``top_k``
(for sampling; 0, the default, turns it off), ``adapter`` (a PEFT LoRA adapter folder, e.g. a proposer
trained by ``harnesslearn train``: merged into the weights at load; the response cache keys on the adapter's
content, so two adapters never share answers; needs the ``train`` extra's peft).

Limits: the seed of a request is honoured exactly only when it runs in a batch of its own
(a batch seeds torch's global RNG from its first request's seed). Stop strings end a sequence during
generation (``stop_strings``, requests with different stop strings are never batched
together) and the text is cut before the stop string afterwards. ``completion_tokens``
counts generated tokens up to end-of-sequence or the stop, not padding.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harnesslearn.errors import UserError
from harnesslearn.models.base import Completion, GenerateRequest, Messages
from harnesslearn.models.common import Backend, apply_stop, render_messages

# end-of-turn tokens of common chat templates: generation also ends at these when the vocabulary has them
END_OF_TURN = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>")


def _end_ids(tok: Any, model: Any) -> set[int]:
    """Token ids that end a sequence: the tokenizer's EOS, the generation config's, and the
    end-of-turn tokens of a chat template the vocabulary knows."""
    ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    gen = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(gen if isinstance(gen, list) else [gen] if isinstance(gen, int) else [])
    vocab = tok.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN if t in vocab)
    return ids


def adapter_sha(adapter: str) -> str:
    """The first 16 hex digits of a sha256 over a LoRA adapter's weights and its adapter_config.json (its rank,
    alpha and scaling are in the config: an edited alpha is another adapter); UserError if the folder has none."""
    import hashlib
    from pathlib import Path

    from harnesslearn.fsutil import sha256_file

    d = Path(adapter)
    weights = [d / n for n in ("adapter_model.safetensors", "adapter_model.bin") if (d / n).is_file()]
    if not (d / "adapter_config.json").is_file() or not weights:
        raise UserError(f"hf: adapter {adapter} is not a LoRA adapter folder (adapter_config.json and "
                        "adapter_model.safetensors)")
    h = hashlib.sha256(sha256_file(weights[0]).encode() + b"\0" + (d / "adapter_config.json").read_bytes())
    return h.hexdigest()[:16]


def merged(model: Any, adapter: str) -> Any:
    """``model`` with the LoRA adapter at ``adapter`` merged into its weights."""
    try:
        from peft import PeftModel
    except ImportError:
        from harnesslearn.errors import MissingExtraError

        raise MissingExtraError("hf: adapter", "train") from None
    try:
        return PeftModel.from_pretrained(model, adapter).merge_and_unload()
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise UserError(f"hf: adapter {adapter} does not fit the model: {str(e).splitlines()[0][:300]}") from None


@dataclass
class _Job:
    request: GenerateRequest
    prompt: str
    future: concurrent.futures.Future[Completion] = field(default_factory=concurrent.futures.Future)

    def group(self) -> tuple[float, float, tuple[str, ...] | None]:
        return (self.request.temperature, self.request.top_p, self.request.stop)


class HFBackend(Backend):
    provider: ClassVar[str] = "hf"
    OPTIONS: ClassVar[dict[str, type]] = {"device": str, "dtype": str, "max_batch": int, "batch_wait_ms": float,
                                          "static_cache": bool, "gguf_file": str, "top_k": int, "chat": str,
                                          "adapter": str}
    DEFAULT_CONCURRENCY: ClassVar[int] = 1024  # let requests reach the batcher; it bounds batch size
    CACHE_BY_DEFAULT: ClassVar[bool] = True

    def __init__(self, name: str, *, device: str = "auto", dtype: str = "auto", max_batch: int = 64,
                 batch_wait_ms: float = 5.0, static_cache: bool = False, gguf_file: str | None = None,
                 top_k: int = 0, chat: str = "auto", adapter: str | None = None,
                 concurrency: int | None = None) -> None:
        super().__init__(name, concurrency=concurrency)
        self.adapter, self.adapter_digest = adapter, adapter_sha(adapter) if adapter else None
        if chat not in ("auto", "template", "plain"):
            raise UserError(f"hf: chat must be auto, template or plain, not {chat!r}")
        self.chat_mode = chat
        if dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise UserError(f"hf: dtype must be auto, float32, bfloat16 or float16, not {dtype!r}")
        self.device_opt, self.dtype_opt, self.gguf_file, self.top_k = device, dtype, gguf_file, top_k
        self.max_batch, self.batch_wait_s, self.static_cache = max(1, max_batch), batch_wait_ms / 1000, static_cache
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._load_lock = threading.Lock()
        self.model: Any = None
        self.tokenizer: Any = None
        self.end_ids: set[int] = set()
        self.batches: list[int] = []  # sequences per generate call, for tests and benchmarks
        self._closing = threading.Event()  # set by aclose: the batch in flight stops at its next token

    # ------------------------------------------------------------ loading
    def warm(self) -> None:
        """Load the model now (otherwise the worker loads it before the first batch)."""
        with self._load_lock:
            if self.model is not None:
                return
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            device = self.device_opt if self.device_opt != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
            dtype: Any = getattr(torch, self.dtype_opt) if self.dtype_opt != "auto" else (
                torch.bfloat16 if device.startswith("cuda") else "auto")
            kw: dict[str, Any] = {"gguf_file": self.gguf_file} if self.gguf_file else {}
            try:
                tok = AutoTokenizer.from_pretrained(self.name, **kw)
                model: Any = AutoModelForCausalLM.from_pretrained(self.name, dtype=dtype, **kw)
            except OSError as e:
                raise UserError(f"hf: cannot load {self.name!r}: {str(e).splitlines()[0]}") from None
            if self.adapter:
                model = merged(model, self.adapter)
            tok.padding_side = "left"
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
            if self.chat_mode == "template" and getattr(tok, "chat_template", None) is None:
                raise UserError(f"hf: {self.name!r} has no chat template (chat=template)")
            self.end_ids = _end_ids(tok, model)
            self.tokenizer, self.model = tok, model.to(device).eval()
            self.device = device

    def identity(self) -> str:
        return self.spec + (f"+adapter:{self.adapter_digest}" if self.adapter_digest else "")

    # ------------------------------------------------------------ serving
    def _ensure_thread(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name=f"hf-batcher-{self.name}", daemon=True)
                self._thread.start()

    def chat_template(self) -> bool:
        """Whether the tokenizer's chat template renders messages (loads the model to read it)."""
        self.warm()
        return self._has_template()

    def continues_assistant(self) -> bool:
        return True

    def _has_template(self) -> bool:
        return self.chat_mode != "plain" and getattr(self.tokenizer, "chat_template", None) is not None

    def render(self, prompt: str | Messages) -> str:
        """The prompt text: messages through the tokenizer's chat template when it has one (a last
        assistant message is continued), else ``render_messages``."""
        if isinstance(prompt, str):
            return prompt
        if not self._has_template():
            return render_messages(prompt)
        msgs = list(prompt)
        prefill = msgs.pop()["content"] if msgs and msgs[-1].get("role") == "assistant" else ""
        text: str = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        return text + prefill

    async def _generate(self, request: GenerateRequest) -> Completion:
        if not isinstance(request.prompt, str):
            await asyncio.to_thread(self.warm)  # the template lives in the tokenizer
        job = _Job(request, self.render(request.prompt))
        self._ensure_thread()
        self._queue.put(job)
        return await asyncio.wrap_future(job.future)

    def _collect(self, first: _Job) -> list[_Job]:
        jobs, size = [first], first.request.n
        deadline = time.monotonic() + self.batch_wait_s
        while size < self.max_batch:
            try:
                job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                self._queue.put(None)
                break
            jobs.append(job)
            size += job.request.n
        return jobs

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs = self._collect(first)
            groups: dict[Any, list[_Job]] = {}
            for j in jobs:
                groups.setdefault(j.group(), []).append(j)
            for group in groups.values():
                try:
                    self.warm()
                    results = self._run_batch(group)
                except Exception as e:  # a failed batch fails its requests, not the server thread
                    for j in group:
                        if not j.future.done():
                            j.future.set_exception(e)
                    continue
                for j, c in zip(group, results, strict=True):
                    j.future.set_result(c)

    def _run_batch(self, jobs: list[_Job]) -> list[Completion]:
        import torch

        t0 = time.perf_counter()
        req0 = jobs[0].request
        prompts = [j.prompt for j in jobs for _ in range(j.request.n)]
        self.batches.append(len(prompts))
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True).to(self.device)
        max_new = max(1, max(j.request.max_tokens for j in jobs))
        kw: dict[str, Any] = {"max_new_tokens": max_new, "pad_token_id": self.tokenizer.pad_token_id,
                              "eos_token_id": sorted(self.end_ids)}
        if req0.temperature > 0:
            kw.update(do_sample=True, temperature=req0.temperature, top_p=req0.top_p, top_k=self.top_k)
        else:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if req0.stop and getattr(self, "_stop_strings_ok", True):
            kw.update(stop_strings=list(req0.stop), tokenizer=self.tokenizer)
        if self.static_cache:
            kw["cache_implementation"] = "static"
        kw["stopping_criteria"] = self._stop_on_close()
        if req0.seed is not None:
            torch.manual_seed(req0.seed)
        with torch.inference_mode():
            try:
                out = self.model.generate(**enc, **kw)
            except ValueError:
                if "stop_strings" not in kw:
                    raise
                # Some tokenizers cannot build transformers' stop-string criteria; stop strings are
                # then applied to the decoded text only (apply_stop below), after full generation.
                self._stop_strings_ok = False
                kw.pop("stop_strings"), kw.pop("tokenizer")
                out = self.model.generate(**enc, **kw)
        new = out[:, enc["input_ids"].shape[1]:].tolist()
        p_lens = enc["attention_mask"].sum(dim=1).tolist()
        ends = {self.tokenizer.pad_token_id, *self.end_ids}
        results, row = [], 0
        latency = time.perf_counter() - t0
        for j in jobs:
            texts, c_tok = [], 0
            for _ in range(j.request.n):
                ids = new[row][: j.request.max_tokens]
                cut = next((i for i, t in enumerate(ids) if t in ends), len(ids))
                texts.append(apply_stop(self.tokenizer.decode(ids[:cut], skip_special_tokens=True), j.request.stop))
                c_tok += cut
                row += 1
            results.append(Completion(texts=texts, prompt_tokens=int(p_lens[row - 1]), completion_tokens=c_tok,
                                      latency_s=latency, meta={"batch": len(prompts)}))
        return results

    def _stop_on_close(self) -> Any:
        """A stopping criterion that ends the batch in flight once ``aclose`` was called: a long batch
        must not outlive its backend (on CUDA a generating daemon thread at interpreter exit aborts
        the process: seen on the H200 after gpu_eval's hf: run)."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        closing = self._closing

        class Closing(StoppingCriteria):  # type: ignore[misc]
            def __call__(self, input_ids: Any, scores: Any, **kw: Any) -> Any:
                return torch.full((input_ids.shape[0],), closing.is_set(), dtype=torch.bool, device=input_ids.device)

        return StoppingCriteriaList([Closing()])

    async def aclose(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._closing.set()
            self._queue.put(None)
            await asyncio.to_thread(self._thread.join, 30)
