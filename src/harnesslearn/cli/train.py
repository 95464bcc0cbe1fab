"""`harnesslearn train sft-data | sft | grpo`: training the proposer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from harnesslearn import aio
from harnesslearn.cli.app import JsonOpt, emit, train_app
from harnesslearn.sandbox.executors import EXECUTOR_HELP

# ---------------------------------------------------------------- train


ConfigOpt = Annotated[Path, typer.Option("--config", help="YAML config (see configs/paper and configs/tiny).")]


TrainExecutorOpt = Annotated[str | None, typer.Option(
    "--executor", help="Overrides the config's executor. " + EXECUTOR_HELP)]


def _with_executor(cfg: Any, executor: str | None) -> Any:
    if executor is not None:
        from harnesslearn.sandbox import parse_executor

        parse_executor(executor)
        cfg.executor = executor
    return cfg


@train_app.command("sft-data")
def train_sft_data(config: ConfigOpt, executor: TrainExecutorOpt = None, as_json: JsonOpt = False) -> None:
    """Teacher revisions of the seed on the training families, filtered into a chat JSONL."""

    from harnesslearn.training.config import SFTDataConfig, load_config
    from harnesslearn.training.sft_data import generate

    result = aio.run(generate(_with_executor(load_config(SFTDataConfig, config), executor)))
    share = ", ".join(f"{k} {v:.0%}" for k, v in result["kind_share"].items())
    emit(result, as_json, f"kept {result['kept']} of {result['candidates']} revisions -> {result['out']} ({share})")


@train_app.command("sft")
def train_sft(config: ConfigOpt, as_json: JsonOpt = False) -> None:
    """Supervised fine-tuning of the proposer (TRL SFTTrainer + LoRA)."""
    from harnesslearn.training.config import SFTTrainConfig, load_config
    from harnesslearn.training.sft import run_sft

    result = run_sft(load_config(SFTTrainConfig, config))
    emit(result, as_json, f"{result['steps']} steps, loss {result['train_loss']:.4f}, adapter {result['adapter']}")


@train_app.command("grpo")
def train_grpo(config: ConfigOpt, executor: TrainExecutorOpt = None, as_json: JsonOpt = False) -> None:
    """GRPO of the proposer with the execution reward (TRL GRPOTrainer + LoRA)."""
    from harnesslearn.training.config import GRPOTrainConfig, load_config
    from harnesslearn.training.grpo import run_grpo

    result = run_grpo(_with_executor(load_config(GRPOTrainConfig, config), executor))
    emit(result, as_json, f"{result['steps']} steps on {result['contexts']} contexts, adapter {result['adapter']}, "
         f"rollouts {result['rollouts']}")
