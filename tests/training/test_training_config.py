"""Training configs: every shipped YAML loads, carries its command, and bad keys are exit-2 errors."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from harnesslearn.errors import UserError
from harnesslearn.training.config import (
    GRPOTrainConfig,
    SFTDataConfig,
    SFTTrainConfig,
    build_config,
    field_help,
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
    assert (cfg.num_generations, cfg.contexts_per_update, cfg.contexts_per_epoch) == (8, 40, 640)
    assert cfg.learning_rate == 1e-6
    assert updates_layout(cfg) == (8, 40)  # 320 completions an update in micro batches of 8
    assert load_config(SFTTrainConfig, ROOT / "configs/paper/sft.yaml").lora_r == 32


@pytest.mark.parametrize("cls", [SFTDataConfig, SFTTrainConfig, GRPOTrainConfig])
def test_every_field_has_help(cls: type) -> None:
    helps = field_help(cls)
    assert helps and all(h.strip() for h in helps.values()), [k for k, v in helps.items() if not v.strip()]
    assert len(helps) == len(dataclasses.fields(cls))


def test_unknown_key_suggests_the_near_one() -> None:
    with pytest.raises(UserError, match="unknown key 'num_generation'.*'num_generations'"):
        build_config(GRPOTrainConfig, {"num_generation": 8})
    with pytest.raises(UserError, match="unknown key 'prime'.*'proposer_format'"):  # the old pair's new name
        build_config(GRPOTrainConfig, {"prime": "rewrite"})


@pytest.mark.parametrize("raw", [{"learning_rate": "fast"}, {"families": "maze"}, {"num_generations": 0},
                                 {"style": "fancy"}, {"multistep": 1}])
def test_bad_values_are_user_errors(raw: dict) -> None:
    with pytest.raises(UserError):
        build_config(GRPOTrainConfig, raw)


def test_uneven_batches_are_user_errors() -> None:
    with pytest.raises(UserError, match="multiple of micro_batch"):
        updates_layout(build_config(GRPOTrainConfig, {"contexts_per_update": 3, "num_generations": 3,
                                                       "micro_batch": 2}))


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
