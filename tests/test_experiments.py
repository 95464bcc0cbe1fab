"""The H200 experiment scripts (experiments/): the pure arithmetic (bootstrap intervals, step-time
breakdown, GPU utilisation per phase), the report writer, and a CPU smoke run of both device
scripts with a tiny randomly initialised model and a ``python:`` solver, so that the scripts work
the first time on the device."""

from __future__ import annotations

import json
import operator
import sys
from pathlib import Path

import pytest
from extras import require

EXP = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXP))

import exp_stats as st  # noqa: E402


# ---------------------------------------------------------------------- bootstrap
def test_bootstrap_constant_values_give_a_zero_width_interval() -> None:
    c = st.bootstrap_ci([0.25] * 10)
    assert c == {"mean": 0.25, "lo": 0.25, "hi": 0.25}


def test_bootstrap_interval_brackets_the_mean_and_shrinks_with_n() -> None:
    small = st.bootstrap_ci([0.0, 1.0] * 5, seed=1)
    large = st.bootstrap_ci([0.0, 1.0] * 200, seed=1)
    for c in (small, large):
        assert c["lo"] < c["mean"] == 0.5 < c["hi"]
    assert (large["hi"] - large["lo"]) < (small["hi"] - small["lo"]) / 3


def test_paired_difference_sees_a_shift_that_unpaired_noise_would_hide() -> None:
    before = [0.1 * (i % 10) for i in range(40)]  # widely spread scores
    after = [b + 0.05 for b in before]  # every problem a little better
    d = st.bootstrap_paired_diff(before, after)
    assert d["lo"] == pytest.approx(0.05) and d["hi"] == pytest.approx(0.05)
    with pytest.raises(ValueError):
        st.bootstrap_paired_diff([0.0], [0.0, 1.0])


def test_mean_over_families_weights_families_not_problems() -> None:
    per = {"big": [1.0] * 100, "small": [0.0, 0.0]}
    c = st.bootstrap_family_mean(per)
    assert c["mean"] == pytest.approx(0.5) and c["lo"] == c["hi"] == pytest.approx(0.5)
    wide = st.bootstrap_family_mean(per, resample_families=True)
    assert wide["lo"] == 0.0 and wide["hi"] == 1.0  # drawing families can give all-big or all-small


def test_family_mean_difference_uses_common_families_only() -> None:
    before = {"a": [0.0, 0.0], "b": [0.5, 0.5], "only_before": [1.0]}
    after = {"a": [1.0, 1.0], "b": [0.5, 0.5]}
    assert st.bootstrap_family_mean_diff(before, after)["mean"] == pytest.approx(0.5)


# ---------------------------------------------------------------------- step breakdown
def test_step_breakdown_arithmetic_and_overlap_estimates() -> None:
    # three updates of 10 s (gen 4, reward 5, so train 1) separated by 1 s gaps; the first is warm-up
    steps = [{"start": 0.0, "end": 30.0, "gen_s": 20.0, "reward_s": 5.0}]
    steps += [{"start": 31.0 + 11 * i, "end": 41.0 + 11 * i, "gen_s": 4.0, "reward_s": 5.0} for i in range(2)]
    b = st.step_breakdown(steps, train_wall_s=60.0)
    m = b["mean_s"]
    assert b["averaged_over"] == 2
    assert (m["generation"], m["reward"], m["training"], m["idle"]) == pytest.approx((4.0, 5.0, 1.0, 1.0))
    assert m["update"] == pytest.approx(11.0)
    assert b["overlap_gen_reward_s"] == pytest.approx(5.0 + 1.0 + 1.0)  # max(gen, reward) + train + idle
    assert b["async_offpolicy_s"] == pytest.approx(5.0 + 1.0)  # max(gen + train, reward) + idle
    assert b["overlap_speedup"] == pytest.approx(11.0 / 7.0)
    assert b["setup_s"] == pytest.approx(60.0 - 50.0 - 2.0)
    assert sum(b["share"].values()) == pytest.approx(1.0)
    assert st.step_breakdown([]) == {"updates": 0}


def test_phase_utilisation_averages_samples_inside_each_phase() -> None:
    samples = [(0.5, 10.0, 0), (1.5, 90.0, 0), (2.5, 80.0, 0), (3.5, 0.0, 0)]
    phases = [{"name": "gen", "start": 1.0, "end": 3.0}, {"name": "reward", "start": 3.2, "end": 3.4}]
    u = st.phase_utilisation(samples, phases)
    assert u["gen"]["mean_util"] == pytest.approx(85.0) and u["gen"]["samples"] == 2
    assert u["reward"]["mean_util"] is None  # shorter than the sampling interval
    assert u["all"]["mean_util"] == pytest.approx(45.0)
    assert st.throughput_ratio(50.0, 200.0) == 0.25 and st.throughput_ratio(None, 1.0) is None


# ---------------------------------------------------------------------- instrumentation
def test_instrument_times_phases_counts_solver_tokens_and_stops_at_the_deadline(tmp_path: Path) -> None:
    """The instrument sees the run only through the library's public GRPOHooks: the phases come from
    the library's PhaseClock (as run_grpo drives it), the solver from GRPORun."""
    import time
    from types import SimpleNamespace

    require("transformers")
    import exp_runtime as rt
    import h200_grpo

    from harnesslearn.training.grpo import GRPORun, PhaseClock

    class Solver:  # the counters an hf: backend keeps
        def __init__(self) -> None:
            self.tokens, self.batches = 0, [4]

        def stats(self) -> dict:
            return {"calls": len(self.batches), "prompt_tokens": 0, "completion_tokens": self.tokens}

    solver = Solver()

    def rewards() -> None:
        solver.tokens += 300
        solver.batches += [8, 16]

    rollouts = SimpleNamespace(history=[{"step": 0, "reward": 0.5}])
    callbacks: list = []
    trainer = SimpleNamespace(add_callback=callbacks.append)
    inst = h200_grpo.Instrument(rt.Timeline(), deadline=time.time() + 3600, log_path=tmp_path / "log.jsonl")
    inst.on_start(GRPORun(trainer, solver, rollouts, "landlock"))  # type: ignore[arg-type]
    assert inst.isolation == "landlock"
    clock, phases = callbacks[0], PhaseClock(inst)
    state, control = SimpleNamespace(global_step=0), SimpleNamespace(should_training_stop=False)
    clock.on_step_begin(None, state, control)
    phases.update_started()
    with phases.reward():
        rewards()
    clock.on_step_end(None, state, control)
    assert not control.should_training_stop
    (u,) = inst.updates
    (s,) = u["solver"]
    assert s["completion_tokens"] == 300 and s["generate_calls"] == 2 and s["mean_batch"] == 12
    assert u["reward_parts"] == {"step": 0, "reward": 0.5}
    assert u["gen_s"] >= 0 and u["reward_s"] >= 0
    assert {p["name"] for p in inst.timeline.phases} == {"generation", "reward", "update"}
    inst.deadline = time.time()  # no room for another update
    clock.on_step_begin(None, state, control)
    clock.on_step_end(None, state, control)
    assert control.should_training_stop and inst.stopped_by_budget
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 2


def test_experiments_and_benchmarks_are_recipes_over_the_public_api() -> None:
    """Every harnesslearn name that experiments/ and benchmarks/ import exists, is public (no ``_``
    module or name) and is not a sandbox internal; none edits sys.path, imports from tests/ or runs SQL
    on a store itself; none patches a trainer's privates."""
    import ast
    import importlib
    import re

    root = EXP.parent
    files = sorted([*EXP.rglob("*.py"), *(root / "benchmarks").rglob("*.py")])
    assert len(files) > 15
    for path in files:
        text = path.read_text()
        where = str(path.relative_to(root))
        assert not re.search(r"setattr\(\s*trainer|_generate_single_turn|_calculate_rewards", text), where
        assert "sys.path.insert" not in text and "import sqlite3" not in text, where
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module:
                mods, names = [node.module], [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                mods, names = [a.name for a in node.names], []
            else:
                continue
            for mod in mods:
                assert mod.split(".")[0] != "tests", f"{where} imports from tests/: {mod}"
                if mod.split(".")[0] != "harnesslearn":
                    continue
                assert not any(part.startswith("_") for part in mod.split(".")), f"{where}: private module {mod}"
                assert mod not in ("harnesslearn.sandbox.launcher", "harnesslearn.sandbox.worker"), where
                module = importlib.import_module(mod)
                for name in names:
                    assert not name.startswith("_"), f"{where}: private name {mod}.{name}"
                    assert hasattr(module, name) or importlib.util.find_spec(f"{mod}.{name}"), f"{where}: {mod}.{name}"


def test_isolation_record_says_loudly_when_there_is_no_sandbox(capsys: pytest.CaptureFixture[str]) -> None:
    import exp_runtime as rt

    rec = rt.isolation_record("none", "none", None)
    assert rec["used"] == "none" and rec["requested"] == "none" and rec["worker_python"]
    assert "WITHOUT A SANDBOX" in capsys.readouterr().err
    assert rt.isolation_record("auto", "landlock", "/usr/bin/python3")["worker_python"] == "/usr/bin/python3"


# ---------------------------------------------------------------------- report
def test_report_writes_markdown_and_both_plots(tmp_path: Path) -> None:
    import plot_results

    grpo = {"status": "ok", "wall_s": 400, "train": {"steps": 3, "reward_parts": [
        {"step": i, "reward": 0.1 * i, "J": 0.05 * i, "parse_rate": 0.5, "produce_rate": 0.3,
         "completion_rate": 0.2} for i in range(3)]}, "config": {"lora_r": 32}, "isolation": {"used": "landlock"}}
    fam = {"seed": st.bootstrap_ci([0.0, 1.0]), "after": st.bootstrap_ci([1.0, 1.0]), "valid": 1, "proposals": 4}
    arm = {"families": 1, "validity": {"parsed": 0.5, "produced": 0.25, "valid": 0.25}, "improved_families": 1,
           "seed_mean_J": fam["seed"], "after_mean_J": fam["after"], "gain_over_seed": fam["after"],
           "per_family": {"gcd": fam}}
    ev = {"status": "ok", "summary": {"base": arm, "trained": arm, "trained_minus_base": fam["seed"]},
          "settings": {"candidates": 4, "n_test": 2}}
    paths = plot_results.write_report(grpo, ev, tmp_path)
    assert {p.name for p in paths} == {"results.md", "reward_curve.png", "per_family.png"}
    md = (tmp_path / "results.md").read_text()
    assert "Gemma 3 270M, 3 updates, small-model result" in md
    assert "| 3 | 0.200 | 0.100 |" in md and "landlock" in md and "| gcd |" in md
    assert (tmp_path / "per_family.png").read_bytes()[:4] == b"\x89PNG"


def test_readme_commands_parse_with_the_scripts_own_parsers() -> None:
    import shlex

    import h200_eval
    import h200_grpo
    import plot_results

    text = (EXP / "README.md").read_text().replace("\\\n", " ")
    parsers = {"h200_grpo.py": h200_grpo.parser(), "h200_eval.py": h200_eval.parser()}
    seen = set()
    for line in text.splitlines():
        if "python" not in line or ".py " not in line:
            continue
        words = shlex.split(line.replace("$", ""))
        for i, w in enumerate(words):
            name = Path(w).name
            if name in parsers and w.startswith("experiments/"):
                parsers[name].parse_args(words[i + 1:])  # exits (SystemExit) on an unknown or bad option
                seen.add(name)
            elif name == "plot_results.py":
                seen.add(name)
                assert {"--grpo", "--eval", "--out", "--notes"} >= {a for a in words[i + 1:] if a.startswith("--")}
    assert seen == {"h200_grpo.py", "h200_eval.py", "plot_results.py"}
    assert callable(plot_results.main)


# ---------------------------------------------------------------------- CPU smoke run of both scripts
def _tiny_model(path: Path) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<pad>", "<s>", "</s>", "<unk>", "a", "b", "solve", "model", "SEARCH", "REPLACE", "======="]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.mark.slow
def test_grpo_then_eval_scripts_run_on_the_cpu(tmp_path: Path) -> None:
    require("trl")
    import h200_eval
    import h200_grpo

    model = _tiny_model(tmp_path / "model")
    rows = [{"id": f"q{i}", "question": f"Compute: {i} + {i + 3}", "answer": str(2 * i + 3)} for i in range(100)]
    (tmp_path / "arith.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "solver.py").write_text("def solve(prompt, **kw):\n    return '0'\n")
    family = f"jsonl:{tmp_path / 'arith.jsonl'}?scorer=exact"
    solver = f"python:{tmp_path / 'solver.py'}:solve"
    out = tmp_path / "out"
    # a budget already spent: the clock stops training after the first update although max_steps is 3
    code = h200_grpo.main([
        "--model", str(model), "--out", str(out), "--work", str(tmp_path / "w1"), "--cpu", "--solver", solver,
        "--families", family, "--num-generations", "2", "--contexts-per-update", "1", "--contexts-per-epoch", "2",
        "--micro-batch", "2", "--max-completion-length", "8", "--n-score", "2", "--n-feedback", "2",
        "--concurrency", "2", "--max-steps", "3", "--bench-batch", "4", "--bench-tokens", "4",
        "--minutes", "0.001", "--reserve-s", "0",
    ])
    res = json.loads((out / "grpo_results.json").read_text())
    assert code == 0, res.get("traceback")
    assert res["status"] == "ok" and res["train"]["steps"] == 1 and res["train"]["stopped_by_budget"]
    assert res["isolation"]["used"] in ("bwrap", "landlock", "none")
    assert res["step_breakdown"]["updates"] == 1 and res["updates"][0]["reward_parts"]["parse_rate"] >= 0
    assert {"generation", "reward", "update"} <= set(res["gpu_utilisation"])
    assert res["benchmark"]["raw_generate_static"]["completion_tok_s"] > 0
    assert res["files"]["adapter"]["saved"] and (out / "adapter" / "adapter_model.safetensors").is_file()
    log = [json.loads(line) for line in (out / "grpo_log.jsonl").read_text().splitlines()]
    assert [r["update"] for r in log if r["event"] == "update"] == [1]
    assert len(list(out.rglob("*"))) <= 8 + 1  # files plus the adapter folder: what the device sends back

    code = h200_eval.main([
        "--model", str(model), "--adapter", str(out / "adapter"), "--out", str(out), "--work", str(tmp_path / "w2"),
        "--cpu", "--solver", solver, "--families", family, "--n-test", "2", "--n-score", "2", "--n-feedback", "2",
        "--candidates", "1", "--max-tokens", "8", "--concurrency", "2", "--bootstrap", "100",
    ])
    ev = json.loads((out / "eval_results.json").read_text())
    assert code == 0, ev.get("traceback") or ev.get("failures")
    assert {r["arm"] for r in ev["rows"]} == {"base", "trained"}
    assert all(len(r["seed_scores"]) == 2 and r["proposals"] == 1 for r in ev["rows"])
    assert {"base", "trained", "trained_minus_base"} <= set(ev["summary"])

    # the same results rebuilt from the run stores alone (no model): same rows, same summary
    code = h200_eval.main(["--summarise-only", str(tmp_path / "w2"), "--out", str(tmp_path / "again"),
                           "--bootstrap", "100"])
    again = json.loads((tmp_path / "again" / "eval_results.json").read_text())
    assert code == 0 and again["status"] == "ok" and again["settings"]["candidates"] == 1
    key = operator.itemgetter("arm", "family")
    drop = ("wall_s", "adapt_wall_s")
    assert ([{k: v for k, v in r.items() if k not in drop} for r in sorted(again["rows"], key=key)]
            == [{k: v for k, v in r.items() if k not in drop} for r in sorted(ev["rows"], key=key)])
    assert again["summary"] == ev["summary"]


def test_eval_needs_a_model_unless_it_only_summarises() -> None:
    import h200_eval

    with pytest.raises(SystemExit):
        h200_eval.parse_args(["--out", "x"])
    assert h200_eval.parse_args(["--out", "x", "--summarise-only", "w"]).model is None
