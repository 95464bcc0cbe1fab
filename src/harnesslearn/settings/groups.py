"""The settings groups the jobs share. Each job composes the groups it uses, with its own defaults
(``splits: Splits = setting(Splits(n_feedback=4), ...)``), so a value is declared, bounded and documented
once and passed down whole (a stage hands ``s.runtime`` or ``s.lora`` to the job it runs, never field by
field).
"""

from __future__ import annotations

from typing import Literal

from harnesslearn.errors import UserError
from harnesslearn.propose.formats import FormatChoice
from harnesslearn.propose.prompt import Style
from harnesslearn.sandbox.executor import Isolation
from harnesslearn.settings.base import Settings, setting

MAX_SEED = 2**31 - 1
MAX_PROBLEMS = 100_000  # problems of one split (or one `run`)
MAX_CONCURRENCY = 1_024
MAX_COMPLETION_TOKENS = 1_000_000
MAX_TEMPERATURE = 2.0


class TrainSplits(Settings):
    """The splits a training context is built from: feedback (shown to the proposer) and score (its J)."""

    n_feedback: int = setting(8, "--n-feedback", "Feedback-split problems (their traces are shown to the proposer).",
                              lo=1, hi=MAX_PROBLEMS)
    n_score: int = setting(16, "--n-score", "Score-split problems (J, the selection criterion or the reward).",
                           lo=1, hi=MAX_PROBLEMS)


class Splits(TrainSplits):
    """Feedback, score and test splits: disjoint problem sets of one task, drawn from one seed."""

    n_test: int = setting(32, "--n-test", "Test-split problems (reported only, never read by a selection).",
                          lo=1, hi=MAX_PROBLEMS)


class Sampling(Settings):
    """How a proposer (or teacher, or policy) samples."""

    temperature: float = setting(0.8, "--proposer-temperature", "Sampling temperature.", lo=0.0, hi=MAX_TEMPERATURE)
    max_tokens: int = setting(1024, "--proposer-max-tokens", "Completion length limit, tokens.", lo=1,
                              hi=MAX_COMPLETION_TOKENS)


class ProposerSettings(Settings):
    """How the proposer is asked for a revision and how its answer is read."""

    format: FormatChoice = setting(
        "auto", "--proposer-format",
        "How the proposer is asked for a revision and how its answer is read: auto (a chat proposer rewrites "
        "solve(), in an open assistant turn where the engine can continue one (chat-prefill) else asked in words "
        "(chat-function), or writes the whole file when shown harness memory (chat-file); a base model continues "
        "a plain prompt ending in an open SEARCH marker (plain-search)) | plain-search | plain-rewrite | "
        "chat-blocks | chat-prefill | chat-function | chat-file.")
    style: Style = setting("canonical", None, "Prompt style: canonical | varied (the format-varied variant).")
    n_traces: int = setting(4, None, "Per-problem traces shown in a proposer prompt.", lo=0, hi=1_000)
    sampling: Sampling = setting(Sampling(), None, "Sampling of the proposer's completions.")
    prompt_dir: str | None = setting(
        None, "--prompt-dir", "A folder of prompt templates (NAME.txt) that replace the packaged ones of the same name "
        "(src/harnesslearn/propose/prompts/): each must keep the $placeholders of the one it replaces; a RUNTIME_API.md "
        "in it replaces the runtime API document shown. packaged:heldout: the held-out-pattern prompts (no advice to "
        "run solver-written programs with model.python, no such program shown).")


class MemorySettings(Settings):
    """The harness memory: harnesses that beat their seed on earlier tasks, shown to the proposer."""

    enabled: bool = setting(
        True, "--memory/--no-memory", "Harness memory: show the proposer the harnesses that worked on the most "
        "similar other tasks (a chat proposer then writes whole files), and add this run's best harness when it "
        "beats its seed on the score split.")
    k: int = setting(2, "--memory-k", "Memory entries shown to the proposer.", lo=0, hi=20)
    path: str | None = setting(
        None, "--memory-path", "The memory file (default: $HARNESSLEARN_MEMORY, else memory.sqlite in the cache "
        "folder); another one on --resume is refused, like any setting that shapes the run.")


class RuntimeSettings(Settings):
    """Where and how harness runs execute: how fast, never what (no field affects results)."""

    executor: str = setting(
        "local", "--executor", "Where harness runs execute: local | ray | ray:auto | ray:HOST:PORT | ray://HOST:PORT "
        "(concurrency is then per node) | shards:K (K trusted processes on this machine, each calling the solver "
        "itself).", affects_results=False)
    isolation: Isolation = setting(
        "auto", "--isolation", "Sandbox isolation: auto (bwrap, else landlock) | bwrap | landlock | none (unsafe: "
        "the harness runs as this user, unconfined).", affects_results=False)
    concurrency: int | None = setting(None, "--concurrency", "Harness runs in flight at once (default: the "
                                      "executor's).", lo=1, hi=MAX_CONCURRENCY, affects_results=False)
    spare_slots: int = setting(0, None, "Pre-started sandbox slots beyond those (a freed slot rebuilds while the next "
                               "run starts in a spare one).", lo=0, hi=MAX_CONCURRENCY, affects_results=False)
    worker_python: str | None = setting(None, None, "Worker interpreter of sandboxed runs (default: the executor's "
                                        "search).", affects_results=False)

    def model_post_init(self, _: object) -> None:
        from harnesslearn.sandbox.executors import parse_executor

        parse_executor(self.executor)


class RunLimits(Settings):
    """Caps on what one run spends (None: no cap), checked before each round: at a cap the run stops
    cleanly with its best harness so far, says so, and ``--resume`` with a larger cap continues it (so a
    cap is not compared on resume)."""

    proposer_tokens: int | None = setting(None, "--max-proposer-tokens", "Cap on the proposer's tokens (prompt + "
                                          "completion) over the run.", lo=1, hi=10**12, affects_results=False)
    solver_tokens: int | None = setting(None, "--max-solver-tokens", "Cap on the solver's tokens over the run's "
                                        "evaluations.", lo=1, hi=10**12, affects_results=False)
    usd: float | None = setting(None, "--max-usd", "Cap on the run's cost in USD, priced by the genai-prices table "
                                "(hosted models it knows; a cap with an unpriced model is refused at start).",
                                lo=0.0, hi=1e9, affects_results=False)


class TrackingSettings(Settings):
    """Where an adaptation's per-round figures are also logged (how it is watched, never what it does)."""

    to: tuple[Literal["mlflow", "wandb"], ...] = setting(
        (), "--track", "Log per-round figures (score J, validity, tokens, spend) and the final J to mlflow and/or "
        "wandb (comma-separated; the tracking extra; MLFLOW_TRACKING_URI, WANDB_MODE configure them).",
        affects_results=False)
    project: str = setting("harnesslearn", None, "The MLflow experiment / W&B project.", affects_results=False)


class Lora(Settings):
    """The LoRA adapter a proposer is trained as (SFT and GRPO)."""

    r: int = setting(32, None, "LoRA rank.", lo=1, hi=4096)
    alpha: int = setting(64, None, "LoRA alpha (scale = alpha / r).", lo=1, hi=1_000_000)
    dropout: float = setting(0.05, None, "LoRA dropout.", lo=0.0, hi=0.99)
    target_modules: str | tuple[str, ...] = setting(
        "all-linear", None, "Modules that get adapters: 'all-linear' or a list of module names (q_proj, v_proj, ...).")

    def model_post_init(self, _: object) -> None:
        if not self.target_modules or (isinstance(self.target_modules, str) and not self.target_modules.strip()):
            raise UserError("lora.target_modules must name at least one module (or all-linear)")


Strategy = Literal["sequential", "independent", "compare"]
