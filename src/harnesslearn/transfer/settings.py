"""Every knob of the transfer experiment, in one settings tree composed of the library's groups (the
runtime, budgets, LoRA, proposer, splits, the trainer and GRPO settings), built at the edge (the recipe's
command line: ``experiments/qwen12.py run --sftdata.contexts 50 --grpo.trainer.learning-rate 1e-5``, or
``--set KEY=VALUE``, or ``--config FILE``) and passed down whole: a stage hands ``s.runtime``, ``s.lora``,
``s.budgets``, ``s.sft.trainer`` to the job it runs, never field by field. ``TransferSettings.smoke``
gives the minute-scale CPU version that CI runs (``experiments/qwen12.py smoke``)."""

from __future__ import annotations

from typing import Literal

from harnesslearn.errors import UserError
from harnesslearn.sandbox.records import Budgets
from harnesslearn.settings.base import Settings, setting
from harnesslearn.settings.groups import (
    Lora,
    ProposerSettings,
    RuntimeSettings,
    Sampling,
    Splits,
    TrainSplits,
)
from harnesslearn.tasks.families import family_set
from harnesslearn.training.config import Colocate, GRPOSettings, TrainerSettings

Stage = Literal["sftdata", "sft", "grpo", "eval", "musique"]
# X_mem: X's proposer shown the memory; rules: every known source (zoo files, the prompts' programs) and the parent
# evaluated on the score and test splits, for the fixed-rule rows ("submit S; keep it if it beats the parent")
Arm = Literal["zoo", "base", "sft", "rl", "base_mem", "sft_mem", "rl_mem", "rules"]
STAGES: tuple[Stage, ...] = ("sftdata", "sft", "grpo", "eval", "musique")
ProposerArm = Literal["base", "sft", "rl"]
ARMS: tuple[Arm, ...] = ("zoo", "base", "sft", "rl", "base_mem", "sft_mem", "rl_mem", "rules")


SFTSource = Literal["zoo", "self"]
ParentKind = Literal["seed", "zoo", "winners"]


class SFTDataStage(Settings):
    """sftdata: the zoo-teacher arm (zoo revisions of the seed and best-of-N self samples) or expert iteration
    (the proposer's own revisions of parents drawn from a pool, no zoo-file rows), kept by the one keep rule
    (``training.keep``) on a score-split gain above a margin."""

    minutes: float = setting(4.0, None, "Deadline of the stage, minutes.", lo=0.0)
    contexts: int = setting(6, None, "Contexts per training family.", lo=1, hi=100_000)
    splits: TrainSplits = setting(TrainSplits(n_feedback=4, n_score=8), None, "A context's splits (a kept row must "
                                  "gain on its score split).")
    self_samples: int = setting(4, None, "Best-of-N samples of the proposer itself per context (0: zoo only).",
                                lo=0, hi=1_000)
    source: SFTSource = setting("zoo", None, "Where the rows come from: zoo (the zoo-teacher arm, labelled so: each "
                                "zoo file written as a revision of the minimal seed, plus self_samples best-of-N "
                                "samples of the proposer on the seed) | self (expert iteration, no teacher: "
                                "self_samples proposals per context of a parent drawn from sftdata.parents; a copy of "
                                "any known source is dropped; no zoo-file rows).")
    margin: float = setting(0.0, None, "A row is kept only if its score-split J beats its parent's by more than "
                            "this (0: strictly better).", lo=0.0, hi=1.0)
    parents: tuple[ParentKind, ...] = setting(("seed", "zoo", "winners"), None, "The pool a self context's parent is "
                                              "drawn from (uniformly, with the context's seed): seed (the minimal "
                                              "seed), zoo (the reasoning zoo harnesses built for the task), winners "
                                              "(the family's harnesses kept so far, ret/sftdata_pool.jsonl). The zoo "
                                              "arm revises the seed.")
    hold_out_loop: bool = setting(False, None, "The held-out-pattern control: drop every row, zoo candidate and "
                                  "parent that runs solver-written code with model.python "
                                  "(taxonomy.runs_solver_code: the zoo's interpreter loop and its kin).")
    in_flight: int = setting(96, None, "Contexts evaluated at once (H200: all 250 at once finished 7 in 9 minutes; "
                             "32 kept the engine at ~52 requests running, 0 waiting, GPU 10 %, host load 2 of 16: "
                             "too little work in flight).", lo=1, hi=100_000)

    def model_post_init(self, _: object) -> None:
        if not self.parents:
            raise UserError("sftdata.parents must name at least one of seed, zoo, winners")


class SFTStage(Settings):
    """sft: LoRA on the kept rows."""

    minutes: float = setting(5.0, None, "Deadline of the stage, minutes.", lo=0.0)
    trainer: TrainerSettings = setting(
        TrainerSettings(learning_rate=1e-4, epochs=3.0, micro_batch=2, grad_accum=4, save_steps=10**6,
                        report_to="none"), None, "The optimiser (bf16 and use_cpu follow the top-level cpu).")
    max_length: int = setting(8192, None, "Tokens of prompt + completion; longer rows are left out (codeio prompts "
                              "reach ~4,000 tokens, their whole-file completions ~2,000).", lo=16, hi=1_048_576)
    max_same_completion: int | None = setting(None, None, "At most this many rows with one same completion (None: "
                                              "all; the stretch-4 SFT had 187 rows, 34 distinct completions).", lo=1)
    hold_out_loop: bool = setting(False, None, "The held-out-pattern control: train without the rows whose harness runs "
                                  "solver-written code with model.python (zoo_sft.loop_row; rows of an earlier "
                                  "sftdata run included).")


class GRPOStage(Settings):
    """grpo: the exact reward, a chat proposer format; resumable across stretches (ret/grpo/state)."""

    minutes: float = setting(5.0, None, "Deadline of the stage, minutes.", lo=0.0)
    from_base: bool = setting(False, None, "Start GRPO from the base model instead of the SFT adapter.")
    trainer: TrainerSettings = setting(
        TrainerSettings(learning_rate=1e-5, max_steps=80, micro_batch=8, gradient_checkpointing=True,
                        save_steps=10**6, report_to="none"), None,
        "The optimiser (constant learning rate; max_steps: updates of the whole run, across stretches; with "
        "gradient checkpointing a micro batch of 8 peaks at ~11 GiB on the H200).")
    grpo: GRPOSettings = setting(GRPOSettings(num_generations=8, contexts_per_update=8, contexts_per_epoch=640),
                                 None, "The GRPO batch (the paper: 640 contexts an epoch).")
    splits: TrainSplits = setting(TrainSplits(n_feedback=4, n_score=4), None, "A context's splits (the reward's "
                                  "score split).")
    temperature: float = setting(1.0, None, "Rollout sampling temperature.", lo=0.0, hi=2.0)
    vllm: Colocate = setting(Colocate(use=True, gpu_memory_utilization=0.15), None,
                             "TRL's colocated vLLM for the rollouts (engine vllm only, never on the CPU).")


class EvalStage(Settings):
    """eval: per unseen family and proposer arm, ``rounds`` rounds of K proposals from the parent (the minimal
    seed, or the family's best zoo harness by score split), and the zoo and the fixed rules beside them."""

    minutes: float = setting(8.0, None, "Deadline of the stage, minutes.", lo=0.0)
    arms: tuple[Arm, ...] = setting(("zoo", "base", "sft", "rl", "base_mem", "rl_mem"), None,
                                    "Proposer arms: zoo, base, sft, rl, and X_mem (X shown the harness memory "
                                    "shipped with the package, built from paper-train families only).")
    families: tuple[str, ...] = setting(tuple(family_set("paper-eval")), None, "Unseen families of the table "
                                        "(paper-eval).")
    k: int = setting(4, None, "Proposals per (arm, family).", lo=1, hi=1_000)
    seed: int = setting(1234, None, "Problem seed of the stage.", lo=0, hi=2**31 - 1)
    splits: Splits = setting(Splits(n_feedback=4, n_score=6, n_test=12), None, "Splits per family (selection on "
                             "score, reported on test).")
    memory_k: int = setting(2, None, "Memory entries shown to the proposer of a memory arm.", lo=1, hi=20)
    parent: Literal["seed", "zoo"] = setting("seed", None, "The harness each arm revises: seed (the minimal seed) "
                                             "or zoo (the family's best zoo harness by score-split J).")
    rounds: int = setting(1, None, "Rounds of K proposals: 1 is one revision (the best of K independent "
                          "proposals); more are sequential rounds, each revising the current best.", lo=1, hi=100)


class MusiqueStage(Settings):
    """musique: per proposer arm (and per task: MuSiQue, then each of ``rg_families``), from the seed harness,
    ``rounds`` sequential rounds of one proposal each against the best of ``rounds`` independent proposals
    (picked on the score split: the same proposer calls) and the oracle best of ``oracle_n`` independent
    proposals (picked on the TEST split: an upper bound, not a method); MuSiQue EM and F1 on the test split,
    selection on ``metric``."""

    minutes: float = setting(10.0, None, "Deadline of the stage, minutes.", lo=0.0)
    data: str = setting("", None, "Folder holding musique_dev_with_paragraphs.jsonl, musique_dev200_corpus.jsonl and "
                        "musique_train_with_paragraphs.jsonl (empty: $HARNESSLEARN_QA_DATA, else the first "
                        "shared/data/qa above the current folder).")
    arms: tuple[ProposerArm, ...] = setting(("base", "sft", "rl"), None, "Proposer arms (an arm whose adapter is "
                                            "missing is left out).")
    rounds: int = setting(10, None, "Sequential rounds (one proposal each) = the independent proposals of the "
                          "best-of-rounds pick (the paper: 10).", lo=1, hi=1_000)
    oracle_n: int = setting(80, None, "Independent proposals of the oracle best-of-N, picked on the TEST split (an "
                            "upper bound; the paper: 80); its first `rounds` give the best-of-rounds pick. At least "
                            "rounds.", lo=1, hi=1_000)
    seed: int = setting(1234, None, "Problem seed of the stage.", lo=0, hi=2**31 - 1)
    seed_harness: str = setting("zoo:iterative_search", None, "The MuSiQue seed harness, as adapt --seed-harness "
                                "takes it (zoo:NAME, style:NAME, a shipped seed or a .py file); the paper starts "
                                "from a multi-hop retrieval pipeline.")
    metric: Literal["f1", "em"] = setting("f1", None, "MuSiQue's score J, on which every pick is made (both are "
                                          "reported).")
    splits: Splits = setting(Splits(n_feedback=8, n_score=128, n_test=200), None,
                             "MuSiQue splits: feedback and score from musique_train_with_paragraphs.jsonl (150 "
                             "questions, 16 feedback and 134 score by id hash; its own union corpus), test: the 200 "
                             "dev questions of musique_dev_with_paragraphs.jsonl (the dev200 corpus).")
    rg_families: tuple[str, ...] = setting((), None, "Reasoning Gym families run the same way from the minimal seed "
                                           "(J: the family's own score), a row per (arm, family) beside MuSiQue's.")
    rg_splits: Splits = setting(Splits(n_feedback=8, n_score=64, n_test=200), None, "Splits of each rg_families "
                                "task.")

    def model_post_init(self, _: object) -> None:
        if self.oracle_n < self.rounds:
            raise UserError(f"musique.oracle_n ({self.oracle_n}) must be at least musique.rounds ({self.rounds}): the "
                            "best-of-rounds pick is made from the oracle run's first proposals")


class TransferSettings(Settings):
    """The transfer experiment: train a proposer on paper-train families, evaluate it on unseen ones."""

    model: str = setting("", None, "transformers folder of the base model: the frozen solver and the proposer to "
                         "train.")
    work: str = setting("/tmp/q12w", None, "Working folder; WORK/ret is what comes back through $OUT.")
    engine: Literal["vllm", "hf"] = setting("vllm", None, "How the solver and the proposers are served: vllm (GPU) | "
                                            "hf (in process).")
    solver: str = setting("", None, "A solver spec instead of the model on the engine (CPU smoke: a python: solver).")
    stages: tuple[Stage, ...] = setting(STAGES, None, "The stages to run, in order: sftdata, sft, grpo, eval, musique.")
    force: bool = setting(False, None, "Rerun stages already marked done.")
    seed: int = setting(0, None, "Seed of the training contexts.", lo=0, hi=2**31 - 1)
    cpu: bool = setting(False, None, "Train on the CPU (no bf16).")
    solver_memory: float = setting(0.3, None, "vLLM's share of GPU memory while the policy trains beside it.",
                                   lo=0.01, hi=1.0)
    families: tuple[str, ...] = setting(tuple(family_set("paper-train")), None, "Training families (paper-train).")
    runtime: RuntimeSettings = setting(RuntimeSettings(concurrency=192, spare_slots=48), None,
                                       "The sandbox: runs in flight, spare slots, isolation; executor local or "
                                       "shards:K (K trusted processes, each calling the solver itself; needs solver "
                                       "openai:...).")
    budgets: Budgets = setting(Budgets(timeout_s=60.0, max_calls=16, max_tokens=8192), None,
                               "Per-problem limits of a harness run (timeout_s: one solve() call, not counting model "
                               "waits).")
    lora: Lora = setting(Lora(r=32, alpha=64, target_modules=("q_proj", "k_proj", "v_proj", "o_proj")), None,
                         "The LoRA adapter SFT and GRPO train.")
    proposer: ProposerSettings = setting(
        ProposerSettings(n_traces=3, sampling=Sampling(temperature=0.8, max_tokens=768)), None,
        "The proposer's prompt and sampling (eval, self samples; GRPO's rollouts take its max_tokens). Its format "
        "auto is chat-prefill for training rows and rollouts.")
    sftdata: SFTDataStage = setting(SFTDataStage(), None, "The sftdata stage.")
    sft: SFTStage = setting(SFTStage(), None, "The sft stage.")
    grpo: GRPOStage = setting(GRPOStage(), None, "The grpo stage.")
    eval: EvalStage = setting(EvalStage(), None, "The eval stage.")
    musique: MusiqueStage = setting(MusiqueStage(), None, "The musique stage.")

    def model_post_init(self, _: object) -> None:
        from harnesslearn.sandbox.executors import parse_executor

        if parse_executor(self.runtime.executor)[0] not in ("local", "shards"):
            raise UserError(f"runtime.executor must be local or shards:K, not {self.runtime.executor!r}")

    @property
    def training_format(self) -> str:
        """The proposer format of the SFT rows and the GRPO rollouts (auto: chat-prefill, the rewrite of
        solve opened in the assistant turn, as the in-process engine continues it at test time)."""
        return "chat-prefill" if self.proposer.format == "auto" else self.proposer.format

    @classmethod
    def smoke(cls, model: str, work: str, solver: str, family: str) -> TransferSettings:
        """Every stage on 2 CPU cores in a few minutes: a tiny model, one family, tiny splits (MuSiQue: the shared
        QA data, 2 rounds against an oracle of 3 proposals, 4 test questions)."""
        return cls(
            model=model, work=work, engine="hf", solver=solver, cpu=True, families=(family,),
            runtime=RuntimeSettings(concurrency=4, spare_slots=1), budgets=Budgets(timeout_s=20.0),
            lora=Lora(r=4, alpha=8, target_modules=("q_proj", "v_proj")),
            proposer=ProposerSettings(n_traces=3, sampling=Sampling(temperature=0.8, max_tokens=16)),
            sftdata=SFTDataStage(minutes=2.0, contexts=1, splits=TrainSplits(n_feedback=2, n_score=2), self_samples=1),
            sft=SFTStage(minutes=2.0, max_length=32768, trainer=SFTStage().trainer.with_(epochs=1.0)),
            grpo=GRPOStage(minutes=2.0, splits=TrainSplits(n_feedback=2, n_score=2),
                           trainer=GRPOStage().trainer.with_(max_steps=1, micro_batch=2),
                           grpo=GRPOSettings(num_generations=2, contexts_per_update=1, contexts_per_epoch=1)),
            eval=EvalStage(minutes=3.0, families=(family,), k=1, splits=Splits(n_feedback=2, n_score=2, n_test=2),
                           arms=(*EvalStage().arms, "rules")),
            musique=MusiqueStage(minutes=3.0, arms=("base", "rl"), rounds=2, oracle_n=3,
                                 splits=Splits(n_feedback=2, n_score=2, n_test=4)))
