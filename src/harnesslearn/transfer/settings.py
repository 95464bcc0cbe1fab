"""Every knob of the transfer experiment, in one settings object built at the edge (the recipe's
command line) and passed down whole. ``TransferSettings.smoke`` gives the minute-scale CPU version
that CI runs (``experiments/qwen12.py smoke``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from harnesslearn.tasks.families import family_set

STAGES = ("sftdata", "sft", "grpo", "eval")
ENGINES = ("vllm", "hf")
ARMS = ("zoo", "base", "sft", "rl")


@dataclass
class TransferSettings:
    model: str  # transformers folder of the base model: the frozen solver and the proposer to train
    work: str = "/tmp/q12w"  # working folder; WORK/ret is what comes back through $OUT
    engine: str = "vllm"  # how the solver and the proposers are served: vllm (GPU) | hf (in process)
    solver: str = ""  # a solver spec instead of the model on the engine (CPU smoke: a python: solver)
    stages: tuple[str, ...] = STAGES
    force: bool = False  # rerun stages already marked done
    seed: int = 0
    isolation: str = "auto"
    concurrency: int = 192  # sandboxed harness runs in flight
    timeout: float = 60.0  # one solve() call, not counting model waits
    max_tokens: int = 768  # proposer completion limit (eval, GRPO, self samples)
    solver_memory: float = 0.3  # vLLM's share of GPU memory while the policy trains beside it
    cpu: bool = False  # train on the CPU (no bf16)
    targets: str = "q_proj,k_proj,v_proj,o_proj"  # LoRA target modules
    lora_r: int = 32
    families_train: tuple[str, ...] = field(default_factory=lambda: tuple(family_set("paper-train")))
    # sftdata: zoo revisions and best-of-N self samples, kept on a strict score-split gain
    contexts_sft: int = 6  # contexts per training family
    n_feedback: int = 4
    n_score_sft: int = 8
    self_samples: int = 4
    minutes_sftdata: float = 4.0
    # sft: LoRA on the kept rows
    lr_sft: float = 1e-4
    epochs_sft: float = 3.0
    max_length_sft: int = 4096  # tokens of prompt + completion (longer rows are truncated)
    minutes_sft: float = 5.0
    # grpo: the exact reward, chat form with the rewrite prefill
    minutes_grpo: float = 5.0
    grpo_from_base: bool = False
    lr_grpo: float = 2e-5
    max_steps_grpo: int = 12
    contexts_per_update: int = 4
    num_generations: int = 8
    n_score_grpo: int = 4
    micro_batch: int = 8
    # eval: one revision of the minimal seed per unseen family by each proposer arm, and the zoo
    minutes_eval: float = 8.0
    arms: tuple[str, ...] = ARMS
    families_eval: tuple[str, ...] = field(default_factory=lambda: tuple(family_set("paper-eval")))
    k: int = 4  # proposals per (arm, family)
    n_score_eval: int = 6
    n_test_eval: int = 12
    eval_seed: int = 1234

    def __post_init__(self) -> None:
        from harnesslearn.errors import UserError

        bad = [s for s in self.stages if s not in STAGES]
        if bad:
            raise UserError(f"unknown stage(s) {', '.join(bad)}; choose from {', '.join(STAGES)}")
        if self.engine not in ENGINES:
            raise UserError(f"engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        if any(a not in ARMS for a in self.arms):
            raise UserError(f"arms must be among {', '.join(ARMS)}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def smoke(cls, model: str, work: str, solver: str, family: str) -> TransferSettings:
        """All four stages on 2 CPU cores in a few minutes: a tiny model, one family, tiny splits."""
        return cls(model=model, work=work, engine="hf", solver=solver, cpu=True, concurrency=4, timeout=20.0,
                   max_tokens=16, targets="q_proj,v_proj", lora_r=4, families_train=(family,), contexts_sft=1,
                   n_feedback=2, n_score_sft=2, self_samples=1, minutes_sftdata=2.0, epochs_sft=1.0, max_length_sft=32768, minutes_sft=2.0,
                   minutes_grpo=2.0, max_steps_grpo=1, contexts_per_update=1, num_generations=2, n_score_grpo=2,
                   micro_batch=2, minutes_eval=3.0, families_eval=(family,), k=1, n_score_eval=2, n_test_eval=2)

    def with_(self, **kw: Any) -> TransferSettings:
        return replace(self, **kw)
