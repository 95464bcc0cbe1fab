"""The transfer experiment's pipeline (``harnesslearn.transfer``): hard deadlines, and the GPU pipeline
run end to end on the CPU through the same code (the solver runtime, the sandbox, the hf: engine with
its response cache, TRL + PEFT) as ``experiments/qwen12.py smoke``."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from extras import require

from harnesslearn.errors import UserError
from harnesslearn.transfer import TransferSettings, collect, land, restore
from harnesslearn.transfer.deadline import run_until

ROOT = Path(__file__).resolve().parents[2]


def test_run_until_keeps_what_finished_and_cancels_the_rest_at_the_deadline() -> None:
    done: list[int] = []
    cancelled: list[int] = []

    async def job(i: int) -> int:
        try:
            await asyncio.sleep(0.05 if i < 3 else 30)
        except asyncio.CancelledError:
            cancelled.append(i)
            raise
        return i

    async def main() -> object:
        t0 = time.time()
        counts = await run_until(list(range(8)), t0 + 0.5, job, lambda j, r: done.append(r), concurrency=5)
        assert time.time() - t0 < 2.0  # the deadline holds: nothing waits for the 30 s jobs
        return counts

    counts = asyncio.run(main())
    assert sorted(done) == [0, 1, 2]
    assert counts.as_dict() == {"jobs": 8, "finished": 3, "failed": 0, "cancelled": 5, "not_started": 0}
    assert counts.partial and sorted(cancelled) == [3, 4, 5, 6, 7]


def test_run_until_counts_failures_and_jobs_it_never_started() -> None:
    async def job(i: int) -> int:
        if i == 1:
            raise ValueError("bad job")
        await asyncio.sleep(0.3)
        return i

    async def main() -> object:
        return await run_until(list(range(6)), time.time() + 0.45, job, lambda j, r: None, concurrency=2)

    c = asyncio.run(main()).as_dict()  # type: ignore[attr-defined]
    # 0 and 1 start; 1 fails at once and 2 starts; 0 and 2 end at 0.3 s and 3, 4 start; at 0.45 s 3 and 4
    # are cut and 5 never started
    assert c == {"jobs": 6, "finished": 2, "failed": 1, "cancelled": 2, "not_started": 1}


def test_run_until_starts_no_job_the_finished_ones_say_would_be_cut() -> None:
    """After three jobs finished, a job that their median duration says would end after the deadline is not
    started (it would be cancelled, its work lost)."""
    async def job(i: int) -> int:
        await asyncio.sleep(0.4)
        return i

    async def main() -> object:
        return await run_until(list(range(10)), time.time() + 1.0, job, lambda j, r: None, concurrency=3)

    # 0-2 end at 0.4 s, 3-5 start (0.4 + 0.4 < 1.0) and end at 0.8 s; 6-9 would end at 1.2 s: not started
    c = asyncio.run(main()).as_dict()  # type: ignore[attr-defined]
    assert c == {"jobs": 10, "finished": 6, "failed": 0, "cancelled": 0, "not_started": 4}


def test_settings_refuse_unknown_stages_engines_and_arms() -> None:
    from harnesslearn.settings.load import load

    with pytest.raises(UserError, match="--stages must be one of sftdata, sft, grpo, eval, musique"):
        load(TransferSettings, overrides=["model=m", "stages=sftdata,pretrain"], label="--{}")
    with pytest.raises(UserError, match="engine must be one of vllm, hf"):
        load(TransferSettings, overrides=["model=m", "engine=tgi"])
    with pytest.raises(UserError, match="eval.arms must be one of"):
        load(TransferSettings, overrides=["model=m", "eval.arms=base,teacher"])
    with pytest.raises(UserError, match="local or shards"):
        load(TransferSettings, overrides=["runtime.executor=ray"])


def test_the_recipe_options_are_generated_from_the_settings_tree() -> None:
    """experiments/qwen12.py: one option per leaf of the tree, by its dotted key; the stage groups go
    down whole (the GRPO config gets the recipe's LoRA, runtime and budgets objects, not copies of fields)."""
    import argparse

    sys.path.insert(0, str(ROOT / "experiments"))
    import qwen12

    p = argparse.ArgumentParser()
    qwen12.settings_parser(p)
    a = p.parse_args(["--model", "m", "--sftdata.contexts", "50", "--grpo.trainer.learning-rate", "1e-5",
                      "--eval.families", "gcd,maze", "--force", "--set", "lora.r=8"])
    from harnesslearn.settings.load import load

    given = {k: v for k, v in vars(a).items() if k not in ("config", "overrides") and v is not None}
    s = load(TransferSettings, a.config, a.overrides, options=given)
    assert (s.sftdata.contexts, s.grpo.trainer.learning_rate, s.eval.families, s.force, s.lora.r) == (
        50, 1e-5, ("gcd", "maze"), True, 8)
    assert s.grpo.trainer.max_steps == 80 and s.sft.trainer.learning_rate == 1e-4  # the stages' own defaults


@pytest.mark.slow
def test_the_gpu_pipeline_runs_every_stage_on_the_cpu(tmp_path: Path) -> None:
    require("trl")
    env = {**os.environ, "HARNESSLEARN_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, str(ROOT / "experiments" / "qwen12.py"), "smoke", "--work", str(tmp_path / "w")]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    status = json.loads(p.stdout)
    assert {k: v["state"] for k, v in status.items()} == {
        "sftdata": "done", "sft": "done", "grpo": "done", "eval": "done", "musique": "done", "all": "done"}, status
    ret = tmp_path / "w" / "ret"
    assert status["sftdata"]["kept"] >= 1  # the zoo's interpreter loop beat the seed on the score split
    kept = [json.loads(line) for line in (ret / "sft.jsonl").read_text().splitlines()]
    assert (kept[0]["provenance"]["source"], kept[0]["provenance"]["candidate"]) == ("zoo", "zoo:interpreter_loop")
    assert json.loads((ret / "sftdata.json").read_text())["source"] == "zoo"  # the zoo-teacher arm, labelled so
    assert (ret / "sft_adapter" / "adapter_model.safetensors").is_file()
    grpo = json.loads((ret / "grpo.json").read_text())
    assert grpo["steps"] == 1 and grpo["start"] == "sft_adapter"
    state = json.loads((ret / "grpo" / "state" / "state.json").read_text())  # the resumable state of GRPO
    assert state["updates"] == 1 and (ret / "grpo" / "state" / "adapter" / "adapter_model.safetensors").is_file()
    assert len((ret / "grpo" / "state" / "updates.jsonl").read_text().splitlines()) == 1
    rows = [json.loads(line) for line in (ret / "eval_rows.jsonl").read_text().splitlines()]
    assert sorted(r["arm"] for r in rows) == ["base", "base_mem", "rl", "rl_mem", "rules", "sft", "zoo"]
    rules = next(r for r in rows if r["arm"] == "rules")  # every known source on both splits: the fixed rules
    assert {"zoo:interpreter_loop", "api:1", "api:2"} <= set(rules["sources"])
    assert rules["sources"]["zoo:interpreter_loop"]["test_J"] == 1.0  # the smoke solver answers code with code
    assert all(len(v["test_scores"]) == 2 for v in rules["sources"].values())
    rows = [r for r in rows if r["arm"] != "rules"]
    for r in rows:  # the memory arms were shown entries of the shipped (paper-train) memory, the others none
        assert bool(r.get("memory_shown")) == r["arm"].endswith("_mem"), r
        assert all(not e.endswith(":rg:gcd") for e in r.get("memory_shown", []))
    assert zoo_row_near_copy(rows)
    zoo = next(r for r in rows if r["arm"] == "zoo")
    assert zoo["picked"] == "interpreter_loop" and zoo["test_J"] == 1.0 and zoo["seed_test_J"] == 0.0
    assert all(r["proposals"] == 1 and r["solver"] and r["n_test"] == 2 for r in rows if r["arm"] != "zoo")
    assert len({json.dumps(r["seed_scores"]) for r in rows}) == 1  # one seed evaluation shared by every arm
    from harnesslearn.report import write_report
    from harnesslearn.store import Store

    for r in rows:  # each proposer arm revised through adapt, into a run directory that the report reads
        if r["arm"] != "zoo":
            with Store.open(r["run_dir"], create=False) as st:
                props = st.proposals("independent")
                assert len(props) == r["proposals"]
                assert r["distinct"] == len({p.harness_id for p in props if p.harness_id}) <= r["valid"]
            assert write_report(r["run_dir"]).is_file()
    # MuSiQue: per arm, R sequential rounds against R independent proposals (the same proposer calls), each
    # pick's EM and F1 on the test split with intervals, and the oracle (picked on test) beside them
    mq = {r["arm"]: r for r in map(json.loads, (ret / "musique_rows.jsonl").read_text().splitlines())}
    assert sorted(mq) == ["base", "rl"]
    for r in mq.values():
        assert r["n_test"] == 4 and r["rounds"] == 2 and set(r["picks"]) == {"seed", "sequential", "independent", "oracle"}
        assert r["sequential_calls"]["proposer"] == r["independent_calls"]["proposer"] == 2
        assert r["oracle_calls"]["proposer"] == 3 and len(r["sequential_trace"]) == 2 and r["task"] == "musique"
        for pick in ("seed", "sequential", "independent", "oracle"):
            assert {"em", "f1"} <= r[pick].keys() and r[pick]["f1"]["lo"] <= r[pick]["f1"]["mean"] <= r[pick]["f1"]["hi"]
        assert r["oracle"]["f1"]["mean"] >= r["independent"]["f1"]["mean"]  # picked on test F1: an upper bound
        # set against the best zoo harness for question answering (picked on the score split), paired
        assert r["zoo_pick"]["name"] in ("retrieve_read", "iterative_search") and {"em", "f1"} <= r["zoo"].keys()
        diff = r["sequential"]["f1"]["mean"] - r["zoo"]["f1"]["mean"]
        assert abs(r["sequential_minus_zoo"]["f1"]["mean"] - diff) < 1e-9
        assert set(r["nearest_zoo"]) == {"seed", "sequential", "independent", "oracle"}
        assert all(0.0 <= v["ratio"] <= 1.0 for v in r["nearest_zoo"].values())
    assert len({json.dumps(r["zoo_pick"]) for r in mq.values()}) == 1  # one pick for every arm, kept in ret/
    assert json.loads((ret / "musique_zoo.json").read_text())["name"] == next(iter(mq.values()))["zoo_pick"]["name"]
    # the proposer's samples went through the hf: engine behind the response cache
    assert any(f.name == "responses.sqlite" for f in (tmp_path / "cache").iterdir())

    # a second run skips what is done; a forced stage with a spent budget ends partial, with counts
    def again(*args: str) -> tuple[dict, str]:
        p = subprocess.run([sys.executable, str(ROOT / "experiments" / "qwen12.py"), "run", "--model",
                            str(tmp_path / "w" / "model"), "--work", str(tmp_path / "w"), "--engine", "hf", "--solver",
                            "python:harnesslearn.transfer.smoke:solver", "--families", "gcd", "--sftdata.splits.n-feedback", "2",
                            *args], capture_output=True, text=True, env=env, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout), p.stderr

    small = ("--eval.k", "1", "--eval.splits.n-feedback", "2", "--eval.splits.n-score", "2", "--eval.splits.n-test", "2")
    _, err = again("--stages", "eval", "--eval.families", "gcd", *small)  # the smoke's family and splits: every row
    # it asks for is there (a row is keyed by its arm, family, splits, problem seed, parent and rounds)
    assert "eval: done earlier, skipped" in err
    # revising the zoo pick: the parent is the family's best zoo harness, two sequential rounds; new rows beside the
    # old ones, each with its parent, the rounds' trace and every proposal's nearest known source
    again("--stages", "eval", "--eval.families", "gcd", "--eval.parent", "zoo", "--eval.rounds", "2",
          "--eval.arms", "base,rl", "--force", *small)
    rows = [json.loads(line) for line in (ret / "eval_rows.jsonl").read_text().splitlines()]
    zp = [r for r in rows if r.get("parent") == "zoo"]
    assert sorted(r["arm"] for r in zp) == ["base", "rl"] and len(rows) == 9
    for r in zp:
        assert r["parent_name"] == "zoo:interpreter_loop" and r["parent_test_J"] == 1.0 and r["rounds"] == 2
        assert [t["round"] for t in r["round_trace"]] == [1, 2] and r["proposals"] == 2
        assert all(("nearest" in c) == c["valid"] for c in r["candidates"])
        assert r["picked"] == "parent" or r["score_J"] > r["parent_score_J"]
    status, _ = again("--stages", "sftdata", "--force", "--sftdata.contexts", "3", "--sftdata.minutes", "0.0001")
    s = status["sftdata"]
    assert s["state"] == "partial" and s["finished"] == 0 and s["cancelled"] + s["not_started"] == 3, s

    # a partial sftdata resumes: finished contexts are not redone, their rows are kept
    status, _ = again("--stages", "sftdata", "--sftdata.contexts", "1", "--sftdata.minutes", "3")
    assert status["sftdata"]["state"] == "done" and status["sftdata"]["jobs"] == 1, status["sftdata"]
    rows_before = (ret / "sft.jsonl").read_text()
    assert rows_before  # the zoo interpreter loop beat the seed: a kept row
    st = json.loads((ret / "status.json").read_text())
    st["sftdata"]["state"] = "partial"  # as if a stretch had been cut before the plan grew
    (ret / "status.json").write_text(json.dumps(st))
    status, _ = again("--stages", "sftdata", "--sftdata.contexts", "2", "--sftdata.minutes", "3")
    s = status["sftdata"]
    assert s["state"] == "done" and s["jobs"] == 1 and s["contexts_done"] == 2, s  # only the new context ran
    assert (ret / "sft.jsonl").read_text().startswith(rows_before)

    # what comes back from the device, and a fresh machine's restore of it
    out = collect(tmp_path / "w", tmp_path / "out")
    assert "results.tgz" in out and "sft_adapter.tar.00" in out and "grpo_state.tar.00" in out and len(out) <= 8
    names = restore(tmp_path / "again", tmp_path / "out")
    assert {"status.json", "eval_rows.jsonl", "sft_adapter", "grpo"} <= set(names)
    assert json.loads((tmp_path / "again" / "ret" / "grpo" / "state" / "state.json").read_text())["updates"] == 1

    # a second chain from the same SFT rows, its contexts started from a zoo harness (COMMANDS.md's recipe)
    from harnesslearn.transfer import smoke as smoke_mod

    restore(tmp_path / "z", ret, new_chain=True)
    (tmp_path / "smoke.json").write_text(json.dumps(smoke_mod.settings(tmp_path / "w").record()))
    p = subprocess.run([sys.executable, str(ROOT / "experiments" / "qwen12.py"), "run", "--config",
                        str(tmp_path / "smoke.json"), "--work", str(tmp_path / "z"), "--stages", "sft,grpo",
                        "--grpo.grpo.seed-harnesses", "zoo:interpreter_loop"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    z = json.loads(p.stdout)
    assert (z["sft"]["state"], z["grpo"]["state"]) == ("done", "done"), json.dumps(z)[-3000:]
    zret = tmp_path / "z" / "ret"
    assert json.loads((zret / "grpo.json").read_text())["start"] == "sft_adapter"  # not chain 1's state
    with gzip.open(zret / "rollouts.jsonl.gz", "rt") as fh:
        groups = [json.loads(line) for line in fh]
    assert groups and all("for _ in range(ATTEMPTS):" in g["prompt"] for g in groups)  # the loop is the parent


def zoo_row_near_copy(rows: list) -> bool:
    """The zoo arm's pick is the zoo's interpreter loop: its nearest zoo file is that one, a near-copy."""
    zoo = next(r for r in rows if r["arm"] == "zoo")
    return zoo["nearest_zoo"] == "interpreter_loop" and zoo["nearest_zoo_ratio"] >= 0.8


def test_restore_copies_a_committed_ret_folder(tmp_path: Path) -> None:
    """A plain copy of a ret folder (as committed in experiments/results/qwen/state) restores as is."""
    src = tmp_path / "state"
    (src / "grpo" / "state").mkdir(parents=True)
    (src / "sftdata_jobs.jsonl").write_text('{"family": "maze", "seed": 1, "kept": 0, "counts": {}}\n')
    (src / "grpo" / "state" / "state.json").write_text('{"updates": 3}')
    names = restore(tmp_path / "w", src)
    assert {"sftdata_jobs.jsonl", "grpo"} <= set(names)
    assert json.loads((tmp_path / "w" / "ret" / "grpo" / "state" / "state.json").read_text()) == {"updates": 3}


def test_restore_refuses_a_committed_state_whose_adapter_weights_are_kept_outside_git(tmp_path: Path) -> None:
    """state_zoo keeps its GRPO adapter's config and records in git, the 17.5 MB weights outside: a resume from
    it stops with one line and writes no ret folder; the same state with the weights (or a shipped adapter's
    pointer) restores."""
    src = tmp_path / "state_zoo"
    ad = src / "grpo" / "state" / "adapter"
    ad.mkdir(parents=True)
    (ad / "adapter_config.json").write_text("{}")
    (src / "grpo" / "state" / "state.json").write_text('{"updates": 4}')
    with pytest.raises(UserError, match="has no adapter_model.safetensors .kept outside git.*--new-chain"):
        restore(tmp_path / "w", src)
    assert not (tmp_path / "w").exists()
    (ad / "adapter_model.safetensors").write_bytes(b"weights")
    restore(tmp_path / "w", src)
    assert (tmp_path / "w" / "ret" / "grpo" / "state" / "adapter" / "adapter_model.safetensors").read_bytes() == b"weights"


def _ret_at(root: Path, updates: int, rows: int = 2) -> Path:
    ret = root / "ret"
    (ret / "grpo" / "state" / "adapter").mkdir(parents=True)
    (ret / "grpo" / "state" / "state.json").write_text(json.dumps({"updates": updates}))
    (ret / "grpo" / "state" / "adapter" / "adapter_model.safetensors").write_bytes(os.urandom(64))
    (ret / "status.json").write_text(json.dumps({"grpo": {"state": "partial", "steps": updates}}))
    with gzip.open(ret / "rollouts.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps({"step": k}) + "\n" for k in range(updates))
    (ret / "sftdata_jobs.jsonl").write_text("".join(json.dumps({"seed": k}) + "\n" for k in range(rows)))
    (root / "log.txt").write_text("a log that stays on the device\n")
    return ret


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_collect_sends_an_fp32_adapter_back_in_bf16_and_leaves_the_folder_as_it_was(tmp_path: Path) -> None:
    """The SFT stage saves its adapter in fp32 (35 MB for the 1.5B); collect packs a bf16 copy of it, so that it,
    the GRPO state and the kernel cache fit the 8 files and 64 MiB that come back from a device call. The folder
    on the machine keeps its fp32 weights; an adapter already in bf16 (the GRPO state's) travels as it is."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    ret = tmp_path / "w" / "ret"
    (ret / "sft_adapter").mkdir(parents=True)
    (ret / "grpo" / "state" / "adapter").mkdir(parents=True)
    (ret / "status.json").write_text("{}")
    gen = torch.Generator().manual_seed(0)
    fp32 = {"a.lora_A.weight": torch.randn(32, 256, generator=gen), "step": torch.tensor([7], dtype=torch.int64)}
    save_file(fp32, str(ret / "sft_adapter" / "adapter_model.safetensors"))
    (ret / "sft_adapter" / "adapter_config.json").write_text('{"r": 32}')
    bf16 = {"b.lora_B.weight": torch.randn(256, 32, generator=gen).to(torch.bfloat16)}
    save_file(bf16, str(ret / "grpo" / "state" / "adapter" / "adapter_model.safetensors"))
    grpo_bytes = (ret / "grpo" / "state" / "adapter" / "adapter_model.safetensors").read_bytes()
    sft_bytes = (ret / "sft_adapter" / "adapter_model.safetensors").read_bytes()

    out = collect(tmp_path / "w", tmp_path / "out")
    assert "sft_adapter.tar.00" in out and "grpo_state.tar.00" in out
    back = tmp_path / "back"
    for ad in ("sft_adapter", "grpo_state"):
        data = b"".join((tmp_path / "out" / f).read_bytes() for f in sorted(out) if f.startswith(ad + ".tar."))
        (tmp_path / f"{ad}.tar").write_bytes(data)
        with tarfile.open(tmp_path / f"{ad}.tar") as tf:
            tf.extractall(back, filter="data")
    got = load_file(str(back / "sft_adapter" / "adapter_model.safetensors"))
    assert got["a.lora_A.weight"].dtype == torch.bfloat16 and got["step"].dtype == torch.int64
    assert torch.equal(got["a.lora_A.weight"], fp32["a.lora_A.weight"].to(torch.bfloat16))
    assert (back / "sft_adapter" / "adapter_config.json").read_text() == '{"r": 32}'
    assert (back / "grpo" / "state" / "adapter" / "adapter_model.safetensors").read_bytes() == grpo_bytes
    assert (ret / "sft_adapter" / "adapter_model.safetensors").read_bytes() == sft_bytes  # the machine's copy
    assert not list((tmp_path / "w").glob(".*.bf16"))  # no scratch copy left behind


def _returned(tmp_path: Path, name: str, updates: int, rows: int = 2) -> Path:
    """What a stretch's watch brings back for a ret at ``updates``: collect's files as WORK.FILE, and two extras."""
    _ret_at(tmp_path / name, updates, rows)
    back = tmp_path / f"{name}_files_at"
    back.mkdir()
    for f in collect(tmp_path / name, tmp_path / f"{name}_out"):
        (back / f"q12w.{f}").write_bytes((tmp_path / f"{name}_out" / f).read_bytes())
    (back / "jobs.log").write_text(f"step {updates}\n")
    (back / "jitcache.tar").write_bytes(b"kernels")
    return back


def test_land_makes_a_returned_stretch_the_committed_state_and_refuses_a_stale_one(tmp_path: Path) -> None:
    """``land`` takes the files a stretch brought back (named WORK.FILE, as watch.sh packs them) and replaces
    the committed state whole with them, without the device's log.txt; the raw logs go to the notes folder,
    jitcache.tar to the keep folder. A return behind the committed state (an earlier GRPO update, fewer rows in an
    append-only log, a committed file missing) is refused with one line and the state is left byte-identical;
    so is a folder without results or with a part missing."""
    back = _returned(tmp_path, "w", 5)
    state = tmp_path / "repo" / "state"
    state.parent.mkdir(parents=True)
    _ret_at(tmp_path / "old", 3).rename(state)
    bench = tmp_path / "bench.json"  # the committed benchmark rows; the device sent one back, updated
    old_row = {"engine": "openai", "model": "m", "device": "H100", "label": "x", "tok": 1}
    kept_row = {"engine": "vllm", "model": "m", "device": "H200", "label": "", "tok": 2}
    bench.write_text(json.dumps([old_row, kept_row]))
    (back / "gpu_eval.json").write_text(json.dumps([{**old_row, "tok": 3}, {**old_row, "label": "y", "tok": 4}]))
    out = land(back, state, logs=tmp_path / "notes", keep=tmp_path / "keep", bench=bench)
    assert out["grpo_updates"] == {"before": 3, "after": 5} and out["forced"] is None
    assert [r["tok"] for r in json.loads(bench.read_text())] == [3, 2, 4]  # replaced in place, kept, appended
    assert json.loads((tmp_path / "notes" / "gpu_eval.json").read_text())[0]["tok"] == 3  # the raw file as it came
    assert _snapshot(state) == _snapshot(tmp_path / "w" / "ret")  # replaced whole
    assert not (state / "log.txt").exists()
    assert (tmp_path / "notes" / "jobs.log").read_text() == "step 5\n"
    assert (tmp_path / "keep" / "jitcache.tar").read_bytes() == b"kernels"
    assert sorted(p.name for p in state.parent.iterdir()) == ["state"]  # no temporary folder left
    landed = _snapshot(state)

    stale = _returned(tmp_path, "stale", 4)
    with pytest.raises(UserError, match="update 4, behind the committed one .5."):
        land(stale, state)
    fewer = _returned(tmp_path, "fewer", 5, rows=1)
    with pytest.raises(UserError, match="its sftdata_jobs.jsonl has 1 rows, the committed one 2"):
        land(fewer, state)
    (state / "eval_rows.jsonl").write_text("{}\n")  # as if an eval stretch had landed since
    landed = _snapshot(state)
    with pytest.raises(UserError, match="it has no eval_rows.jsonl"):
        land(back, state)
    cut = tmp_path / "cut"
    cut.mkdir()
    for f in back.iterdir():
        if not f.name.endswith(".tar.00"):  # an adapter part left out
            (cut / f.name).write_bytes(f.read_bytes())
    (cut / "q12w.grpo_state.tar.00").write_bytes((back / "q12w.grpo_state.tar.00").read_bytes()[:5000])
    with pytest.raises(UserError, match="do not unpack"):
        land(cut, state)
    (back / "gpu_eval.json").write_text("{cut")  # a benchmark file cut on its way back: nothing is touched
    bench_before = bench.read_bytes()
    (state / "eval_rows.jsonl").unlink()
    landed = _snapshot(state)
    with pytest.raises(UserError, match="not a readable gpu_eval.json"):
        land(back, state, bench=bench)
    assert bench.read_bytes() == bench_before and _snapshot(state) == landed
    assert sorted(p.name for p in state.parent.iterdir()) == ["state"]

    out = land(stale, state, force=True)  # deliberately
    assert "behind" in out["forced"] and json.loads((state / "grpo" / "state" / "state.json").read_text()) == {
        "updates": 4}

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    script = Path(__file__).resolve().parents[2] / "experiments" / "qwen12.py"
    before = _snapshot(state)
    p = subprocess.run([sys.executable, str(script), "land", "--from", str(tmp_path / "nothing"), "--state",
                        str(state)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "no q12w.results.tgz" in p.stderr, p.stderr
    assert p.stdout == "" and _snapshot(state) == before


def test_land_takes_a_return_split_over_several_calls(tmp_path: Path) -> None:
    """Two device calls brought back parts of one stretch (the job's state in the first, a benchmark row and the
    kernel cache in the second): ``land`` takes both folders, a later folder's file replacing the same name in an
    earlier one, benchmark rows merged; the command line repeats --from. A folder that is not one is refused before anything is touched."""
    first = _returned(tmp_path, "w", 6)
    (first / "jitcache.tar").unlink()
    row = {"engine": "openai", "model": "m", "device": "H100"}
    (first / "gpu_eval.json").write_text(json.dumps([{**row, "label": "one", "tok": 1}, {**row, "label": "two", "tok": 2}]))
    second = tmp_path / "second"
    second.mkdir()
    (second / "jobs.log").write_text("later\n")
    (second / "jitcache.tar").write_bytes(b"kernels 2")
    (second / "gpu_eval.json").write_text(json.dumps([{"engine": "openai", "model": "m", "device": "H100",
                                                       "label": "two", "tok": 9}]))
    state = tmp_path / "repo" / "state"
    state.parent.mkdir(parents=True)
    _ret_at(tmp_path / "old", 3).rename(state)
    before = _snapshot(state)
    with pytest.raises(UserError, match="nowhere: not a folder of returned files"):
        land([first, tmp_path / "nowhere"], state)
    assert _snapshot(state) == before
    bench = tmp_path / "bench.json"
    bench.write_text("[]")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    script = Path(__file__).resolve().parents[2] / "experiments" / "qwen12.py"
    p = subprocess.run([sys.executable, str(script), "land", "--from", str(first), "--from", str(second), "--state",
                        str(state), "--logs", str(tmp_path / "notes"), "--keep", str(tmp_path / "keep"), "--bench",
                        str(bench)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["grpo_updates"] == {"before": 3, "after": 6}
    assert _snapshot(state) == _snapshot(tmp_path / "w" / "ret")
    assert (tmp_path / "notes" / "jobs.log").read_text() == "later\n"  # the later folder's
    assert (tmp_path / "keep" / "jitcache.tar").read_bytes() == b"kernels 2"
    # benchmark rows of every call add up (stretch 12 lost call 1's rows to call 2's file); a later row replaces its own
    assert [(r["label"], r["tok"]) for r in json.loads(bench.read_text())] == [("one", 1), ("two", 9)]
    assert [r["label"] for r in json.loads((tmp_path / "notes" / "gpu_eval.json").read_text())] == ["one", "two"]
    assert sorted(x.name for x in state.parent.iterdir()) == ["state"]


def test_land_interrupted_in_its_swap_puts_the_old_state_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C between the two renames of the swap: the committed state is put back; a left-over .before folder
    (a crash there) makes the next land refuse rather than delete it."""
    back = _returned(tmp_path, "w", 5)
    state = tmp_path / "repo" / "state"
    state.parent.mkdir(parents=True)
    _ret_at(tmp_path / "old", 3).rename(state)
    before = _snapshot(state)
    real = Path.rename
    cut = []

    def rename(self: Path, target: Path) -> Path:
        if Path(target) == state and not cut:  # the new state's move in: interrupted once
            cut.append(self)
            raise KeyboardInterrupt
        return real(self, target)
    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        land(back, state)
    monkeypatch.setattr(Path, "rename", real)
    assert cut and cut[0].name == "ret" and _snapshot(state) == before and sorted(p.name for p in state.parent.iterdir()) == ["state"]
    state.rename(state.parent / ".state.before")  # as a crash in the swap would leave it
    with pytest.raises(UserError, match="an earlier land was cut during its swap"):
        land(back, state)
    assert (state.parent / ".state.before").is_dir()


def test_the_musique_zoo_pick_is_made_once_kept_in_ret_and_never_from_a_failed_evaluation(tmp_path: Path) -> None:
    """The best QA zoo harness on the score split is picked once and kept (ret/musique_zoo.json): an arm that
    finishes in a later stretch is set against the same pick; an evaluation with infrastructure failures makes
    no pick (InfraError: the arm is retried) rather than a pick from a partial J."""
    from types import SimpleNamespace

    from harnesslearn.errors import InfraError
    from harnesslearn.tasks import load_task
    from harnesslearn.transfer.musique import zoo_pick

    rows = [{"id": f"m{i}", "question": f"Which number is lucky {i}?", "answers": ["6"],
             "paragraphs": [{"title": "Luck", "text": f"The lucky number {i} is 6."}]} for i in range(80)]
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = load_task(f"musique:{data}")
    s = TransferSettings()
    calls: list[str] = []

    def shared_with(js: dict[str, float], infra: int = 0):  # type: ignore[no-untyped-def]
        async def shared(h, task, split, n, seed, ex, budgets):  # type: ignore[no-untyped-def]
            calls.append(h.name)
            return SimpleNamespace(J=js[h.name], infra_failures=infra)
        return shared

    rt, path = SimpleNamespace(sandbox=None), tmp_path / "ret" / "musique_zoo.json"
    path.parent.mkdir()
    with pytest.raises(InfraError, match="infrastructure failure"):
        asyncio.run(zoo_pick(s, rt, task, shared_with({"zoo:retrieve_read": 0.2, "zoo:iterative_search": 0.3}, 1),
                             path))
    assert not path.exists()
    name, h, j = asyncio.run(zoo_pick(s, rt, task, shared_with({"zoo:retrieve_read": 0.2,
                                                                 "zoo:iterative_search": 0.3}), path))
    assert (name, h.name, j) == ("iterative_search", "zoo:iterative_search", 0.3)
    assert json.loads(path.read_text())["name"] == "iterative_search"
    calls.clear()  # a later stretch: the kept pick, whatever a new evaluation would say, and nothing run
    again = asyncio.run(zoo_pick(s, rt, task, shared_with({"zoo:retrieve_read": 0.9, "zoo:iterative_search": 0.1}),
                                 path))
    assert again[0] == "iterative_search" and calls == []
    other = s.model_copy(update={"musique": s.musique.model_copy(update={"seed": 7})})  # another stage: picked anew
    assert asyncio.run(zoo_pick(other, rt, task, shared_with({"zoo:retrieve_read": 0.9, "zoo:iterative_search": 0.1}),
                                path))[0] == "retrieve_read"


def test_restore_new_chain_keeps_only_the_sft_data_and_grpo_needs_an_sft_adapter(tmp_path: Path) -> None:
    """A second chain (e.g. zoo-seeded contexts) starts from the first one's SFT rows and nothing else: no GRPO
    state, adapter or eval row of the first chain is taken for its own. A GRPO stage with no SFT adapter and no
    saved state refuses to train from the base model silently."""
    from harnesslearn.transfer import stages

    src = tmp_path / "state"
    (src / "grpo" / "state" / "adapter").mkdir(parents=True)
    (src / "grpo" / "state" / "state.json").write_text('{"updates": 66}')
    for name in ("sft.jsonl", "sftdata.json", "sftdata_jobs.jsonl", "sft.json", "grpo.json", "eval_rows.jsonl"):
        (src / name).write_text(f"{name}\n")
    (src / "status.json").write_text(json.dumps({"sftdata": {"state": "partial", "kept": 187},
                                                 "sft": {"state": "done"}, "grpo": {"state": "partial"}}))
    names = restore(tmp_path / "w2", src, new_chain=True)
    ret = tmp_path / "w2" / "ret"
    assert names == ["sft.jsonl", "sftdata.json", "sftdata_jobs.jsonl", "status.json"]
    assert (ret / "sft.jsonl").read_text() == "sft.jsonl\n"
    assert json.loads((ret / "status.json").read_text()) == {"sftdata": {"state": "partial", "kept": 187}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state", "w2"]  # no temporary folder left behind
    with pytest.raises(UserError, match="not empty: a new chain needs a fresh --work"):
        restore(tmp_path / "w2", src, new_chain=True)
    (src / "sft.jsonl").unlink()
    with pytest.raises(UserError, match="no sft.jsonl"):
        restore(tmp_path / "w3", src, new_chain=True)
    assert not (tmp_path / "w3" / "ret").exists()
    (src / "sft.jsonl").write_text("sft.jsonl\n")
    (src / "status.json").write_text("{not json")
    with pytest.raises(UserError, match="status.json is not JSON"):
        restore(tmp_path / "w3", src, new_chain=True)
    assert not (tmp_path / "w3" / "ret").exists()  # nothing half-written: a retry is not refused
    (src / "status.json").write_text("{}")
    assert restore(tmp_path / "w3", src, new_chain=True) == ["sft.jsonl", "sftdata.json", "sftdata_jobs.jsonl"]
    assert [p.name for p in (tmp_path / "w3").iterdir()] == ["ret"]  # no temporary folder left behind
    returned = tmp_path / "returned"  # what collect() brought back from a device: results.tgz and adapter parts
    returned.mkdir()
    with tarfile.open(returned / "results.tgz", "w:gz") as tf:
        for name in ("sft.jsonl", "eval_rows.jsonl", "status.json", "sft.json"):
            tf.add(src / name, arcname=name)
    (returned / "grpo_state.tar.00").write_bytes(b"not read")
    assert restore(tmp_path / "w5", returned, new_chain=True) == ["sft.jsonl"]
    p = subprocess.run([sys.executable, str(ROOT / "experiments" / "qwen12.py"), "restore", "--work", str(tmp_path / "w4"),
                        "--from", str(tmp_path / "missing"), "--new-chain"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.strip().endswith("no such folder to restore from"), p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "w4").exists()

    s = TransferSettings(work=str(tmp_path / "w2"), model="unused", cpu=True)
    with pytest.raises(UserError, match="run the sft stage first"):
        stages.grpo(s, ret, tmp_path / "w2")


def test_a_done_row_stage_still_runs_the_rows_its_arms_ask_for_and_are_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Stretch 11 asked a done eval for three more arms and got 'done earlier, skipped' (a device call lost): eval and
    musique resume by rows, so a done one is skipped only when every (arm, family) row (musique: arm, task) it is asked
    for is there; other stages stay skipped once done."""
    from harnesslearn.settings.load import load
    from harnesslearn.transfer import musique, pipeline, stages

    ran: list[str] = []

    async def fake_eval(s, ret, work):  # type: ignore[no-untyped-def]
        ran.append("eval:" + ",".join(s.eval.arms))
        return {"state": "done"}

    async def fake_musique(s, ret, work):  # type: ignore[no-untyped-def]
        ran.append("musique:" + ",".join(s.musique.arms))
        return {"state": "done"}

    monkeypatch.setattr(stages, "evaluate_arms", fake_eval)
    monkeypatch.setattr(musique, "musique", fake_musique)
    monkeypatch.setattr(stages, "sft", lambda s, ret, work: ran.append("sft") or {"state": "done"})
    ret = tmp_path / "w" / "ret"
    ret.mkdir(parents=True)
    (ret / "status.json").write_text(json.dumps({n: {"state": "done"} for n in ("sft", "eval", "musique")}))
    e = TransferSettings().eval  # a row is keyed by its splits and problem seed too (and a proposer row's parent and
    # rounds: the minimal seed and one round when it has none, as rows before them)
    (ret / "eval_rows.jsonl").write_text("".join(json.dumps({"arm": a, "family": f, "n_score": e.splits.n_score,
                                                             "eval_seed": e.seed}) + "\n"
                                                  for a in ("zoo", "base", "rl") for f in ("gcd", "bf")))
    (ret / "musique_rows.jsonl").write_text(json.dumps(musique.key_fields(TransferSettings(), "base", "musique")) + "\n")

    def run(*over: str) -> None:
        pipeline.run(load(TransferSettings, overrides=[f"work={tmp_path / 'w'}", "model=m", "eval.families=gcd,bf",
                                                       *over]))

    run("stages=sft,eval,musique", "eval.arms=zoo,base,rl", "musique.arms=base")
    assert ran == [] and capsys.readouterr().err.count("done earlier, skipped") == 3
    run("stages=sft,eval,musique", "eval.arms=zoo,base,sft,rl", "musique.arms=base,rl")
    assert ran == ["eval:zoo,base,sft,rl", "musique:base,rl"]
    assert "eval: done earlier, but 2 of the rows its arms ask for are missing: running them" in capsys.readouterr().err


def test_land_commits_a_shipped_adapters_weights_once_and_restore_puts_them_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A returned GRPO state whose adapter is byte for byte the one the package ships (the finished chain's) is
    landed with a pointer in its place (the tree a device call carries stays within its 64 MiB), and ``restore``
    of that state writes the same weights back."""
    from harnesslearn import adapters

    real = _ret_at

    def with_shipped(root: Path, updates: int, rows: int = 2) -> Path:
        ret = real(root, updates, rows)
        shipped = Path(adapters.resolve("qwen2.5-coder-1.5b-instruct", "rl")) / adapters.WEIGHTS
        (ret / "grpo" / "state" / "adapter" / adapters.WEIGHTS).write_bytes(shipped.read_bytes())
        return ret

    monkeypatch.setitem(globals(), "_ret_at", with_shipped)
    back = _returned(tmp_path, "w", 80)
    state = tmp_path / "state"
    land(back, state)
    ad = state / "grpo" / "state" / "adapter"
    assert sorted(p.name for p in ad.iterdir()) == [adapters.POINTER]
    restore(tmp_path / "again", state)
    got = tmp_path / "again" / "ret" / "grpo" / "state" / "adapter" / adapters.WEIGHTS
    assert got.read_bytes() == (tmp_path / "w" / "ret" / "grpo" / "state" / "adapter" / adapters.WEIGHTS).read_bytes()
