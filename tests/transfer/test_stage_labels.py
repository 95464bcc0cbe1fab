"""The GRPO stage's record of where a stretch's training began (read by the report and the notes)."""

from pathlib import Path

from harnesslearn.transfer.stages import start_label


def test_a_resumed_grpo_stretch_says_it_went_on_from_the_saved_state_not_from_the_base() -> None:
    # stretch 5 of the H200 chain resumed at update 1 without the SFT adapter beside it and was labelled "base"
    assert start_label({"resumed_from": 1}, None) == "state_after_update_1"
    assert start_label({"resumed_from": 1}, Path("ret/sft_adapter")) == "state_after_update_1"
    assert start_label({"resumed_from": 0}, Path("ret/sft_adapter")) == "sft_adapter"
    assert start_label({}, None) == "base"


def test_an_eval_row_asked_with_other_prompts_is_another_row() -> None:
    """The held-out-pattern control's eval rows (proposer.prompt_dir packaged:heldout) sit beside the packaged
    prompts' rows of the same arm and family; a row from before the setting is one of the packaged prompts; the
    fixed arms propose nothing and are not split by it."""
    from harnesslearn.transfer.settings import TransferSettings
    from harnesslearn.transfer.stages import row_key, stage_key

    s = TransferSettings(model="m")
    held = s.with_(**{"proposer.prompt_dir": "packaged:heldout"})
    old = {"arm": "rl", "family": "gcd", "n_score": s.eval.splits.n_score, "eval_seed": s.eval.seed}
    assert row_key(old) == stage_key(s, "rl", "gcd") != stage_key(held, "rl", "gcd")
    assert row_key({**old, "prompt_dir": "packaged:heldout"}) == stage_key(held, "rl", "gcd")
    assert stage_key(s, "zoo", "gcd") == stage_key(held, "zoo", "gcd")
