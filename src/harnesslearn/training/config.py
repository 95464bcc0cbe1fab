"""Training configs: one settings tree per command, composed of the shared groups
(``harnesslearn.settings.groups``) and loaded by the one loader (YAML + ``--set KEY=VALUE``).

Each field is declared once, with its type, bounds and help (``harnesslearn train ... --help`` and the
YAML files in ``configs/`` repeat it). Unknown keys, wrong types and out-of-range values are a
``UserError`` (CLI exit 2, one line). What the check does NOT cover: whether a model spec or a task
family actually exists (that is found when the command loads them).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from harnesslearn.errors import UserError
from harnesslearn.propose.formats import FormatName
from harnesslearn.sandbox.records import Budgets
from harnesslearn.settings.base import Settings, setting
from harnesslearn.settings.groups import Lora, ProposerSettings, RuntimeSettings, Sampling, TrainSplits
from harnesslearn.settings.load import load
from harnesslearn.tasks.families import family_set

PAPER_TRAIN = tuple(family_set("paper-train"))
MAX_STEPS = 10**7

# the flat keys of the configs written before the settings tree -> today's dotted keys (named in the error)
LEGACY = {
    "n_feedback": "splits.n_feedback", "n_score": "splits.n_score", "n_traces": "proposer.n_traces",
    "timeout_s": "budgets.timeout_s", "max_calls": "budgets.max_calls", "max_tokens_per_problem": "budgets.max_tokens",
    "isolation": "runtime.isolation", "concurrency": "runtime.concurrency", "spare_slots": "runtime.spare_slots",
    "worker_python": "runtime.worker_python", "executor": "runtime.executor", "style": "proposer.style",
    "proposer_format": "proposer.format", "form": "proposer.format", "prime": "proposer.format",
    "temperature": "proposer.sampling.temperature", "max_tokens": "proposer.sampling.max_tokens",
    "max_completion_length": "proposer.sampling.max_tokens", "lora_r": "lora.r", "lora_alpha": "lora.alpha",
    "lora_dropout": "lora.dropout", "target_modules": "lora.target_modules",
    **{k: f"trainer.{k}" for k in ("learning_rate", "epochs", "max_steps", "micro_batch", "grad_accum",
                                   "gradient_checkpointing", "bf16", "use_cpu", "save_steps", "save_total_limit",
                                   "logging_steps", "report_to")},
    **{k: f"grpo.{k}" for k in ("num_generations", "contexts_per_update", "contexts_per_epoch", "max_prompt_chars",
                                "beta", "seed_harnesses", "multistep", "multistep_max_rounds", "multistep_candidates")},
    "use_vllm": "vllm.use", "vllm_gpu_memory_utilization": "vllm.gpu_memory_utilization", "vllm_sleep": "vllm.sleep",
    "vllm_max_model_length": "vllm.max_model_length"}


class Common(Settings):
    """Fields shared by the commands that evaluate harnesses (solver, families, splits, budgets, sandbox)."""

    solver: str = setting("local:gemma-3-270m", None, "Solver model spec (frozen), e.g. openai:Qwen3.5-4B.")
    solver_base_url: str | tuple[str, ...] | None = setting(
        None, None, "Base URL of the solver's OpenAI-compatible server; a list of URLs is a pool of servers "
        "(least-outstanding-requests routing, failing servers drained).")
    families: tuple[str, ...] = setting(PAPER_TRAIN, None, "Training families: task specs (rg:NAME) or bare "
                                        "Reasoning Gym names.")
    splits: TrainSplits = setting(TrainSplits(), None, "Feedback and score splits of a context.")
    budgets: Budgets = setting(Budgets(), None, "Per-problem limits of a harness run.")
    runtime: RuntimeSettings = setting(RuntimeSettings(), None, "Where harness runs execute.")
    run_dir: str | None = setting(None, None, "Run store directory; reward components and proposals are recorded "
                                  "there.")
    seed: int = setting(0, None, "Random seed (problem sampling, context order, training).", lo=0, hi=2**31 - 1)
    legacy: ClassVar[dict[str, str]] = LEGACY

    def model_post_init(self, _: object) -> None:
        if not self.families:
            raise UserError("families must name at least one task family")


class SFTDataConfig(Common):
    """`harnesslearn train sft-data`: teacher revisions of the seed, filtered into a chat JSONL."""

    teacher: str = setting("openai:Qwen3.5-35B", None, "Teacher model spec that writes the revisions.")
    teacher_base_url: str | None = setting(None, None, "Base URL of the teacher's OpenAI-compatible server.")
    seed_harness: str = setting("minimal", None, "Seed harness (shipped name or .py path) that the teacher revises.")
    contexts_per_family: int = setting(8, None, "Contexts per family (each with its own problem seed).", lo=1,
                                       hi=100_000)
    candidates: int = setting(8, None, "Teacher completions per context.", lo=1, hi=1_000)
    proposer: ProposerSettings = setting(
        ProposerSettings(format="plain-search", sampling=Sampling(temperature=0.8, max_tokens=2048)), None,
        "How the teacher is prompted and samples; its format must be a plain one (the rows are prompt text -> "
        "completion): plain-search (an open SEARCH marker) | plain-rewrite (a block opened on solve).")
    min_gain: float = setting(0.0, None, "Keep a revision only if J(revision) - J(seed) is greater than this.",
                              lo=-1.0, hi=1.0)
    max_source_chars: int = setting(12000, None, "Quality screen: largest revised harness, characters.", lo=1)
    max_source_lines: int = setting(300, None, "Quality screen: largest revised harness, lines.", lo=1)
    out: str = setting("data/sft.jsonl", None, "Output chat-format JSONL (messages + provenance).")

    def model_post_init(self, _: object) -> None:
        super().model_post_init(_)
        if self.proposer.format not in ("plain-search", "plain-rewrite"):
            raise UserError(f"config key 'proposer.format' must be plain-search or plain-rewrite for sft-data "
                            f"(got {self.proposer.format!r})")


class TrainerSettings(Settings):
    """The optimiser and checkpointing, shared by SFT and GRPO (TrainingArguments)."""

    learning_rate: float = setting(1e-4, None, "Learning rate.", lo=1e-12, hi=1.0)
    epochs: float = setting(1.0, None, "Training epochs (fractional allowed).", lo=0.0, hi=10_000.0)
    max_steps: int = setting(-1, None, "Stop after this many optimizer steps (-1: run the epochs).", lo=-1,
                             hi=MAX_STEPS)
    micro_batch: int = setting(8, None, "Sequences per forward pass (per device).", lo=1, hi=65_536)
    grad_accum: int = setting(1, None, "Gradient accumulation steps.", lo=1, hi=65_536)
    gradient_checkpointing: bool = setting(False, None, "Trade compute for memory.")
    bf16: bool = setting(False, None, "bf16 training (accelerators).")
    use_cpu: bool = setting(False, None, "Force the CPU even when an accelerator is present.")
    save_steps: int = setting(50, None, "Save a checkpoint every N optimizer steps.", lo=1)
    save_total_limit: int | None = setting(3, None, "Checkpoints kept.", lo=1)
    logging_steps: int = setting(1, None, "Log every N steps.", lo=1)
    report_to: str | tuple[str, ...] = setting("tensorboard", None, "TRL/transformers report_to: tensorboard, "
                                               "mlflow, wandb (the tracking extra), a list of them, or none.")

    def kwargs(self) -> dict[str, Any]:
        """The TrainingArguments fields SFT and GRPO share (output_dir and seed are the config's)."""
        return {"learning_rate": self.learning_rate, "num_train_epochs": self.epochs, "max_steps": self.max_steps,
                "save_steps": self.save_steps, "save_total_limit": self.save_total_limit,
                "logging_steps": self.logging_steps, "report_to": _list(self.report_to), "use_cpu": self.use_cpu,
                "bf16": self.bf16, "gradient_checkpointing": self.gradient_checkpointing}


def _list(v: str | tuple[str, ...]) -> str | list[str]:
    return v if isinstance(v, str) else list(v)


class Trained(Settings):
    """What every training command has: the policy, where it starts and where its outputs go."""

    model: str = setting("local:gemma-3-270m", None, "Policy: hf:PATH / a transformers folder, or local:gemma-3-270m.")
    adapter: str | None = setting(None, None, "A LoRA adapter folder to start from (e.g. the SFT output).")
    output_dir: str = setting("outputs/train", None, "Checkpoints, adapter and logs go here.")
    resume: bool | str = setting(False, None, "Resume: true = the latest checkpoint in output_dir, or a checkpoint "
                                 "path.")
    seed: int = setting(0, None, "Random seed.", lo=0, hi=2**31 - 1)
    lora: Lora = setting(Lora(), None, "The LoRA adapter trained.")
    trainer: TrainerSettings = setting(TrainerSettings(), None, "Optimiser and checkpoints.")
    legacy: ClassVar[dict[str, str]] = LEGACY


class SFTTrainConfig(Trained):
    """`harnesslearn train sft`: TRL SFTTrainer + LoRA on the sft-data JSONL."""

    data: str = setting("data/sft.jsonl", None, "Chat-format JSONL written by sft-data.")
    trainer: TrainerSettings = setting(TrainerSettings(epochs=2.9), None, "Optimiser and checkpoints (the paper: "
                                       "about 2.9 epochs).")
    max_length: int = setting(4096, None, "Longest tokenized example (prompt + completion); longer ones are left "
                              "out, counted as too_long (truncation would cut the completion).", lo=16, hi=1_048_576)
    max_same_completion: int | None = setting(
        None, None, "Keep at most this many rows with one same completion (the first in the file), None: all. Zoo "
        "revisions repeat: 154 of the 187 rows of the H200 run were 4 zoo files, so SFT learned 4 fixed answers.",
        lo=1)


class GRPOSettings(Settings):
    """The GRPO batch and its contexts."""

    num_generations: int = setting(8, None, "Candidates per context (the paper: 8).", lo=2, hi=1_024)
    contexts_per_update: int = setting(40, None, "Contexts per optimizer update (the paper: 40).", lo=1, hi=100_000)
    contexts_per_epoch: int = setting(640, None, "Contexts per epoch (the paper: 640).", lo=1, hi=10_000_000)
    max_prompt_chars: int | None = setting(None, None, "Drop contexts whose prompt is longer (None: keep all).", lo=1)
    beta: float = setting(0.0, None, "KL coefficient (0: no reference model).", lo=0.0, hi=100.0)
    seed_harnesses: tuple[str, ...] = setting(("minimal",), None, "Seed harnesses contexts start from (names, .py "
                                              "paths, style:NAME, or zoo:NAME built for each context's family: "
                                              "a candidate then has to beat that zoo harness to beat its parent).")
    score_parent: bool = setting(True, None, "Also score each context's parent harness on its candidates' problems "
                                 "(the rollouts' parent_J, one evaluation per context): does a candidate beat the "
                                 "harness it was shown? Recorded only, never part of the reward.")
    stream_reward: bool = setting(False, None, "Start scoring each group as soon as its completions exist (TRL "
                                  "generates a batch in one call, so at once, while TRL finishes the batch: its "
                                  "logprob passes under vLLM, the reference pass with beta > 0) instead of at TRL's "
                                  "reward call; the rewards are the same. False: today's path.",
                                  affects_results=False)
    reward_cap_s: float | None = setting(None, None, "Wall-clock cap of one harness run in the reward, model waits "
                                         "counted (budgets.timeout_s does not count them): a run past it scores as a "
                                         "timeout (0 on that problem, a harness failure, never an infrastructure "
                                         "failure). None: no cap (today's path).", lo=0.001, hi=86_400.0)
    multistep: bool = setting(False, None, "Multistep variant: contexts from revision sequences of the policy as it "
                              "is when the command starts (run an epoch per invocation with resume to refresh them).")
    multistep_max_rounds: int = setting(2, None, "Multistep: a context's harness is the best after k in [0, this] "
                                        "rounds.", lo=0, hi=100)
    multistep_candidates: int = setting(2, None, "Multistep: candidates per revision round when building "
                                        "sequences.", lo=1, hi=1_000)


class Colocate(Settings):
    """TRL's colocated vLLM engine for the rollouts."""

    use: bool = setting(False, None, "Generate rollouts with vLLM colocated in the training process (TRL's vllm_mode "
                        "'colocate'; GPU machines with the vllm extra); false: transformers generate.")
    gpu_memory_utilization: float = setting(0.15, None, "Share of GPU memory the colocated vLLM engine takes (a "
                                            "solver server on the same GPU takes its own share).", lo=0.01, hi=1.0)
    sleep: bool = setting(True, None, "Put the colocated vLLM engine to sleep (weights and cache freed) while "
                          "training.")
    max_model_length: int | None = setting(8192, None, "Longest prompt + completion of the colocated engine, tokens "
                                           "(None: the model's own limit; smaller leaves more memory).", lo=16)


class GRPOTrainConfig(Trained, Common):
    """`harnesslearn train grpo`: TRL GRPOTrainer with the execution reward."""

    trainer: TrainerSettings = setting(
        TrainerSettings(learning_rate=1e-6, gradient_checkpointing=True), None,
        "Optimiser and checkpoints (the paper: learning rate 1e-6; gradient checkpointing on: without it the "
        "1.5B's training pass ran out of memory on an H200 beside vLLM).")
    grpo: GRPOSettings = setting(GRPOSettings(), None, "The GRPO batch and its contexts.")
    proposer: ProposerSettings = setting(
        ProposerSettings(format="plain-search", sampling=Sampling(temperature=1.0, max_tokens=1024)), None,
        "The proposer format the policy is trained in, by name (adapt's --proposer-format but auto): plain-search "
        "(a base model continues a plain prompt ending in an open SEARCH marker) | plain-rewrite | chat-blocks | "
        "chat-prefill (chat, the rewrite of solve opened in the assistant turn, as at test time with an "
        "in-process engine) | chat-function | chat-file; its sampling is the rollouts' (max_tokens: the "
        "completion length limit).")
    vllm: Colocate = setting(Colocate(), None, "The colocated rollout engine.")
    rollouts: str | None = setting(None, None, "Rollout export JSONL (default: OUTPUT_DIR/rollouts.jsonl).")

    def model_post_init(self, _: object) -> None:
        super().model_post_init(_)
        if self.proposer.format == "auto":
            raise UserError("config key 'proposer.format' must name a format for GRPO (auto is decided at test time)")
        if self.trainer.grad_accum != 1:
            raise UserError("config key 'trainer.grad_accum' is not a GRPO setting: the accumulation is "
                            "grpo.contexts_per_update x grpo.num_generations / trainer.micro_batch")

    @property
    def format_name(self) -> FormatName:
        return self.proposer.format  # type: ignore[return-value]  # not auto: checked above


C = TypeVar("C", bound=Settings)
Kind = Literal["sft-data", "sft", "grpo"]


def load_config(cls: type[C], path: str | Path | None, overrides: Iterable[str] = ()) -> C:
    """A YAML file (None: the defaults) and ``KEY=VALUE`` overrides into ``cls``; any mistake is a UserError."""
    return load(cls, path, overrides)


def build_config(cls: type[C], raw: dict[str, Any], where: str = "config") -> C:
    """``cls`` from a mapping shaped like the tree (dotted keys allowed); a mistake is a UserError."""
    from harnesslearn.settings.base import from_tree, unflatten

    if not isinstance(raw, dict):
        raise UserError(f"{where}: expected a mapping of keys to values")
    return from_tree(cls, unflatten(raw), label="key '{}'", where=where)
