"""End to end on the CPU with a tiny randomly initialised model built here (no download): one SFT
run and one GRPO step through the real reward path (executor + a `python:` solver), and every
trainable LoRA parameter changes in each.

The tiny tokenizer is word-level with a handful of words plus two added tokens that each decode
to a whole SEARCH/REPLACE block (one that makes the harness compute the answer, one whose SEARCH
text does not match), so that a random policy samples proposals whose rewards differ within a
group -- GRPO needs that variance to produce a gradient at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from extras import require

require("trl")

from harnesslearn.errors import UserError  # noqa: E402
from harnesslearn.training.config import GRPOTrainConfig, SFTTrainConfig, build_config  # noqa: E402
from harnesslearn.training.reward import reward_value  # noqa: E402

GOOD = '\n<<<<<<< SEARCH\n    return completion.strip()\n=======\n    return str(eval(question.split(":")[-1]))\n>>>>>>> REPLACE\n'
BAD = '\n<<<<<<< SEARCH\n    return nothing_here\n=======\n    return "1"\n>>>>>>> REPLACE\n'


def build_tiny_model(path: Path) -> Path:
    import torch
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<pad>", "<s>", "</s>", "<unk>", "a", "b", "solve", "model"]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>")
    tok.add_tokens([AddedToken(GOOD, normalized=False), AddedToken(BAD, normalized=False)])
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def lora_tensors(adapter: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(adapter / "adapter_model.safetensors"))


def assert_all_changed(before: dict, after: dict) -> None:
    import torch

    assert before.keys() == after.keys() and before
    same = [k for k in before if torch.equal(before[k], after[k])]
    assert not same, f"{len(same)} of {len(before)} LoRA tensors did not change: {same[:3]}"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from harnesslearn.training.model_io import lora_config

    d = tmp_path_factory.mktemp("train")
    model_dir = build_tiny_model(d / "model")
    peft = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), lora_config(4, 8, 0.0, "all-linear"))
    peft.save_pretrained(d / "adapter0")
    rows = [{"id": f"q{i}", "question": f"Compute: {i} + {i + 3}", "answer": str(2 * i + 3)} for i in range(200)]
    (d / "arith.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "solver.py").write_text("def solve(prompt, **kw):\n    return '0'\n")
    sft = [{"messages": [{"role": "user", "content": f"a b model {i}"}, {"role": "assistant", "content": GOOD}],
            "provenance": {"kind": "interpreter_loop"}} for i in range(2)]
    (d / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sft))
    return {"dir": d, "model": str(model_dir)}


@pytest.mark.slow
def test_sft_then_grpo_change_every_lora_parameter(world: dict) -> None:
    from harnesslearn.store import Store
    from harnesslearn.training.grpo import run_grpo
    from harnesslearn.training.sft import run_sft

    d = world["dir"]
    common = {"model": world["model"], "trainer.report_to": "none", "trainer.use_cpu": True,
              "trainer.learning_rate": 1e-3, "seed": 0}
    sft = run_sft(build_config(SFTTrainConfig, {
        **common, "adapter": str(d / "adapter0"), "data": str(d / "sft.jsonl"), "output_dir": str(d / "sft"),
        "trainer.max_steps": 2, "trainer.micro_batch": 1, "lora.dropout": 0.0, "max_length": 256,
    }))
    assert sft["steps"] == 2 and sft["too_long"] == 0
    # two steps: the first moves B (zero at init), the second moves A through the now non-zero B
    assert_all_changed(lora_tensors(d / "adapter0"), lora_tensors(Path(sft["adapter"])))

    cfg = build_config(GRPOTrainConfig, {
        **common, "adapter": sft["adapter"], "solver": f"python:{d / 'solver.py'}:solve",
        "families": [f"jsonl:{d / 'arith.jsonl'}?scorer=exact"], "splits.n_feedback": 2, "splits.n_score": 2,
        "proposer.n_traces": 1, "grpo.num_generations": 4, "grpo.contexts_per_update": 2,
        "grpo.contexts_per_epoch": 2, "trainer.micro_batch": 4, "proposer.sampling.max_tokens": 8,
        "trainer.max_steps": 1, "output_dir": str(d / "grpo"), "run_dir": str(d / "run"), "budgets.timeout_s": 20,
        "trainer.save_steps": 1,
    })
    out = run_grpo(cfg)
    assert out["steps"] == 1 and out["contexts"] == 2
    assert_all_changed(lora_tensors(Path(sft["adapter"])), lora_tensors(Path(out["adapter"])))
    assert (d / "grpo" / "checkpoint-1").is_dir()

    with Store.open(d / "run", create=False) as store:
        rows = store.rewards("grpo")
    assert len(rows) == 8  # 2 contexts x 4 candidates
    for r in rows:  # every stored reward is the formula applied to its stored parts
        assert r.J is not None and r.completion_rate is not None
        assert r.reward == pytest.approx(reward_value(r.J, r.parsed, r.produced, r.completion_rate))
    assert len({r.reward for r in rows}) > 1  # the group had something to learn from
    groups = [json.loads(line) for line in Path(out["rollouts"]).read_text().splitlines()]
    assert sum(len(g["candidates"]) for g in groups) == 8
    assert all(g["prompt"].endswith("<<<<<<< SEARCH\n") for g in groups)  # the test-time prompt
    # each context's parent scored on its candidates' problems (score_parent, on by default): the bar to clear
    assert all(isinstance(g["parent_J"], float) and 0.0 <= g["parent_J"] <= 1.0 for g in groups)
    parts = out["reward_parts"][0]
    assert {"J", "parse_rate", "produce_rate", "completion_rate", "reward", "none_rate"} <= parts.keys()

    # the compact state after the update: bf16 adapter, updates and contexts consumed, a record per update
    state = json.loads((d / "grpo" / "state" / "state.json").read_text())
    assert (state["updates"], state["contexts"]) == (1, 2)
    saved = lora_tensors(d / "grpo" / "state" / "adapter")
    assert {str(t.dtype) for t in saved.values()} == {"torch.bfloat16"}
    final = lora_tensors(Path(out["adapter"]))
    assert all(torch_close(saved[k], final[k]) for k in saved)  # the state is the trained adapter
    (rec,) = [json.loads(line) for line in (d / "grpo" / "state" / "updates.jsonl").read_text().splitlines()]
    assert rec["update"] == 1 and {"generation", "reward", "update"} <= rec["seconds"].keys()
    assert "frac_reward_zero_std" in rec["trl"] and rec["reward_parts"]["J"] is not None and rec["adapter_norm"] > 0
    # the groups' figures and the collapse check of the update (issue 62): entropy, distinct texts, copy share, the
    # share of groups whose best beats its parent, the parents' J
    g = rec["groups"]
    assert isinstance(rec["entropy"], float) and rec["entropy"] == rec["trl"]["entropy"]
    assert g["groups"] == 2 and 1.0 <= g["distinct_texts"] <= 4.0 and len(g["parents_J"]) == 2
    assert g["parents_J_mean"] == pytest.approx(sum(g["parents_J"]) / 2, abs=1e-4)
    assert 0.0 <= g["beats_parent_share"] <= 1.0 and g["valid"] <= 8
    assert (g["copy_share"] is None) == (g["valid"] == 0) and isinstance(rec["collapse_alarm"], list)

    # resume: the same config with two updates continues from the state (the next contexts, the saved adapter)
    with pytest.raises(UserError, match="learning_rate"):  # a setting that shapes the run may not change
        run_grpo(cfg.with_(**{"trainer.max_steps": 2, "resume": True, "trainer.learning_rate": 1e-2}))
    again = run_grpo(cfg.with_(**{"trainer.max_steps": 2, "resume": True}))
    assert again["steps"] == 2 and again["resumed_from"] == 1 and again["new_steps"] == 1
    assert [p["step"] for p in again["reward_parts"]] == [1]  # only the new update was generated and scored
    recs = [json.loads(line) for line in (d / "grpo" / "state" / "updates.jsonl").read_text().splitlines()]
    assert [r["update"] for r in recs] == [1, 2] and recs[1]["contexts"] == 4
    assert_all_changed(saved, lora_tensors(d / "grpo" / "state" / "adapter"))
    done = run_grpo(cfg.with_(**{"trainer.max_steps": 2, "resume": True}))
    assert done["new_steps"] == 0 and done["steps"] == 2  # nothing left: no model is loaded, nothing runs


def torch_close(a: object, b: object) -> bool:
    import torch

    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    return torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-3)


def test_sft_leaves_out_rows_longer_than_max_length_and_stops_on_a_non_finite_loss(world: dict) -> None:
    """A row longer than max_length is left out, not truncated (a prompt as long as the limit leaves no token
    to learn from: a 0/0 loss, NaN gradients); a NaN loss or gradient norm stops training, nothing saved."""
    from transformers import AutoTokenizer, TrainerControl, TrainerState

    from harnesslearn.training.sft import finite_guard, fit_rows

    tok = AutoTokenizer.from_pretrained(world["model"])
    rows = [{"prompt": "a b model", "completion": "solve"}, {"prompt": " ".join(["a"] * 300), "completion": "solve"}]
    kept, dropped = fit_rows(rows, tok, 256)
    assert kept == rows[:1] and dropped == 1
    assert fit_rows(rows, tok, 4 + 1) == (rows[:1], 1)  # 3 prompt + 1 completion + the end token: just fits
    assert fit_rows(rows, tok, 4) == ([], 2)
    guard, state, control = finite_guard(), TrainerState(), TrainerControl()
    state.global_step = 18
    guard.on_log(None, state, control, logs={"loss": 0.46, "grad_norm": 1.2})
    assert guard.diverged is None and not control.should_training_stop
    guard.on_log(None, state, control, logs={"loss": 0.46, "grad_norm": float("nan")})
    assert guard.diverged == {"step": 18, "grad_norm": "nan"} and control.should_training_stop


@pytest.mark.slow
def test_sft_that_diverges_raises_and_saves_no_adapter(world: dict) -> None:
    """A real run driven to a non-finite loss (an absurd learning rate) stops with 'diverged' and no adapter."""
    from harnesslearn.training.sft import run_sft

    d = world["dir"]
    cfg = build_config(SFTTrainConfig, {
        "model": world["model"], "trainer.report_to": "none", "trainer.use_cpu": True, "seed": 0,
        "adapter": str(d / "adapter0"), "data": str(d / "sft.jsonl"), "output_dir": str(d / "sft-nan"),
        "trainer.max_steps": 6, "trainer.micro_batch": 1, "lora.dropout": 0.0, "max_length": 256,
        "trainer.logging_steps": 1,
    })
    with pytest.raises(UserError, match="learning_rate"):  # the config refuses such a rate ...
        cfg.with_(**{"trainer.learning_rate": 1e30})
    # ... so it is set past the check (model_copy does not validate) to drive a real run to divergence
    cfg = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"learning_rate": 1e30})})
    with pytest.raises(RuntimeError, match="diverged"):
        run_sft(cfg)
    assert not (d / "sft-nan" / "adapter").exists()


def test_train_sft_json_prints_exactly_one_json_object(world: dict, tmp_path: Path) -> None:
    """`train sft --json`: stdout is the one result object (the trainer's log dicts go to stderr)."""
    import subprocess
    import sys

    d = world["dir"]
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(json.dumps({  # JSON is YAML
        "model": world["model"], "data": str(d / "sft.jsonl"), "output_dir": str(tmp_path / "out"), "max_length": 256,
        "lora": {"r": 4, "alpha": 8}, "trainer": {"max_steps": 2, "micro_batch": 1, "report_to": "none",
                                                   "use_cpu": True, "logging_steps": 1}}))
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "train", "sft", "--config", str(cfg), "--json"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count("\n") == 1, p.stdout[:2000]
    out = json.loads(p.stdout)
    assert out["steps"] == 2 and Path(out["adapter"]).is_dir()
    assert "loss" in p.stderr  # the log lines are kept, on stderr


@pytest.mark.parametrize("case", ["policy_not_a_model", "adapter_not_an_adapter", "unknown_target", "data_nonstring"])
def test_training_inputs_are_checked_before_any_library_sees_them(world: dict, tmp_path: Path, case: str) -> None:
    """A policy folder that is not a model, an adapter folder that is not an adapter, a LoRA target the
    model lacks, SFT rows whose content is not text: one UserError line, no traceback from transformers,
    PEFT or TRL, and no output folder left behind."""
    from harnesslearn.errors import UserError
    from harnesslearn.training.sft import run_sft

    d = world["dir"]
    raw = {"model": world["model"], "data": str(d / "sft.jsonl"), "output_dir": str(tmp_path / "out"),
           "max_length": 256, "trainer.max_steps": 1, "trainer.micro_batch": 1, "trainer.report_to": "none",
           "trainer.use_cpu": True}
    if case == "policy_not_a_model":
        (tmp_path / "empty").mkdir()
        raw["model"] = str(tmp_path / "empty")
    elif case == "adapter_not_an_adapter":
        (tmp_path / "notes").mkdir()
        (tmp_path / "notes" / "README").write_text("hi")
        raw["adapter"] = str(tmp_path / "notes")
    elif case == "unknown_target":
        raw["lora.target_modules"] = ["q_proj", "not_a_module"]
    else:
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps({"messages": [{"role": "user", "content": ["a", "list"]},
                                                {"role": "assistant", "content": "x"}]}) + "\n")
        raw["data"] = str(bad)
    with pytest.raises(UserError) as e:
        run_sft(build_config(SFTTrainConfig, raw))
    assert "\n" not in str(e.value)
    assert {"policy_not_a_model": "not a transformers model", "adapter_not_an_adapter": "not a LoRA adapter",
            "unknown_target": "not_a_module", "data_nonstring": "content"}[case] in str(e.value), str(e.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["output_is_a_file", "output_read_only"])
def test_an_output_dir_that_cannot_be_written_is_refused_before_loading(world: dict, tmp_path: Path,
                                                                        case: str) -> None:
    import os

    from harnesslearn.errors import UserError
    from harnesslearn.training.sft import run_sft

    if case == "output_is_a_file":
        out = tmp_path / "out"
        out.write_text("mine")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        out = ro / "out"
    raw = {"model": world["model"], "data": str(world["dir"] / "sft.jsonl"), "output_dir": str(out),
           "trainer.max_steps": 1, "trainer.report_to": "none", "trainer.use_cpu": True, "max_length": 256}
    with pytest.raises(UserError, match="output_dir"):
        run_sft(build_config(SFTTrainConfig, raw))
    if case == "output_is_a_file":
        assert out.read_text() == "mine"


def test_sft_keeps_at_most_k_rows_of_one_completion_the_first_in_the_file() -> None:
    """Zoo revisions repeat a zoo file word for word across contexts (154 of 187 rows of the H200 run were 4
    files): ``max_same_completion`` keeps the first k of each completion, in file order, and counts the rest."""
    from harnesslearn.training.sft import cap_repeats

    rows = [{"prompt": f"p{i}", "completion": c} for i, c in enumerate("aabacaab")]
    assert cap_repeats(rows, None) == (rows, 0)
    kept, left = cap_repeats(rows, 2)
    assert [r["prompt"] for r in kept] == ["p0", "p1", "p2", "p4", "p7"] and left == 3
    assert [r["completion"] for r in cap_repeats(rows, 1)[0]] == ["a", "b", "c"]


def test_sft_resume_refuses_a_changed_setting_naming_it(world: dict, tmp_path: Path) -> None:
    """A resumed SFT compares the settings its checkpoint was trained with: a changed LoRA rank (a traceback
    from the checkpoint's shapes before) or learning rate (resumed silently before) is one line."""
    from harnesslearn.errors import UserError
    from harnesslearn.training.sft import run_sft

    raw = {"model": world["model"], "data": str(world["dir"] / "sft.jsonl"), "output_dir": str(tmp_path / "out"),
           "max_length": 256, "lora.r": 4, "lora.alpha": 8, "trainer.max_steps": 1, "trainer.micro_batch": 1,
           "trainer.save_steps": 1, "trainer.report_to": "none", "trainer.use_cpu": True}
    assert run_sft(build_config(SFTTrainConfig, raw))["steps"] == 1
    for key, value in (("lora.r", 8), ("trainer.learning_rate", 5e-4), ("max_same_completion", 1)):
        with pytest.raises(UserError, match=f"resume: {key} was"):
            run_sft(build_config(SFTTrainConfig, {**raw, key: value, "resume": True, "trainer.max_steps": 2}))
    assert run_sft(build_config(SFTTrainConfig, {**raw, "resume": True, "trainer.max_steps": 2}))["steps"] == 2


def test_training_logs_to_mlflow_through_report_to(world: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`trainer.report_to: [mlflow]`: the trainer's figures (loss per logged step) reach MLflow's file store."""
    mlflow = pytest.importorskip("mlflow")
    from harnesslearn.training.sft import run_sft

    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "harnesslearn-sft")
    mlflow.set_tracking_uri(uri)  # the process-wide URI wins over the variable (another test may have set one)
    out = run_sft(build_config(SFTTrainConfig, {
        "model": world["model"], "data": str(world["dir"] / "sft.jsonl"), "output_dir": str(tmp_path / "out"),
        "max_length": 256, "trainer.max_steps": 2, "trainer.micro_batch": 1, "trainer.logging_steps": 1,
        "trainer.report_to": ["mlflow"], "trainer.use_cpu": True}))
    assert out["steps"] == 2
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["harnesslearn-sft"], output_format="list")
    assert runs and "loss" in runs[0].data.metrics, runs[0].data.metrics if runs else None


@pytest.mark.slow
def test_a_grpo_update_from_zoo_seeded_contexts(world: dict) -> None:
    """``grpo.seed_harnesses: [zoo:NAME, ...]`` end to end: each context's prompt shows the zoo harness built for
    its family (not the minimal seed), and the update runs through the real reward path."""
    from harnesslearn.harness import harness_id, load_harness
    from harnesslearn.training.grpo import run_grpo

    d = world["dir"]
    cfg = build_config(GRPOTrainConfig, {
        "model": world["model"], "trainer.report_to": "none", "trainer.use_cpu": True, "trainer.learning_rate": 1e-3,
        "seed": 0, "adapter": str(d / "adapter0"), "solver": f"python:{d / 'solver.py'}:solve",
        "families": [f"jsonl:{d / 'arith.jsonl'}?scorer=exact"], "splits.n_feedback": 2, "splits.n_score": 2,
        "proposer.n_traces": 1, "grpo.num_generations": 4, "grpo.contexts_per_update": 2,
        "grpo.contexts_per_epoch": 2, "trainer.micro_batch": 4, "proposer.sampling.max_tokens": 8,
        "trainer.max_steps": 1, "output_dir": str(d / "grpo_zoo"), "run_dir": str(d / "run_zoo"),
        "budgets.timeout_s": 20, "grpo.seed_harnesses": ["zoo:interpreter_loop", "zoo:few_shot"],
    })
    out = run_grpo(cfg)
    assert out["steps"] == 1 and out["contexts"] == 2
    groups = [json.loads(line) for line in Path(out["rollouts"]).read_text().splitlines()]
    assert len(groups) == 2 and sum(len(g["candidates"]) for g in groups) == 8
    assert harness_id(load_harness("minimal").source) not in {g["parent_id"] for g in groups}
    assert any("for _ in range(ATTEMPTS):" in g["prompt"] for g in groups)  # the interpreter loop's code is shown


@pytest.mark.slow
def test_streamed_rewards_equal_the_batch_paths(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """``grpo.stream_reward``: with the same seed and contexts, an update's completions and rewards are the same
    whether each group is scored as soon as TRL's generation returns or at TRL's reward call; and streaming really
    submitted the batch early (one submit an update, each group its own future)."""
    from harnesslearn.training import grpo

    d = world["dir"]
    submitted: list[int] = []
    real = grpo.ExecutionReward.submit

    def spy(self, rows, prompts, completions, completion_ids, group_size):  # type: ignore[no-untyped-def]
        submitted.append(len(completions) // group_size)
        return real(self, rows, prompts, completions, completion_ids, group_size)

    monkeypatch.setattr(grpo.ExecutionReward, "submit", spy)
    base = {"model": world["model"], "adapter": str(d / "adapter0"), "trainer.report_to": "none",
            "trainer.use_cpu": True, "seed": 0, "solver": f"python:{d / 'solver.py'}:solve",
            "families": [f"jsonl:{d / 'arith.jsonl'}?scorer=exact"], "splits.n_feedback": 2, "splits.n_score": 2,
            "proposer.n_traces": 1, "grpo.num_generations": 4, "grpo.contexts_per_update": 2,
            "grpo.contexts_per_epoch": 2, "trainer.micro_batch": 4, "proposer.sampling.max_tokens": 8,
            "trainer.max_steps": 1, "budgets.timeout_s": 20, "trainer.save_steps": 1}
    rows = {}
    for stream in (False, True):
        out = grpo.run_grpo(build_config(GRPOTrainConfig, {**base, "grpo.stream_reward": stream,
                                                           "output_dir": str(d / f"stream-{stream}")}))
        groups = [json.loads(line) for line in Path(out["rollouts"]).read_text().splitlines()]
        rows[stream] = [(g["context_id"], c["completion"], c["reward"], c["J"]) for g in groups
                        for c in g["candidates"]]
    assert submitted == [2]  # the streamed run only: its one update's two groups
    assert len(rows[True]) == 8 and rows[True] == rows[False]
    assert len({r[2] for r in rows[True]}) > 1  # rewards that differ within the update, so the equality says something
