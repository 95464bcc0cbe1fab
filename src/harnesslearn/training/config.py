"""Training configs: one dataclass per command, loaded from YAML with every key checked.

Each field carries its help text in ``metadata["help"]`` (``harnesslearn train ... --help`` and
the YAML files in ``configs/`` repeat it). Unknown keys, wrong types and out-of-range values are a
``UserError`` (CLI exit 2, one line). What the check does NOT cover: whether a model spec or a task
family actually exists (that is found when the command loads them).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from harnesslearn.errors import UserError
from harnesslearn.propose.formats import FormatName
from harnesslearn.propose.prompt import Style
from harnesslearn.sandbox.executor import Isolation
from harnesslearn.settings import check_settings, setting
from harnesslearn.tasks.families import family_set

PAPER_TRAIN = list(family_set("paper-train"))


def _f(default: Any, help: str, *, lo: float | None = None) -> Any:
    """A config field (``settings.setting``, set from the YAML file rather than a CLI option)."""
    return setting(default, None, help, lo=lo)


@dataclass
class Common:
    """Fields shared by the commands that evaluate harnesses (solver, splits, sandbox)."""

    solver: str = _f("local:gemma-3-270m", "Solver model spec (frozen), e.g. openai:Qwen3.5-4B.")
    solver_base_url: str | list[str] | None = _f(
        None, "Base URL of the solver's OpenAI-compatible server; a list of URLs is a pool of servers "
              "(least-outstanding-requests routing, failing servers drained).")
    families: list[str] = _f(PAPER_TRAIN, "Training families: task specs (rg:NAME) or bare Reasoning Gym names.")
    n_feedback: int = _f(8, "Problems of the feedback split evaluated to build a context's feedback.", lo=1)
    n_score: int = _f(16, "Problems of the score split that J (the reward) is computed on.", lo=1)
    n_traces: int = _f(4, "Per-problem traces shown in a proposer prompt.")
    timeout_s: float = _f(60.0, "Wall-clock limit of one solve() call, seconds.")
    max_calls: int = _f(16, "Solver calls allowed per problem.")
    max_tokens_per_problem: int = _f(8192, "Solver tokens (prompt + completion) allowed per problem.")
    isolation: Isolation = _f(
        "auto", "Sandbox isolation: auto | bwrap | landlock | none (unsafe).")
    concurrency: int | None = _f(None, "Concurrent sandboxed runs (None: the executor's default).")
    spare_slots: int = _f(0, "Pre-started sandbox slots beyond those (a freed slot rebuilds while the next run "
                          "starts in a spare one).", lo=0)
    worker_python: str | None = _f(None, "Worker interpreter of sandboxed runs (None: the executor's default search).")
    executor: str = _f("local", "Where harness runs execute: local | ray | ray:auto | ray:HOST:PORT | ray://HOST:PORT "
                       "(concurrency is then per node) | shards:K (K trusted processes on this machine).")
    run_dir: str | None = _f(None, "Run store directory; reward components and proposals are recorded there.")
    seed: int = _f(0, "Random seed (problem sampling, context order, training).")


@dataclass
class SFTDataConfig(Common):
    """`harnesslearn train sft-data`: teacher revisions of the seed, filtered into a chat JSONL."""

    teacher: str = _f("openai:Qwen3.5-35B", "Teacher model spec that writes the revisions.")
    teacher_base_url: str | None = _f(None, "Base URL of the teacher's OpenAI-compatible server.")
    seed_harness: str = _f("minimal", "Seed harness (shipped name or .py path) that the teacher revises.")
    contexts_per_family: int = _f(8, "Contexts per family (each with its own problem seed).", lo=1)
    candidates: int = _f(8, "Teacher completions per context.", lo=1)
    temperature: float = _f(0.8, "Teacher sampling temperature.")
    max_tokens: int = _f(2048, "Teacher completion length limit, tokens.")
    style: Style = _f("canonical", "Prompt style: canonical | varied.")
    proposer_format: Literal["plain-search", "plain-rewrite"] = _f(
        "plain-search", "The proposer format the teacher continues (a plain one: the rows are prompt text -> "
        "completion): plain-search (an open SEARCH marker) | plain-rewrite (a block opened on solve).")
    min_gain: float = _f(0.0, "Keep a revision only if J(revision) - J(seed) is greater than this.")
    max_source_chars: int = _f(12000, "Quality screen: largest revised harness, characters.")
    max_source_lines: int = _f(300, "Quality screen: largest revised harness, lines.")
    out: str = _f("data/sft.jsonl", "Output chat-format JSONL (messages + provenance).")


@dataclass
class Lora:
    """LoRA settings shared by SFT and GRPO."""

    lora_r: int = _f(32, "LoRA rank.", lo=1)
    lora_alpha: int = _f(64, "LoRA alpha (scale = alpha / r).")
    lora_dropout: float = _f(0.05, "LoRA dropout.")
    target_modules: str | list[str] = _f("all-linear", "Modules that get adapters ('all-linear' or a list).")


@dataclass
class Trainer:
    """Trainer plumbing shared by SFT and GRPO."""

    model: str = _f("local:gemma-3-270m", "Policy: hf:PATH / a transformers folder, or local:gemma-3-270m.")
    adapter: str | None = _f(None, "A LoRA adapter folder to start from (e.g. the SFT output).")
    output_dir: str = _f("outputs/train", "Checkpoints, adapter and logs go here.")
    learning_rate: float = _f(1e-4, "Learning rate.")
    epochs: float = _f(1.0, "Training epochs (fractional allowed).")
    max_steps: int = _f(-1, "Stop after this many optimizer steps (-1: run the epochs).")
    micro_batch: int = _f(8, "Sequences per forward pass (per device).", lo=1)
    save_steps: int = _f(50, "Save a checkpoint every N optimizer steps.")
    save_total_limit: int | None = _f(3, "Checkpoints kept.")
    logging_steps: int = _f(1, "Log every N steps.")
    report_to: str | list[str] = _f("tensorboard", "TRL/transformers report_to (tensorboard, wandb, none).")
    resume: bool | str = _f(False, "Resume: true = the latest checkpoint in output_dir, or a checkpoint path.")
    use_cpu: bool = _f(False, "Force the CPU even when an accelerator is present.")
    bf16: bool = _f(False, "bf16 training (accelerators).")
    gradient_checkpointing: bool = _f(False, "Trade compute for memory.")
    seed: int = _f(0, "Random seed.")


@dataclass
class SFTTrainConfig(Lora, Trainer):
    """`harnesslearn train sft`: TRL SFTTrainer + LoRA on the sft-data JSONL."""

    data: str = _f("data/sft.jsonl", "Chat-format JSONL written by sft-data.")
    epochs: float = _f(2.9, "Training epochs (the paper: about 2.9).")
    grad_accum: int = _f(1, "Gradient accumulation steps.")
    max_length: int = _f(4096, "Longest tokenized example (prompt + completion); longer ones are left out, "
                         "counted as too_long (truncation would cut the completion).")


@dataclass
class GRPOTrainConfig(Lora, Trainer, Common):
    """`harnesslearn train grpo`: TRL GRPOTrainer with the execution reward."""

    learning_rate: float = _f(1e-6, "Learning rate (the paper: 1e-6).")
    num_generations: int = _f(8, "Candidates per context (the paper: 8).", lo=1)
    contexts_per_update: int = _f(40, "Contexts per optimizer update (the paper: 40).", lo=1)
    contexts_per_epoch: int = _f(640, "Contexts per epoch (the paper: 640).", lo=1)
    max_prompt_chars: int | None = _f(None, "Drop contexts whose prompt is longer (None: keep all).")
    max_completion_length: int = _f(1024, "Proposer completion length limit, tokens.", lo=1)
    temperature: float = _f(1.0, "Policy sampling temperature during rollouts.")
    beta: float = _f(0.0, "KL coefficient (0: no reference model).")
    seed_harnesses: list[str] = _f(["minimal"], "Seed harnesses contexts start from (names, .py paths, or style:NAME).")
    style: Style = _f("canonical", "Prompt style: canonical | varied (the format-varied variant).")
    proposer_format: FormatName = _f("plain-search", "The proposer format the policy is trained in, by name (the "
                                     "names of adapt's --proposer-format but auto): plain-search (a base model continues "
                              "a plain prompt ending in an open SEARCH marker) | plain-rewrite | chat-blocks | "
                              "chat-prefill (chat, the rewrite of solve opened in the assistant turn, as at test "
                              "time with an in-process engine) | chat-function | chat-file.")
    multistep: bool = _f(False, "Multistep variant: contexts from revision sequences of the policy as it is when "
                         "the command starts (run an epoch per invocation with resume to refresh them).")
    multistep_max_rounds: int = _f(2, "Multistep: a context's harness is the best after k in [0, this] rounds.")
    multistep_candidates: int = _f(2, "Multistep: candidates per revision round when building sequences.", lo=1)
    rollouts: str | None = _f(None, "Rollout export JSONL (default: OUTPUT_DIR/rollouts.jsonl).")
    gradient_checkpointing: bool = _f(True, "Trade compute for memory (GRPO: on; without it the 1.5B's training "
                                      "pass ran out of memory on an H200 beside vLLM).")
    use_vllm: bool = _f(False, "Generate rollouts with vLLM colocated in the training process (TRL's vllm_mode "
                        "'colocate'; GPU machines with the vllm extra); false: transformers generate.")
    vllm_gpu_memory_utilization: float = _f(0.15, "Share of GPU memory the colocated vLLM engine takes "
                                            "(a solver server on the same GPU takes its own share).", lo=0.01)
    vllm_sleep: bool = _f(True, "Put the colocated vLLM engine to sleep (weights and cache freed) while training.")
    vllm_max_model_length: int | None = _f(8192, "Longest prompt + completion of the colocated engine, tokens "
                                           "(None: the model's own limit; smaller leaves more memory).")


C = TypeVar("C")


def field_help(cls: type) -> dict[str, str]:
    """``{field name: help}`` of a config dataclass."""
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}


def _check_type(name: str, value: Any, hint: Any) -> Any:
    """Coerce/validate one YAML value against a field's type hint; UserError if it does not fit."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arm in typing.get_args(hint):
            try:
                return _check_type(name, value, arm)
            except UserError as e:
                errors.append(str(e))
        raise UserError(f"config key {name!r}: {value!r} does not fit {hint}")
    if origin is typing.Literal:
        if value in typing.get_args(hint):
            return value
        raise UserError(f"config key {name!r} must be one of {', '.join(map(str, typing.get_args(hint)))} "
                        f"(got {value!r})")
    if hint is type(None):
        if value is None:
            return None
    elif origin is list:
        (item,) = typing.get_args(hint)
        if isinstance(value, list):
            return [_check_type(name, v, item) for v in value]
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint in (str, bool):
        if isinstance(value, hint):
            return value
    raise UserError(f"config key {name!r}: {value!r} does not fit {getattr(hint, '__name__', hint)}")


def build_config(cls: type[C], raw: dict[str, Any], where: str = "config") -> C:
    """Build ``cls`` from a mapping; unknown keys and wrong types are a one-line UserError."""
    if not isinstance(raw, dict):
        raise UserError(f"{where}: expected a mapping of keys to values")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - names)
    if unknown:
        import difflib

        near = difflib.get_close_matches(unknown[0], sorted(names), n=1)
        if unknown[0] in ("form", "prime") and "proposer_format" in names:  # the two keys it replaced
            near = ["proposer_format"]
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise UserError(f"{where}: unknown key {unknown[0]!r}{hint}")
    values = {k: _check_type(k, v, hints[k]) for k, v in raw.items()}
    cfg = cls(**values)
    _check_ranges(cfg)
    return cfg


def _check_ranges(cfg: Any) -> None:
    """Bounds and choices through the settings engine, then the executor option."""
    check_settings(cfg, label="config key '{}'")
    if hasattr(cfg, "executor"):
        from harnesslearn.sandbox.executors import parse_executor

        parse_executor(cfg.executor)


def load_config(cls: type[C], path: str | Path) -> C:
    """Read a YAML file into ``cls``. A missing file, bad YAML or a bad key is a UserError."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config not found: {path}")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise UserError(f"config {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    return build_config(cls, raw, where=f"config {p.name}")


def trainer_kwargs(cfg: Any) -> dict[str, Any]:
    """The TrainingArguments fields that SFT and GRPO configs share (one place, not two copies)."""
    return {
        "output_dir": cfg.output_dir,
        "learning_rate": cfg.learning_rate,
        "num_train_epochs": cfg.epochs,
        "max_steps": cfg.max_steps,
        "save_steps": cfg.save_steps,
        "save_total_limit": cfg.save_total_limit,
        "logging_steps": cfg.logging_steps,
        "report_to": cfg.report_to,
        "use_cpu": cfg.use_cpu,
        "bf16": cfg.bf16,
        "seed": cfg.seed,
        "gradient_checkpointing": cfg.gradient_checkpointing,
    }
