"""`harnesslearn train sft-data | sft | grpo`: training the proposer."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from harnesslearn import aio
from harnesslearn.cli.app import JsonOpt, emit, train_app
from harnesslearn.cli.options import SET_HELP
from harnesslearn.sandbox.executors import EXECUTOR_HELP

# ---------------------------------------------------------------- train


ConfigOpt = Annotated[Path, typer.Option("--config", help="YAML config (see configs/paper and configs/tiny).")]


TrainExecutorOpt = Annotated[str | None, typer.Option(
    "--executor", help="Overrides the config's runtime.executor. " + EXECUTOR_HELP)]


SetOpt = Annotated[list[str] | None, typer.Option("--set", help=SET_HELP, metavar="KEY=VALUE")]


@contextlib.contextmanager
def _logs_to_stderr() -> Iterator[None]:
    """The trainers' log lines (transformers' progress callback prints its dicts on stdout) go to stderr:
    stdout holds the command's one result."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _overrides(sets: list[str] | None, executor: str | None = None) -> list[str]:
    """The ``--set`` overrides, then ``--executor`` as ``runtime.executor=X`` (it wins over the config)."""
    return [*(sets or ()), *([f"runtime.executor={executor}"] if executor is not None else [])]


@train_app.command("sft-data")
def train_sft_data(config: ConfigOpt, executor: TrainExecutorOpt = None, sets: SetOpt = None,
                   as_json: JsonOpt = False) -> None:
    """Teacher revisions of the seed on the training families, filtered into a chat JSONL."""

    from harnesslearn.training.config import SFTDataConfig, load_config
    from harnesslearn.training.sft_data import generate

    cfg = load_config(SFTDataConfig, config, _overrides(sets, executor))
    with _logs_to_stderr():
        result = aio.run(generate(cfg))
    share = ", ".join(f"{k} {v:.0%}" for k, v in result["kind_share"].items())
    emit(result, as_json, f"kept {result['kept']} of {result['candidates']} revisions -> {result['out']} ({share})")


@train_app.command("sft")
def train_sft(config: ConfigOpt, sets: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Supervised fine-tuning of the proposer (TRL SFTTrainer + LoRA)."""
    from harnesslearn.training.config import SFTTrainConfig, load_config
    from harnesslearn.training.sft import run_sft

    cfg = load_config(SFTTrainConfig, config, _overrides(sets))
    with _logs_to_stderr():
        result = run_sft(cfg)
    emit(result, as_json, f"{result['steps']} steps, loss {result['train_loss']:.4f}, adapter {result['adapter']}")


@train_app.command("grpo")
def train_grpo(config: ConfigOpt, executor: TrainExecutorOpt = None, sets: SetOpt = None,
               as_json: JsonOpt = False) -> None:
    """GRPO of the proposer with the execution reward (TRL GRPOTrainer + LoRA)."""
    from harnesslearn.training.config import GRPOTrainConfig, load_config
    from harnesslearn.training.grpo import run_grpo

    cfg = load_config(GRPOTrainConfig, config, _overrides(sets, executor))
    with _logs_to_stderr():
        result = run_grpo(cfg)
    emit(result, as_json, f"{result['steps']} steps on {result['contexts']} contexts, adapter {result['adapter']}, "
         f"rollouts {result['rollouts']}")
