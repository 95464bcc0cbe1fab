"""The compact, resumable state of a GRPO run: what a run needs to continue on another machine.

A GRPO run that spans device stretches (each a fresh machine) cannot carry TRL's checkpoints: the
Adam moments of a rank-32 LoRA on a 1.5B model are ~70 MB next to the 17 MB adapter. After every
optimizer update this module writes, under ``OUTPUT_DIR/state/``::

    adapter/adapter_model.safetensors   the LoRA weights in bf16 (17.4 MB for r=32 on q/k/v/o of the 1.5B)
    adapter/adapter_config.json
    state.json                          updates done, contexts consumed, the settings that must not change
    updates.jsonl                       one line per update: reward parts, TRL's own figures (loss,
                                        frac_reward_zero_std, clipped ratio, entropy, ...), seconds per
                                        phase, peak GPU memory, the adapter's norm, the groups' figures
                                        (``rollouts.group_stats``: distinct texts per group, copy share,
                                        share beating the parent, parents' J), the policy's entropy
                                        (TRL's) and the collapse alarm's reasons (``rollouts.collapse_alarm``,
                                        also a log line)

A run with ``resume: true`` starts from ``adapter/`` and skips the contexts already consumed
(contexts are planned deterministically from the seed, so the next update sees exactly the contexts
an uninterrupted run would have seen). What it does NOT restore: the optimizer state (Adam's
moments start again from zero, which with a constant learning rate only re-warms the first few
updates) and the fp32 master copy of the adapter (it continues from the bf16 rounding of it).
The adapter is written to ``adapter.tmp`` and renamed, and ``state.json`` is replaced atomically
after it, so a process killed mid-write leaves the previous update's state.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError
from harnesslearn.fsutil import atomic_write_text, finite

# the settings a resumed run must share with the run it continues (anything else may change), by the
# dotted keys of the config's record (``GRPOTrainConfig.record``)
FIXED = ("model", "lora.r", "lora.alpha", "lora.target_modules", "trainer.learning_rate", "grpo.num_generations",
         "grpo.contexts_per_update", "grpo.contexts_per_epoch", "families", "seed", "grpo.seed_harnesses",
         "proposer.format", "proposer.style", "splits.n_score", "splits.n_feedback", "grpo.beta",
         "proposer.sampling.temperature", "proposer.sampling.max_tokens", "solver")


@dataclass
class GRPOState:
    """``OUTPUT_DIR/state``: see the module docstring."""

    dir: Path

    @property
    def adapter(self) -> Path:
        return self.dir / "adapter"

    @property
    def log(self) -> Path:
        return self.dir / "updates.jsonl"

    def read(self) -> dict[str, Any] | None:
        """The recorded state, or None when no update finished yet."""
        p = self.dir / "state.json"
        if not p.is_file() or not (self.adapter / "adapter_config.json").is_file():
            return None
        try:
            data: dict[str, Any] = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"GRPO state {p} is damaged ({e}); remove {self.dir} to start over") from None
        return data

    def check(self, recorded: dict[str, Any], settings: dict[str, Any]) -> None:
        """Refuse to resume with a changed setting that shapes the run (one line, naming it). A state written
        before the settings tree (flat keys such as ``lora_r``) is read through the configs' ``LEGACY`` names."""
        from harnesslearn.training.config import LEGACY

        old = {LEGACY.get(k, k): v for k, v in recorded.get("settings", {}).items()}
        for key in FIXED:
            if key in old and key in settings and _norm(old[key]) != _norm(settings[key]):
                raise UserError(f"resume: {key} was {old[key]!r} in the run being resumed, now {settings[key]!r} "
                                f"(use a new output_dir, or remove {self.dir})")

    def save(self, model: Any, *, updates: int, contexts: int, settings: dict[str, Any]) -> None:
        """The adapter (bf16) and ``state.json`` after ``updates`` optimizer updates."""
        import torch
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "adapter.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        weights = {k: v.detach().to(torch.bfloat16).cpu().contiguous()
                   for k, v in get_peft_model_state_dict(model).items()}
        save_file(weights, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
        model.peft_config["default"].save_pretrained(str(tmp))
        old = self.dir / "adapter.old"
        shutil.rmtree(old, ignore_errors=True)
        if self.adapter.exists():
            self.adapter.rename(old)
        tmp.rename(self.adapter)
        shutil.rmtree(old, ignore_errors=True)
        atomic_write_text(self.dir / "state.json", json.dumps(
            {"updates": updates, "contexts": contexts, "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
             "settings": {k: settings.get(k) for k in FIXED}}, indent=1, default=str) + "\n")

    def append(self, record: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with self.log.open("a", encoding="utf-8") as f:
            f.write(json.dumps(finite(record), default=str, allow_nan=False) + "\n")


def _norm(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def adapter_norm(model: Any) -> float:
    """Frobenius norm of all LoRA B matrices (zero at initialisation): how far the adapter moved."""
    total = 0.0
    for name, p in model.named_parameters():
        if "lora_B" in name:
            total += float(p.detach().float().pow(2).sum())
    return math.sqrt(total)


def recorder(saved: GRPOState, model: Any, clock: Any, sink: Any, *, step0: int, positions: list[int],
             contexts_per_update: int, settings: dict[str, Any], waited: Callable[[], float] | None = None,
             group_size: int = 0) -> Any:
    """A transformers ``TrainerCallback`` that saves the state after every optimizer update and
    appends the update's record to ``updates.jsonl`` (``clock``: the run's ``PhaseClock``; ``sink``:
    its ``RolloutSink``, whose last entry holds the update's reward parts; ``positions``: the stream
    position of each row of the training dataset, in order; ``waited``: seconds the trainer waited for
    contexts since it was last called, recorded as the update's "contexts" phase; ``group_size``: completions per
    context, for the collapse alarm)."""
    import sys

    from transformers import TrainerCallback

    from harnesslearn.training.rollouts import collapse_alarm

    def consumed(steps: int) -> int:  # stream positions used up after ``steps`` updates of this process
        return positions[steps * contexts_per_update - 1] + 1

    def cuda() -> Any:
        try:
            import torch
        except ImportError:
            return None
        return torch.cuda if torch.cuda.is_available() else None

    class Recorder(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.t0 = time.time()
            self.pending: dict[str, Any] = {}

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.t0 = time.time()
            if (c := cuda()) is not None:
                c.reset_peak_memory_stats()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            now = time.time()
            updates = step0 + int(state.global_step)
            contexts = consumed(int(state.global_step))
            saved.save(model, updates=updates, contexts=contexts, settings=settings)
            phases = dict(clock.phases)
            if "reward_end" in phases:
                phases["update"] = now - phases.pop("reward_end")
            if waited is not None:
                phases["contexts"] = waited()
            rec: dict[str, Any] = {"update": updates, "contexts": contexts,
                                   "seconds": {k: round(v, 2) for k, v in phases.items()} | {"step": round(now - self.t0, 2)},
                                   "adapter_norm": round(adapter_norm(model), 6)}
            if (c := cuda()) is not None:
                free, total = c.mem_get_info()
                rec["peak_gb_this_process"] = round(c.max_memory_allocated() / 2**30, 2)
                rec["gpu_used_gb"] = round((total - free) / 2**30, 2)
            if sink.history:
                rec["reward_parts"] = {k: v for k, v in sink.history[-1].items() if k != "step"}
            if getattr(sink, "group_history", None):
                rec["groups"] = {k: v for k, v in sink.group_history[-1].items() if k != "step"}
                alarm = collapse_alarm(rec["groups"], group_size)
                rec["collapse_alarm"] = alarm
                if alarm:
                    print(f"harnesslearn: COLLAPSE ALARM at update {updates}: {'; '.join(alarm)}", file=sys.stderr,
                          flush=True)
            clock.phases.clear()
            self.pending = rec

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if not self.pending:
                return
            trl = {k: v for k, v in (logs or {}).items() if isinstance(v, int | float)}
            saved.append({**self.pending, "entropy": trl.get("entropy"), "trl": trl})
            self.pending = {}

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.pending:  # an update whose log never came (logging_steps > 1)
                saved.append(self.pending)
                self.pending = {}

    return Recorder()
