"""The GRPO stage's record of where a stretch's training began (read by the report and the notes)."""

from pathlib import Path

from harnesslearn.transfer.stages import start_label


def test_a_resumed_grpo_stretch_says_it_went_on_from_the_saved_state_not_from_the_base() -> None:
    # stretch 5 of the H200 chain resumed at update 1 without the SFT adapter beside it and was labelled "base"
    assert start_label({"resumed_from": 1}, None) == "state_after_update_1"
    assert start_label({"resumed_from": 1}, Path("ret/sft_adapter")) == "state_after_update_1"
    assert start_label({"resumed_from": 0}, Path("ret/sft_adapter")) == "sft_adapter"
    assert start_label({}, None) == "base"
