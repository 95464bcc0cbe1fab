"""Training configs: every shipped YAML loads, carries its command, and bad keys are exit-2 errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harnesslearn.errors import UserError
from harnesslearn.settings.base import leaves
from harnesslearn.training.config import (
    GRPOTrainConfig,
    SFTDataConfig,
    SFTTrainConfig,
    build_config,
    load_config,
)
from harnesslearn.training.contexts import plan_contexts
from harnesslearn.training.grpo import updates_layout

ROOT = Path(__file__).resolve().parents[2]
KIND = {"sft_data": SFTDataConfig, "sft": SFTTrainConfig}
CONFIGS = sorted((ROOT / "configs").glob("*/*.yaml"))


def _cls(path: Path) -> type:
    return KIND.get(path.stem, GRPOTrainConfig)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_config_loads_and_names_its_command(path: Path) -> None:
    cfg = load_config(_cls(path), path)
    command = {"sft_data": "sft-data", "sft": "sft"}.get(path.stem, "grpo")
    rel = path.relative_to(ROOT).as_posix()
    assert f"harnesslearn train {command} --config {rel}" in path.read_text()
    if isinstance(cfg, GRPOTrainConfig):
        updates_layout(cfg)  # the batch arithmetic works out


def test_paper_grpo_is_the_paper_setting() -> None:
    cfg = load_config(GRPOTrainConfig, ROOT / "configs/paper/grpo.yaml")
    assert (cfg.grpo.num_generations, cfg.grpo.contexts_per_update, cfg.grpo.contexts_per_epoch) == (8, 40, 640)
    assert cfg.trainer.learning_rate == 1e-6
    assert updates_layout(cfg) == (8, 40)  # 320 completions an update in micro batches of 8
    assert load_config(SFTTrainConfig, ROOT / "configs/paper/sft.yaml").lora.r == 32


@pytest.mark.parametrize("cls", [SFTDataConfig, SFTTrainConfig, GRPOTrainConfig])
def test_every_field_has_help(cls: type) -> None:
    helps = {path: leaf.help for path, leaf in leaves(cls)}
    assert helps and all(h.strip() for h in helps.values()), [k for k, v in helps.items() if not v.strip()]
    assert len(helps) == len(list(leaves(cls)))
    assert all((f.description or "").strip() for f in cls.model_fields.values())  # the groups too


def test_unknown_key_suggests_the_near_one() -> None:
    with pytest.raises(UserError, match="unknown key 'num_generation'.*'grpo.num_generations'"):
        build_config(GRPOTrainConfig, {"num_generation": 8})
    with pytest.raises(UserError, match="unknown key 'prime'.*'proposer.format'"):  # the old pair's new name
        build_config(GRPOTrainConfig, {"prime": "rewrite"})


@pytest.mark.parametrize("raw", [{"trainer.learning_rate": "fast"}, {"families": "maze"}, {"grpo.num_generations": 0},
                                 {"proposer.style": "fancy"}, {"grpo.multistep": 1}])
def test_bad_values_are_user_errors(raw: dict) -> None:
    with pytest.raises(UserError):
        build_config(GRPOTrainConfig, raw)


def test_uneven_batches_are_user_errors() -> None:
    with pytest.raises(UserError, match="multiple of trainer.micro_batch"):
        updates_layout(build_config(GRPOTrainConfig, {"grpo.contexts_per_update": 3, "grpo.num_generations": 3,
                                                       "trainer.micro_batch": 2}))


def test_cli_unknown_key_is_exit_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("lora_rank: 8\n")
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "train", "sft", "--config", str(bad)],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and "unknown key 'lora_rank'" in p.stderr


def test_context_plan_cycles_families_and_seed_styles() -> None:
    plans = plan_contexts(["maze", "rg:codeio"], ["minimal", "style:terse"], 8, seed=3, multistep_max_rounds=2)
    assert [p.task_spec for p in plans[:2]] == ["rg:maze", "rg:codeio"]
    assert {p.seed_harness for p in plans} == {"minimal", "style:terse"}
    assert len({p.seed for p in plans}) == 8 and all(0 <= p.rounds <= 2 for p in plans)
    assert plans == plan_contexts(["maze", "rg:codeio"], ["minimal", "style:terse"], 8, seed=3,
                                  multistep_max_rounds=2)


def test_a_yaml_true_is_not_an_integer(tmp_path: Path) -> None:
    bad = tmp_path / "bool.yaml"
    bad.write_text("grpo: {num_generations: true}\n")
    with pytest.raises(UserError, match="grpo.num_generations"):
        load_config(GRPOTrainConfig, bad)


def test_a_yaml_alias_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "alias.yaml"
    bad.write_text("a: &x 1\nb: *x\n")
    with pytest.raises(UserError, match="alias"):
        load_config(GRPOTrainConfig, bad)


def test_cli_bad_set_value_is_exit_2_with_one_line() -> None:
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "train", "grpo", "--config", "configs/tiny/grpo.yaml",
                        "--set", "lora.r=oops"], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and "lora.r" in p.stderr


def test_a_partial_group_keeps_the_commands_defaults(tmp_path: Path) -> None:
    """A group given in part keeps the command's defaults for the rest (GRPO samples at 1.0 in plain-search,
    SFT runs 2.9 epochs), not the defaults of the group's own class."""
    grpo = tmp_path / "grpo.yaml"
    grpo.write_text("proposer: {sampling: {max_tokens: 64}}\ntrainer: {max_steps: 2}\n")
    cfg = load_config(GRPOTrainConfig, grpo)
    assert (cfg.proposer.format, cfg.proposer.sampling.temperature, cfg.proposer.sampling.max_tokens) == (
        "plain-search", 1.0, 64)
    assert (cfg.trainer.learning_rate, cfg.trainer.gradient_checkpointing, cfg.trainer.max_steps) == (1e-6, True, 2)
    sft = tmp_path / "sft.yaml"
    sft.write_text("trainer: {max_steps: 2}\n")
    assert load_config(SFTTrainConfig, sft).trainer.epochs == 2.9
    data = load_config(SFTDataConfig, None, ["proposer.n_traces=1"])
    assert (data.proposer.format, data.proposer.sampling.max_tokens, data.proposer.n_traces) == ("plain-search", 2048, 1)


def test_resume_compares_dotted_settings_and_reads_a_state_of_flat_keys(tmp_path: Path) -> None:
    """The GRPO state records the config's dotted keys; a state written before the tree (``lora_r``, ...) is
    compared through the legacy names, so a changed LoRA rank is still refused."""
    from harnesslearn.training.grpo_state import GRPOState

    cfg = load_config(GRPOTrainConfig, ROOT / "configs/tiny/grpo.yaml")
    now = cfg.record()
    state = GRPOState(tmp_path / "state")
    state.check({"settings": {k: now[k] for k in ("lora.r", "trainer.learning_rate", "families")}}, now)
    with pytest.raises(UserError, match="resume: lora.r was 8"):
        state.check({"settings": {"lora_r": 8, "learning_rate": 1e-5}}, now)
    with pytest.raises(UserError, match="resume: proposer.sampling.temperature was 0.5"):
        state.check({"settings": {"temperature": 0.5}}, cfg.record())
    state.check({"settings": {"lora_r": 32, "proposer_format": "plain-rewrite", "families": ["simple_geometry"]}},
                now)


@pytest.mark.parametrize("cls, raw, key", [
    (SFTDataConfig, {"budgets.timeout_s": 0}, "budgets.timeout_s"),
    (SFTDataConfig, {"budgets.max_calls": 0}, "budgets.max_calls"),
    (SFTDataConfig, {"budgets.max_tokens": 0}, "budgets.max_tokens"),
    (SFTDataConfig, {"proposer.sampling.temperature": 5.0}, "proposer.sampling.temperature"),
    (SFTDataConfig, {"min_gain": float("nan")}, "min_gain"),
    (SFTDataConfig, {"min_gain": float("inf")}, "min_gain"),
    (SFTTrainConfig, {"trainer.learning_rate": 0.0}, "trainer.learning_rate"),
    (SFTTrainConfig, {"lora.dropout": 1.0}, "lora.dropout"),
    (SFTTrainConfig, {"trainer.grad_accum": 0}, "trainer.grad_accum"),
    (SFTTrainConfig, {"max_length": 0}, "max_length"),
    (SFTTrainConfig, {"lora.target_modules": []}, "lora.target_modules"),
    (GRPOTrainConfig, {"grpo.num_generations": 1}, "grpo.num_generations"),
    (GRPOTrainConfig, {"trainer.grad_accum": 4}, "trainer.grad_accum"),
    (GRPOTrainConfig, {"families": []}, "families"),
])
def test_training_settings_have_bounds_named_by_their_key(cls: type, raw: dict, key: str) -> None:
    """A value that would end in a traceback from TRL, PEFT or torch, or make the run meaningless, is one
    line naming the config key (not a CLI option the train commands do not have)."""
    with pytest.raises(UserError) as e:
        build_config(cls, raw)
    assert key in str(e.value) and "--" not in str(e.value) and "\n" not in str(e.value)


def test_a_training_family_with_an_empty_split_is_refused(tmp_path: Path) -> None:
    import json

    from harnesslearn.tasks import load_task
    from harnesslearn.training.contexts import load_tasks

    f = tmp_path / "one.jsonl"
    f.write_text(json.dumps({"id": "only", "question": "What is 1 + 1?", "answer": "2"}) + "\n")
    empty = next(s for s in ("feedback", "score") if not load_task(f"jsonl:{f}").problems(s, 1, 0))
    with pytest.raises(UserError, match=f"the {empty} split of jsonl:.* holds no problems"):
        load_tasks([f"jsonl:{f}"])
