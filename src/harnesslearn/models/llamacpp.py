"""``llamacpp:PATH.gguf``: llama.cpp in-process through llama-cpp-python (extra ``llamacpp``).

One ``Llama`` object per backend; calls are serialised with a lock and run in a worker
thread, so the event loop is never blocked (llama.cpp itself uses ``n_threads`` cores).
``n > 1`` is ``n`` sequential samples (with seeds ``seed, seed+1, ...`` when a seed is given).
llama.cpp keeps the previous prompt's KV cache and re-evaluates only what differs, so the
``n`` samples of one prompt, or proposals on a shared prompt, pay for the prompt once.

Chat messages: when the GGUF carries a chat template (``tokenizer.chat_template``, as
instruction-tuned models do) they are rendered with it, through llama-cpp-python's own
``Jinja2ChatFormatter`` (the template's end-of-turn token is added to the stop strings);
otherwise (base models) with ``render_messages``. ``chat=template|plain|auto`` (default auto)
forces one. If the last message is from the assistant, its content is continued (the turn is
left open: the model writes the rest of it). Options: ``n_ctx`` (default 4096), ``n_threads``
(default: all cores), ``top_k`` (40), ``repeat_penalty`` (1.1), ``chat``, ``lora`` (a GGUF LoRA adapter file applied
at load, scale 1: ``models/lora_gguf.py`` makes one from a PEFT adapter).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from harnesslearn.errors import UserError
from harnesslearn.models.base import Completion, GenerateRequest, Messages
from harnesslearn.models.common import Backend, apply_stop, render_messages

CHAT_MODES = ("auto", "template", "plain")


_STDERR_LOCK = threading.Lock()


@contextlib.contextmanager
def quiet_stderr(on: bool) -> Iterator[Callable[[], str]]:
    """While ``on``, what the C library writes to stderr goes to a temporary file (yielded: a function that reads
    it). llama.cpp logs one warning per LoRA tensor at load (224 lines for a r32 q/k/v/o adapter of the 1.5B) at a
    level llama-cpp-python's ``verbose=False`` does not silence. fd 2 is the whole process's: one redirect at a time
    (a lock), and none where fd 2 cannot be duplicated (closed: nothing to keep quiet)."""
    if not on:
        yield lambda: ""
        return
    import tempfile

    with _STDERR_LOCK, tempfile.TemporaryFile(mode="w+b") as tmp:
        sys.stderr.flush()
        try:
            saved = os.dup(2)
        except OSError:
            yield lambda: ""
            return
        def said() -> str:
            tmp.seek(0)
            return tmp.read().decode("utf-8", "replace")

        os.dup2(tmp.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class LlamaCppBackend(Backend):
    provider: ClassVar[str] = "llamacpp"
    OPTIONS: ClassVar[dict[str, type]] = {"n_ctx": int, "n_threads": int, "top_k": int, "repeat_penalty": float,
                                          "chat": str, "lora": str}
    DEFAULT_CONCURRENCY: ClassVar[int] = 4  # calls queue on the lock; this only bounds waiting threads
    CACHE_BY_DEFAULT: ClassVar[bool] = True

    def __init__(self, name: str, *, n_ctx: int = 4096, n_threads: int | None = None, top_k: int = 40,
                 repeat_penalty: float = 1.1, chat: str = "auto", lora: str | None = None,
                 concurrency: int | None = None) -> None:
        super().__init__(name, concurrency=concurrency)
        for opt, v, hi in (("n_ctx", n_ctx, 1 << 20), ("n_threads", n_threads, 1024)):
            if v is not None and not 1 <= v <= hi:  # else llama.cpp fails at load: called an infrastructure failure
                raise UserError(f"llamacpp: {opt} must be in 1..{hi}, not {v}")
        path = Path(name).expanduser()
        if not path.is_file():
            raise UserError(f"GGUF file not found: {name}")
        if chat not in CHAT_MODES:
            raise UserError(f"llamacpp: chat must be one of {', '.join(CHAT_MODES)}, not {chat!r}")
        if lora is not None and not Path(lora).expanduser().is_file():
            raise UserError(f"llamacpp: LoRA file not found: {lora}")
        self.path, self.n_ctx, self.chat_mode = path, n_ctx, chat
        self.lora = str(Path(lora).expanduser()) if lora else None
        if self.lora:
            from harnesslearn.fsutil import sha256_file
            from harnesslearn.models.lora_gguf import check_fits

            check_fits(path, Path(self.lora))  # llama.cpp crashes on a LoRA of another model's shapes
            self.lora_digest: str | None = sha256_file(self.lora)[:16]
        else:
            self.lora_digest = None
        self.n_threads = n_threads or os.cpu_count() or 1
        self.top_k, self.repeat_penalty = top_k, repeat_penalty
        self._lock = threading.Lock()
        self._llm: Any = None
        self._formatter: Any = None  # Jinja2ChatFormatter of the GGUF's template, or None

    def identity(self) -> str:
        # a LoRA file's answers are its own: the cache keys them on its content, not its path
        return self.spec + (f"+lora:{self.lora_digest}" if self.lora_digest else "")

    def _load(self) -> Any:
        if self._llm is None:
            from llama_cpp import Llama

            failed: tuple[Exception, list[str]] | None = None
            with quiet_stderr(self.lora is not None) as said:
                try:
                    llm = Llama(model_path=str(self.path), n_ctx=self.n_ctx, n_threads=self.n_threads, verbose=False,
                                seed=0, lora_path=self.lora)
                except (ValueError, RuntimeError) as err:  # llama-cpp-python's words for a file the model cannot take
                    failed = (err, said().strip().splitlines())
            if failed is not None:
                why, log = failed
                sys.stderr.write("".join(f"{line}\n" for line in log[-20:]))  # what llama.cpp said, kept
                raise UserError(f"llamacpp: {why}" + (f" ({log[-1]})" if log else "")) from None
            template = llm.metadata.get("tokenizer.chat_template")
            if template and self.chat_mode != "plain":
                from llama_cpp.llama_chat_format import Jinja2ChatFormatter

                def text(tok: int) -> str:
                    return llm.detokenize([tok], special=True).decode("utf-8", "ignore") if tok >= 0 else ""

                self._formatter = Jinja2ChatFormatter(template=template, eos_token=text(llm.token_eos()),
                                                      bos_token=text(llm.token_bos()))
            elif self.chat_mode == "template":
                raise UserError(f"llamacpp: {self.path.name} has no chat template (chat=template)")
            self._llm = llm
        return self._llm

    def chat_template(self) -> bool:
        """Whether the GGUF's chat template renders messages (loads the model to read it)."""
        with self._lock:
            self._load()
        return self._formatter is not None

    def continues_assistant(self) -> bool:
        return True

    def render(self, prompt: str | Messages) -> tuple[str, list[str]]:
        """The prompt text for ``prompt`` and the template's extra stop strings (call under the
        lock, after ``_load``)."""
        if isinstance(prompt, str):
            return prompt, []
        if self._formatter is None:
            return render_messages(prompt), []
        msgs = list(prompt)
        prefill = ""
        if msgs and msgs[-1].get("role") == "assistant":
            prefill = msgs.pop()["content"]
        r = self._formatter(messages=msgs)
        stop = r.stop if isinstance(r.stop, list) else [r.stop] if r.stop else []
        return r.prompt + prefill, [s for s in stop if s]

    def _complete(self, request: GenerateRequest) -> tuple[list[str], int, int]:
        texts, p_tok, c_tok = [], 0, 0
        with self._lock:
            llm = self._load()
            prompt, template_stop = self.render(request.prompt)
            stop = [*(request.stop or ()), *template_stop]
            for i in range(request.n):
                seed = request.seed + i if request.seed is not None else None
                r = llm.create_completion(
                    prompt, max_tokens=request.max_tokens, temperature=request.temperature, top_p=request.top_p,
                    top_k=self.top_k, repeat_penalty=self.repeat_penalty, stop=stop or None,
                    seed=seed,  # None: continue the sampler's random state
                )
                texts.append(r["choices"][0]["text"])
                p_tok = r["usage"]["prompt_tokens"]
                c_tok += r["usage"]["completion_tokens"]
        return texts, p_tok, c_tok

    async def _generate(self, request: GenerateRequest) -> Completion:
        texts, p_tok, c_tok = await asyncio.to_thread(self._complete, request)
        return Completion(texts=[apply_stop(t, request.stop) for t in texts], prompt_tokens=p_tok,
                          completion_tokens=c_tok)

    def warm(self) -> None:
        """Load the model now (otherwise it loads on the first call)."""
        with self._lock:
            self._load()
