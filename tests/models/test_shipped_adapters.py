"""The LoRA adapters shipped with the package (``harnesslearn.adapters``): ``adapter=NAME`` finds the package's
folder, a name trained on another model or a name that is neither shipped nor a folder is one line, and the shipped
files are what the README says (a PEFT LoRA of rank 32 on q/k/v/o, bf16, at most 20 MB)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from harnesslearn import adapters
from harnesslearn.errors import UserError
from harnesslearn.models.hf import adapter_sha


def test_every_shipped_adapter_is_a_peft_lora_folder_within_20_mb_in_bf16() -> None:
    for name, (model, folder) in adapters.SHIPPED.items():
        d = Path(adapters.resolve(model, name))
        assert d == adapters.HERE / folder and (d / "README.md").is_file()
        cfg = json.loads((d / "adapter_config.json").read_text())
        assert cfg["peft_type"] == "LORA" and cfg["r"] == 32
        assert sorted(cfg["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]
        weights = d / "adapter_model.safetensors"
        assert weights.stat().st_size <= 20 * 2**20
        with weights.open("rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16"}
        assert len(adapter_sha(str(d))) == 16  # the cache's name for its content


def test_a_folder_passes_through_and_a_bad_name_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert adapters.resolve("qwen2.5-coder-1.5b-instruct", str(tmp_path)) == str(tmp_path)
    with pytest.raises(UserError, match=r"'rl' was trained on local:qwen2.5-coder-1.5b-instruct, not "
                                        r"local:qwen2.5-coder-0.5b-instruct"):
        adapters.resolve("qwen2.5-coder-0.5b-instruct", "rl")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"adapter 'rll': no such folder, and not a shipped adapter \(rl\)"):
        adapters.resolve("qwen2.5-coder-1.5b-instruct", "rll")
    (tmp_path / "mine").mkdir()  # a folder in the working directory, named without a slash
    assert adapters.resolve("qwen2.5-coder-1.5b-instruct", "mine") == "mine"


def test_the_cli_names_a_wrong_shipped_adapter_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "run", "minimal", "--task", "rg:gcd", "--n", "1",
                        "--solver", "local:qwen2.5-coder-0.5b-instruct?adapter=rl"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "'rl' was trained on local:qwen2.5-coder-1.5b-instruct, not local:qwen2.5-coder-0.5b-instruct" in p.stderr


def test_stand_in_and_fill_in_keep_a_shipped_adapters_weights_once(tmp_path: Path) -> None:
    """The committed GRPO state's final adapter is the shipped ``rl``: ``stand_in`` (in ``land``) leaves a pointer
    there instead of a second copy, ``fill_in`` (in ``restore``) writes the same bytes back; other weights stay; a
    pointer this package cannot fill is one line."""
    import shutil

    rl = Path(adapters.resolve("qwen2.5-coder-1.5b-instruct", "rl"))
    mine, other = tmp_path / "grpo" / "state" / "adapter", tmp_path / "sft_adapter"
    shutil.copytree(rl, mine)
    other.mkdir()
    (other / adapters.WEIGHTS).write_bytes(b"not shipped")
    assert adapters.stand_in(tmp_path) == [mine / adapters.WEIGHTS]
    assert not (mine / adapters.WEIGHTS).exists() and (other / adapters.WEIGHTS).read_bytes() == b"not shipped"
    assert json.loads((mine / adapters.POINTER).read_text())["adapter"] == "rl"
    assert adapters.fill_in(tmp_path) == [mine / adapters.WEIGHTS]
    assert (mine / adapters.WEIGHTS).read_bytes() == (rl / adapters.WEIGHTS).read_bytes()
    assert not (mine / adapters.POINTER).exists() and adapter_sha(str(mine)) == adapter_sha(str(rl))
    (mine / adapters.POINTER).write_text(json.dumps({"adapter": "rl", "sha256": "0" * 64}))
    with pytest.raises(UserError, match="adapter 'rl' is not the one recorded"):
        adapters.fill_in(tmp_path)
    (mine / adapters.POINTER).write_text(json.dumps({"adapter": "rl2", "sha256": "0" * 64}))
    with pytest.raises(UserError, match="names the shipped adapter 'rl2', which this harnesslearn does not ship"):
        adapters.fill_in(tmp_path)


def test_the_committed_grpo_state_restores_with_the_shipped_adapters_weights(tmp_path: Path) -> None:
    """``qwen12.py restore --from experiments/results/qwen/state`` on the committed state: its pointer becomes the
    shipped ``rl`` weights, so the chain resumes and its eval arm runs from the restored folder."""
    from harnesslearn.transfer import restore

    state = Path(__file__).resolve().parents[2] / "experiments" / "results" / "qwen" / "state"
    if not (state / "grpo" / "state" / "adapter" / adapters.POINTER).is_file():
        pytest.skip("the committed state holds its adapter's weights itself")
    restore(tmp_path / "w", state)
    got = tmp_path / "w" / "ret" / "grpo" / "state" / "adapter"
    assert (got / adapters.WEIGHTS).is_file() and not (got / adapters.POINTER).exists()
    rl = Path(adapters.resolve("qwen2.5-coder-1.5b-instruct", "rl"))
    assert (got / adapters.WEIGHTS).read_bytes() == (rl / adapters.WEIGHTS).read_bytes()
