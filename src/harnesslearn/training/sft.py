"""`harnesslearn train sft`: supervised fine-tuning of the proposer with TRL's SFTTrainer + LoRA.

The data is the chat-format JSONL that ``sft-data`` writes (``messages``: user = the proposer
prompt, assistant = the teacher's revision). The proposer is used at test time as a completion
model on the exact prompt text its format renders, so each example is trained as
``prompt`` -> ``completion`` on that text (loss on the completion tokens only), not through a chat
template: the model learns to continue the same prompt it will see.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError
from harnesslearn.fsutil import atomic_write_text
from harnesslearn.training.config import SFTTrainConfig
from harnesslearn.training.model_io import load_policy, lora_config


def read_sft_jsonl(path: str | Path) -> list[dict[str, str]]:
    """``[{"prompt", "completion"}]`` from a chat JSONL; a malformed line is a UserError."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"SFT data not found: {path}")
    rows = []
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            msgs = json.loads(line)["messages"]
            user = next(m["content"] for m in msgs if m["role"] == "user")
            assistant = next(m["content"] for m in msgs if m["role"] == "assistant")
        except (ValueError, KeyError, TypeError, StopIteration):
            raise UserError(f"{path}:{i}: expected a JSON object with user and assistant messages") from None
        if not isinstance(user, str) or not isinstance(assistant, str):
            raise UserError(f"{path}:{i}: a message's content must be text (got "
                            f"{type(user if not isinstance(user, str) else assistant).__name__})")
        rows.append({"prompt": user, "completion": assistant})
    if not rows:
        raise UserError(f"SFT data {path} holds no examples")
    return rows


def fit_rows(rows: list[dict[str, str]], tok: Any, max_length: int) -> tuple[list[dict[str, str]], int]:
    """The rows whose prompt + completion (+ the end token) fit ``max_length`` tokens, and how many did not.
    A longer row is left out rather than truncated: truncation cuts the completion, so the model would learn
    an answer that stops mid-edit, and a prompt as long as the limit leaves no token to learn from (a 0/0
    loss)."""
    kept = [r for r in rows if len(tok(r["prompt"])["input_ids"]) + len(tok(r["completion"])["input_ids"]) + 1
            <= max_length]
    return kept, len(rows) - len(kept)


def cap_repeats(rows: list[dict[str, str]], k: int | None) -> tuple[list[dict[str, str]], int]:
    """At most ``k`` rows per distinct completion, the first ones in the file (None: all), and how many were left
    out. Teacher-free data repeats the zoo's files word for word across contexts; without a cap the model learns a
    handful of fixed answers and its samples stop differing."""
    if k is None:
        return rows, 0
    seen: dict[str, int] = {}
    kept = []
    for r in rows:
        seen[r["completion"]] = seen.get(r["completion"], 0) + 1
        if seen[r["completion"]] <= k:
            kept.append(r)
    return kept, len(rows) - len(kept)


class SFTDiverged(RuntimeError):
    """Training reached a loss or gradient norm that is not finite; no adapter was saved."""


def finite_guard() -> Any:
    """A transformers ``TrainerCallback`` that stops training at the first logged loss or gradient norm that
    is not finite (``.diverged`` holds that log); the caller then refuses to save the adapter."""
    import math

    from transformers import TrainerCallback

    class FiniteGuard(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.diverged: dict[str, Any] | None = None

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            for key in ("loss", "grad_norm"):
                v = (logs or {}).get(key)
                if isinstance(v, int | float) and not math.isfinite(v) and self.diverged is None:
                    self.diverged = {"step": state.global_step, key: str(v)}
                    control.should_training_stop = True

    return FiniteGuard()


def latest_checkpoint(output_dir: str | Path) -> str | None:
    cps = sorted(Path(output_dir).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    return str(cps[-1]) if cps else None


def resume_arg(resume: bool | str, output_dir: str) -> str | None:
    """TRL's resume_from_checkpoint value: None, or the checkpoint folder to resume from."""
    if resume is False:
        return None
    if resume is True:
        return latest_checkpoint(output_dir)  # nothing saved yet: start fresh
    if not Path(resume).is_dir():
        raise UserError(f"checkpoint not found: {resume}")
    return str(resume)


def check_output_dir(path: str) -> Path:
    """The output folder, checked (not created) before a model is loaded: not a file, and writable, or
    creatable in the nearest folder above it that exists."""
    out = Path(path)
    if not path.strip():
        raise UserError("output_dir: the path is empty")
    if out.exists() and not out.is_dir():
        raise UserError(f"output_dir: {out} is a file, not a folder")
    near = next((p for p in (out, *out.absolute().parents) if p.exists()), Path("/"))
    if not near.is_dir() or not os.access(near, os.W_OK | os.X_OK):
        raise UserError(f"output_dir: {near} is not a writable folder" + ("" if near == out else f" (for {out})"))
    return out


# the SFT settings a resumed run must share with the run it continues (the checkpoint was trained with them)
SFT_FIXED = ("model", "adapter", "data", "lora.r", "lora.alpha", "lora.target_modules", "trainer.learning_rate",
             "trainer.micro_batch", "trainer.grad_accum", "max_length", "max_same_completion", "seed")
SFT_SETTINGS = "harnesslearn-sft.json"


def _check_resume(cfg: SFTTrainConfig, out: Path) -> None:
    """On a resume, refuse a setting changed since the run it continues, in one line, naming it."""
    now = cfg.record()
    path = out / SFT_SETTINGS
    if resume_arg(cfg.resume, cfg.output_dir) is not None and path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        for key in SFT_FIXED:
            was, new = old.get(key), now.get(key)
            if key in old and (list(was) if isinstance(was, tuple) else was) != (list(new) if isinstance(new, tuple) else new):
                raise UserError(f"resume: {key} was {was!r} in the run being resumed, now {new!r} (use a new "
                                f"output_dir, or resume: false)")


def run_sft(cfg: SFTTrainConfig, *, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Train; returns a summary (steps, final loss, where the adapter went). ``callbacks``:
    transformers ``TrainerCallback``s (for example a deadline that stops training)."""
    rows = read_sft_jsonl(cfg.data)  # a missing or empty file fails before the slow imports
    rows, repeats = cap_repeats(rows, cfg.max_same_completion)
    if repeats:
        print(f"harnesslearn: SFT: {repeats} row(s) left out: more than {cfg.max_same_completion} with the same "
              f"completion ({len({r['completion'] for r in rows})} distinct completions kept)", file=sys.stderr)
    out = check_output_dir(cfg.output_dir)
    _check_resume(cfg, out)
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    model, tok = load_policy(cfg.model, adapter=cfg.adapter, bf16=cfg.trainer.bf16,
                           targets=cfg.lora.target_modules)
    rows, too_long = fit_rows(rows, tok, cfg.max_length)
    if too_long:
        print(f"harnesslearn: SFT: {too_long} row(s) longer than max_length {cfg.max_length} tokens left out",
              file=sys.stderr)
    if not rows:
        raise UserError(f"every SFT row of {cfg.data} is longer than max_length {cfg.max_length} tokens")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / SFT_SETTINGS, json.dumps(cfg.record(), indent=1) + "\n")  # what a resume compares
    args = SFTConfig(
        output_dir=cfg.output_dir,
        seed=cfg.seed,
        **cfg.trainer.kwargs(),
        per_device_train_batch_size=cfg.trainer.micro_batch,
        gradient_accumulation_steps=cfg.trainer.grad_accum,
        max_length=cfg.max_length,
        completion_only_loss=True,
        dataset_num_proc=None,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        peft_config=None if cfg.adapter else lora_config(cfg.lora.r, cfg.lora.alpha, cfg.lora.dropout,
                                                         cfg.lora.target_modules),
    )
    guard = finite_guard()
    for cb in [guard, *(callbacks or [])]:
        trainer.add_callback(cb)
    result = trainer.train(resume_from_checkpoint=resume_arg(cfg.resume, cfg.output_dir))
    if guard.diverged is not None:
        raise SFTDiverged(f"SFT diverged ({guard.diverged}): no adapter saved; lower the learning rate or check "
                          "the data")
    final = Path(cfg.output_dir) / "adapter"
    trainer.save_model(str(final))
    print(f"harnesslearn: SFT adapter saved to {final}", file=sys.stderr)
    return {
        "command": "sft",
        "examples": len(rows),
        "too_long": too_long,
        "repeats_left_out": repeats,
        "distinct_completions": len({r["completion"] for r in rows}),
        "steps": int(result.global_step),
        "train_loss": float(result.training_loss),
        "adapter": str(final),
        "output_dir": cfg.output_dir,
    }
