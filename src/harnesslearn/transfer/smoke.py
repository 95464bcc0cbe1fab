"""The GPU pipeline proven on the CPU: every stage through the same code (the solver runtime, the
sandbox, the ``hf:`` engine with its response cache for the proposer, TRL + PEFT), at minute scale.

What stands in for the GPU's models: the proposer is a tiny randomly initialised Qwen2 built here (a
word-level tokenizer with a chat template; nothing is downloaded), served by ``hf:`` in process; the
solver is the rule-based ``solver`` below on ``rg:gcd``, which writes a correct program when asked for
one (so the zoo's interpreter loop really beats the minimal seed, and the SFT stage has rows to train
on) and answers "1" to anything else.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harnesslearn.transfer.settings import TransferSettings

FAMILY = "gcd"
SOLVER = "python:harnesslearn.transfer.smoke:solver"
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def solver(prompt: Any, **_: Any) -> str:
    """A rule-based gcd solver: a program that prints the gcd when asked for a program, else '1'."""
    text = prompt if isinstance(prompt, str) else "\n".join(m.get("content", "") for m in prompt)
    if "Python program" in text:
        m = re.search(r"numbers:\s*([\d,\s]+)", text)
        nums = [int(x) for x in re.findall(r"\d+", m.group(1))] if m else []
        if len(nums) >= 2:
            return f"```python\nimport math\nprint(math.gcd({', '.join(map(str, nums))}))\n```"
    return "1"


def tiny_qwen2(path: str | Path) -> Path:
    """A tiny random Qwen2 (2 layers, hidden 32) with a byte-level BPE tokenizer of a few hundred
    tokens trained here on harness code (a Qwen2Tokenizer, as the real model has: transformers picks
    the tokenizer class from the model type) and a ChatML template."""
    import json
    import tempfile

    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2Tokenizer

    path = Path(path)
    corpus = ["def solve(model, question):\n    return model(question).strip()\n", "```python\nprint(1)\n```\n",
              "<<<<<<< SEARCH\n=======\n>>>>>>> REPLACE\n", "import math\n"] * 20
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=400, min_frequency=1, show_progress=False,
                            special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    with tempfile.TemporaryDirectory() as d:
        bpe.save_model(d)
        vocab = json.loads(Path(d, "vocab.json").read_text())
        merges = [tuple(line.split(" ")) for line in Path(d, "merges.txt").read_text().splitlines()[1:] if line]
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None,  # type: ignore[arg-type]
                         eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def settings(work: str | Path) -> TransferSettings:
    """The smoke settings: a tiny model under WORK/model, the rule-based solver, rg:gcd."""
    work = Path(work)
    model = work / "model"
    if not (model / "config.json").is_file():
        tiny_qwen2(model)
    return TransferSettings.smoke(str(model), str(work), SOLVER, FAMILY)
