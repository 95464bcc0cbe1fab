"""Every knob of the transfer experiment, in one settings object built at the edge (the recipe's
command line) and passed down whole. ``TransferSettings.smoke`` gives the minute-scale CPU version
that CI runs (``experiments/qwen12.py smoke``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from harnesslearn.settings import check_settings, setting
from harnesslearn.tasks.families import family_set

STAGES = ("sftdata", "sft", "grpo", "eval")
ENGINES = ("vllm", "hf")
ARMS = ("zoo", "base", "sft", "rl", "base_mem", "sft_mem", "rl_mem")  # X_mem: X's proposer shown the harness memory


@dataclass
class TransferSettings:
    model: str = setting("", None, "transformers folder of the base model: the frozen solver and the proposer to train")
    work: str = setting("/tmp/q12w", None, "working folder; WORK/ret is what comes back through $OUT")
    engine: str = setting("vllm", None, "how the solver and the proposers are served: vllm (GPU) | hf (in process)")
    solver: str = setting("", None, "a solver spec instead of the model on the engine (CPU smoke: a python: solver)")
    stages: tuple[str, ...] = setting(STAGES, None, "the stages to run, in order: sftdata, sft, grpo, eval")
    force: bool = setting(False, None, "rerun stages already marked done")
    seed: int = setting(0, None, "seed of the training contexts")
    isolation: str = setting("auto", None, "sandbox isolation: auto | bwrap | landlock | none")
    concurrency: int = setting(192, None, "sandboxed harness runs in flight", lo=1)
    spare_slots: int = setting(48, None, "pre-started sandbox slots beyond those (a freed slot rebuilds while the "
                               "next run starts in a spare one)", lo=0)
    executor: str = setting("local", None, "where harness runs execute: local | shards:K (K trusted processes, "
                            "each calling the solver itself; needs --solver openai:...)")
    timeout: float = setting(60.0, None, "one solve() call, not counting model waits")
    max_tokens: int = setting(768, None, "proposer completion limit (eval, GRPO, self samples)", lo=1)
    solver_memory: float = setting(0.3, None, "vLLM's share of GPU memory while the policy trains beside it")
    cpu: bool = setting(False, None, "train on the CPU (no bf16)")
    targets: str = setting("q_proj,k_proj,v_proj,o_proj", None, "LoRA target modules")
    lora_r: int = setting(32, None, "LoRA rank (alpha is twice it)", lo=1)
    families_train: tuple[str, ...] = field(default_factory=lambda: tuple(family_set("paper-train")),
                                            metadata={"help": "training families (paper-train)"})
    # sftdata: zoo revisions and best-of-N self samples, kept on a strict score-split gain
    contexts_sft: int = setting(6, None, "contexts per training family", lo=1)
    n_feedback: int = setting(4, None, "feedback-split problems of a context", lo=1)
    n_score_sft: int = setting(8, None, "score-split problems a kept SFT row must gain on", lo=1)
    self_samples: int = setting(4, None, "best-of-N samples of the proposer itself per context (0: zoo only)", lo=0)
    minutes_sftdata: float = setting(4.0, None, "deadline of the sftdata stage, minutes")
    contexts_in_flight: int = setting(96, None, "sftdata contexts evaluated at once (H200: all 250 at once "
                                      "finished 7 in 9 minutes; 32 kept the engine at ~52 requests running, 0 "
                                      "waiting, GPU 10 %, host load 2 of 16: too little work in flight)", lo=1)
    # sft: LoRA on the kept rows
    lr_sft: float = setting(1e-4, None, "SFT learning rate")
    epochs_sft: float = setting(3.0, None, "SFT epochs")
    max_length_sft: int = setting(8192, None, "tokens of prompt + completion; longer rows are left out (codeio "
                                  "prompts reach ~4,000 tokens, their whole-file completions ~2,000)", lo=1)
    minutes_sft: float = setting(5.0, None, "deadline of the sft stage, minutes")
    # grpo: the exact reward, chat form with the rewrite prefill; resumable across stretches (grpo/state)
    minutes_grpo: float = setting(5.0, None, "deadline of the grpo stage, minutes")
    grpo_from_base: bool = setting(False, None, "start GRPO from the base model instead of the SFT adapter")
    lr_grpo: float = setting(1e-5, None, "GRPO learning rate (constant)")
    max_steps_grpo: int = setting(80, None, "GRPO updates of the whole run, across stretches", lo=1)
    contexts_epoch_grpo: int = setting(640, None, "GRPO contexts of one epoch (the paper: 640)", lo=1)
    contexts_per_update: int = setting(8, None, "GRPO contexts per update", lo=1)
    num_generations: int = setting(8, None, "GRPO candidates per context", lo=1)
    n_score_grpo: int = setting(4, None, "score-split problems of the GRPO reward", lo=1)
    micro_batch: int = setting(8, None, "sequences per forward pass in training (with gradient checkpointing "
                               "8 peaks at ~11 GiB on the H200)", lo=1)
    grpo_vllm: bool = setting(True, None, "generate GRPO rollouts with TRL's colocated vLLM (engine vllm only)")
    grpo_vllm_memory: float = setting(0.15, None, "the colocated rollout engine's share of GPU memory")
    # eval: one revision of the minimal seed per unseen family by each proposer arm, and the zoo
    minutes_eval: float = setting(8.0, None, "deadline of the eval stage, minutes")
    arms: tuple[str, ...] = setting(("zoo", "base", "sft", "rl", "base_mem", "rl_mem"), None,
                                    "proposer arms to evaluate: zoo, base, sft, rl, and X_mem (X shown the harness "
                                    "memory shipped with the package, built from paper-train families only)")
    memory_k: int = setting(2, None, "memory entries shown to the proposer of a memory arm", lo=1)
    families_eval: tuple[str, ...] = field(default_factory=lambda: tuple(family_set("paper-eval")),
                                           metadata={"help": "unseen families of the table (paper-eval)"})
    k: int = setting(4, None, "proposals per (arm, family)", lo=1)
    n_score_eval: int = setting(6, None, "score-split problems (selection) per family", lo=1)
    n_test_eval: int = setting(12, None, "test-split problems per family (reported)", lo=1)
    eval_seed: int = setting(1234, None, "problem seed of the eval stage")

    def __post_init__(self) -> None:
        from harnesslearn.errors import UserError

        check_settings(self, label="--{}")
        bad = [s for s in self.stages if s not in STAGES]
        if bad:
            raise UserError(f"unknown stage(s) {', '.join(bad)}; choose from {', '.join(STAGES)}")
        if self.engine not in ENGINES:
            raise UserError(f"engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        if any(a not in ARMS for a in self.arms):
            raise UserError(f"arms must be among {', '.join(ARMS)}")
        from harnesslearn.sandbox.executors import parse_executor

        if parse_executor(self.executor)[0] not in ("local", "shards"):
            raise UserError(f"executor must be local or shards:K, not {self.executor!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def smoke(cls, model: str, work: str, solver: str, family: str) -> TransferSettings:
        """All four stages on 2 CPU cores in a few minutes: a tiny model, one family, tiny splits."""
        return cls(model=model, work=work, engine="hf", solver=solver, cpu=True, concurrency=4, spare_slots=1,
                   timeout=20.0,
                   max_tokens=16, targets="q_proj,v_proj", lora_r=4, families_train=(family,), contexts_sft=1,
                   n_feedback=2, n_score_sft=2, self_samples=1, minutes_sftdata=2.0, epochs_sft=1.0, max_length_sft=32768, minutes_sft=2.0,
                   minutes_grpo=2.0, max_steps_grpo=1, contexts_epoch_grpo=1, contexts_per_update=1,
                   num_generations=2, n_score_grpo=2, micro_batch=2, minutes_eval=3.0, families_eval=(family,), k=1, n_score_eval=2, n_test_eval=2)

    def with_(self, **kw: Any) -> TransferSettings:
        return replace(self, **kw)
