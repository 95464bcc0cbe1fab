"""LoRA adapters shipped with the package: proposers trained by the project's transfer experiment
(``experiments/qwen12.py``), usable on the CPU as ``local:MODEL?adapter=NAME``.

``rl``: Qwen2.5-Coder-1.5B-Instruct after SFT on 187 teacher-free rows and one GRPO epoch (640 contexts, 80
updates) on the 5 paper-train families. On the 21 unseen paper-eval families it beats the untrained proposer (mean
test J 0.517 against 0.239, +0.279 [+0.125, +0.441] with the families resampled) and stays below the best zoo
harness (0.571, -0.054 [-0.124, -0.001]); all 14 of its winning revisions are near-copies of the zoo's interpreter
loop (``README.md`` beside the weights). A name is looked up before a path: ``adapter=./rl`` is a folder ``rl``.
"""

from __future__ import annotations

from pathlib import Path

from harnesslearn.errors import UserError

HERE = Path(__file__).parent
SHIPPED: dict[str, tuple[str, str]] = {  # name -> (the local: model it was trained on, its folder here)
    "rl": ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-1.5b-instruct-rl"),
}


def resolve(model: str, adapter: str) -> str:
    """``adapter`` as given (a folder), or the folder of the shipped adapter of that name; a UserError when the
    shipped adapter was trained on another model than ``model`` (its shapes would not fit)."""
    if adapter not in SHIPPED:
        if "/" not in adapter and not Path(adapter).exists():
            raise UserError(f"adapter {adapter!r}: no such folder, and not a shipped adapter "
                            f"({', '.join(sorted(SHIPPED))})")
        return adapter
    base, folder = SHIPPED[adapter]
    if model != base:
        raise UserError(f"adapter {adapter!r} was trained on local:{base}, not local:{model}")
    return str(HERE / folder)
