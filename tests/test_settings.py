"""The settings engine: one composed tree per job, strict validation, one loader (YAML + dotted overrides)
that the CLI options are generated from, records read back and compared on resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harnesslearn.errors import UserError
from harnesslearn.settings.adapt import AdaptSettings
from harnesslearn.settings.base import leaves
from harnesslearn.settings.load import load, parse_value, read_yaml

ROOT = Path(__file__).resolve().parents[1]


def test_a_partial_group_keeps_the_trees_defaults_not_its_classes() -> None:
    """GRPO's trainer group defaults to a learning rate of 1e-6 (TrainerSettings' own is 1e-4): a config
    that sets only another trainer key keeps 1e-6."""
    from harnesslearn.training.config import GRPOTrainConfig, build_config

    cfg = build_config(GRPOTrainConfig, {"trainer": {"micro_batch": 4}})
    assert (cfg.trainer.learning_rate, cfg.trainer.gradient_checkpointing, cfg.trainer.micro_batch) == (1e-6, True, 4)
    s = load(AdaptSettings, overrides=["splits.n_score=5"])
    assert (s.splits.n_feedback, s.splits.n_score, s.splits.n_test) == (8, 5, 32)


@pytest.mark.parametrize("override, message", [
    ("rounds=true", "--rounds must be an integer (got 'true')"),  # a YAML/flag true is not an integer
    ("rounds=0", "--rounds must be between 1 and 1000 (got 0)"),
    ("budgets.timeout_s=0", "--timeout must be between 0.001 and 86400"),
    ("proposer.format=fancy", "--proposer-format must be one of auto, plain-search"),
    ("splits.n_scor=3", "unknown key 'splits.n_scor' (did you mean 'splits.n_score'?)"),
    ("rounds", "--set takes KEY=VALUE"),
    ("runtime.executor=spark", "unknown executor 'spark'"),
])
def test_bad_values_are_one_line_naming_the_option(override: str, message: str) -> None:
    with pytest.raises(UserError) as e:
        load(AdaptSettings, overrides=[override])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_strict_types_in_a_yaml_file(tmp_path: Path) -> None:
    cfg = tmp_path / "a.yaml"
    cfg.write_text("rounds: true\n")
    with pytest.raises(UserError, match="must be an integer"):
        load(AdaptSettings, cfg)
    cfg.write_text("splits: {n_score: '8'}\n")
    with pytest.raises(UserError, match="must be an integer"):
        load(AdaptSettings, cfg)
    cfg.write_text("splits.n_score: 8\nproposer:\n  sampling: {temperature: 1e-1}\n")  # dotted keys; 1e-1 a number
    s = load(AdaptSettings, cfg, ["rounds=2"])
    assert (s.splits.n_score, s.proposer.sampling.temperature, s.rounds) == (8, 0.1, 2)


def test_a_base_60_looking_value_is_text_not_a_number(tmp_path: Path) -> None:
    """YAML 1.1 reads ``1:30`` as 90 (and ``1:30.5`` as 90.5): a seed written so took 90 silently."""
    cfg = tmp_path / "a.yaml"
    cfg.write_text("seed: 1:30\n")
    assert read_yaml(cfg) == {"seed": "1:30"}
    with pytest.raises(UserError, match=r"must be an integer \(got '1:30'\)"):
        load(AdaptSettings, cfg)
    cfg.write_text("proposer:\n  sampling: {temperature: 1:30.5}\nseed: 130\n")
    assert read_yaml(cfg)["proposer"]["sampling"]["temperature"] == "1:30.5" and read_yaml(cfg)["seed"] == 130


def test_a_bad_value_is_echoed_cut_not_whole() -> None:
    with pytest.raises(UserError) as e:
        load(AdaptSettings, overrides=["proposer.format=" + "x" * 900_000])
    msg = str(e.value)
    assert len(msg) < 400 and "900,002 characters" in msg and "\n" not in msg


@pytest.mark.parametrize("text, message", [
    (b"a: &x [1]\nb: *x\n", "aliases"),
    (b"\xff\xfe\x00", "not UTF-8"),
    (b"[" * 5000, "nested too deeply"),
    (b"- 1\n- 2\n", "expected a mapping"),
    (b"a: [\n", "not valid YAML"),
])
def test_hostile_yaml_is_refused_in_one_line(tmp_path: Path, text: bytes, message: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(text)
    with pytest.raises(UserError, match=message):
        read_yaml(cfg)


def test_override_text_is_typed_by_the_field() -> None:
    assert parse_value("1e-5", float) == 1e-5
    assert parse_value("none", int | None) is None
    assert parse_value("a,b", tuple[str, ...]) == ["a", "b"]
    assert parse_value("all-linear", str | tuple[str, ...]) == "all-linear"
    assert parse_value("q_proj,v_proj", str | tuple[str, ...]) == ["q_proj", "v_proj"]
    assert parse_value("true", bool | str) is True and parse_value("ckpt-3", bool | str) == "ckpt-3"


def test_leaf_keys_are_unique_and_every_leaf_has_help() -> None:
    from harnesslearn.training.config import GRPOTrainConfig, SFTDataConfig, SFTTrainConfig
    from harnesslearn.transfer.settings import TransferSettings

    for cls in (AdaptSettings, SFTDataConfig, SFTTrainConfig, GRPOTrainConfig, TransferSettings):
        found = list(leaves(cls))
        assert len({p for p, _ in found}) == len(found)
        assert all(leaf.help.strip() for _, leaf in found), cls
    options = [leaf.option for _, leaf in leaves(AdaptSettings) if leaf.option]
    assert len(options) == len(set(options))


def test_record_round_trips_and_resume_compares_leaves() -> None:
    s = load(AdaptSettings, overrides=["splits.n_score=5", "memory.enabled=false", "runtime.concurrency=3"])
    rec = s.record()
    assert rec["splits.n_score"] == 5 and rec["memory.enabled"] is False
    assert AdaptSettings.from_record(rec) == s and s.changes(rec) == []
    assert s.with_(**{"runtime.concurrency": 9}).changes(rec) == []  # how fast, not what
    assert s.with_(candidates=2).changes(rec) == ["--candidates (recorded 4, now 2)"]


def test_the_cli_takes_config_set_and_generated_options(tmp_path: Path) -> None:
    """`adapt --help` lists the generated options; a bad --set, or a bad generated option, is exit 2 with one
    line before anything runs."""
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "harnesslearn.cli", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)

    h = cli("adapt", "--help")
    assert h.returncode == 0 and all(o in h.stdout for o in ("--n-score", "--isolation", "--config", "--set"))
    base = ("adapt", "--task", "rg:gcd", "--solver", "python:x:y", "--proposer", "python:x:y")
    for extra, message in ((("--set", "splits.n_score=zero"),
                            "--n-score must be an integer (got 'zero')"),
                           (("--rounds", "0"), "--rounds must be between 1 and 1000"),
                           (("--config", str(tmp_path / "none.yaml")), "config not found")):
        p = cli(*base, *extra)
        assert p.returncode == 2 and p.stdout == "", p.stderr
        assert p.stderr.count("\n") == 1 and message in p.stderr, p.stderr
    assert not (tmp_path / "runs").exists()  # nothing was written
