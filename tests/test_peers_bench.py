"""The pure parts of benchmarks/peers (no model, no sandbox): accounting, the score-split best
tracker, what a peer may see of an evaluation, OpenEvolve's diff-log counts, the table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers"))

from common import (  # noqa: E402
    TABLE_HEAD,
    BestTracker,
    Ledger,
    gepa_validity,
    mean_by_system,
    peer_view,
    render_table,
    summarise_oe_diff_log,
)


def test_tracker_counts_only_whole_score_split_and_strict_improvements() -> None:
    t = BestTracker(n_score=8)
    assert t.record(0, 0.25, "seed", "src0", 8)
    assert not t.record(1, 0.9, "mini", "srcm", 3)  # a minibatch is not a score-split J
    assert not t.record(1, 0.25, "tie", "src1", 8)  # a tie keeps the earlier harness
    assert not t.record(2, None, "broken", "src2", 8)
    assert t.record(3, 0.5, "better", "src3", 8)
    assert t.points == [(0, 0.25, "seed"), (3, 0.5, "better")]
    assert t.best_id == "better" and t.sources["better"] == "src3"


def test_peer_view_shows_gold_on_feedback_only_and_refuses_test() -> None:
    row = {"id": "p1", "score": 0.0, "status": "ok", "answer": "4", "question": "2+3?", "gold": "5",
           "error": None, "model_calls": [{"prompt": "Q", "completion": "4"}]}
    fb = peer_view("feedback", [row])[0]
    assert fb["gold"] == "5" and fb["question"] == "2+3?" and fb["calls"][0]["completion"] == "4"
    sc = peer_view("score", [row])[0]
    assert set(sc) == {"id", "score", "status"}
    with pytest.raises(ValueError):
        peer_view("test", [row])


def test_oe_diff_log_counts_skipped_blocks() -> None:
    events = [
        {"event": "extract", "blocks": 2}, {"event": "apply", "blocks": 2, "applied": 1, "changed": True},
        {"event": "extract", "blocks": 1}, {"event": "apply", "blocks": 1, "applied": 0, "changed": False},
        {"event": "extract", "error": "Unmatched SEARCH/REPLACE delimiter"},
        {"event": "extract", "blocks": 0},
        {"event": "extract", "blocks": 1}, {"event": "apply", "blocks": 1, "applied": 1, "changed": True},
        {"event": "extract", "blocks": 1}, {"event": "apply", "blocks": 1, "applied": 1, "changed": False},
    ]
    c = summarise_oe_diff_log(json.dumps(e) for e in events)
    assert c["responses"] == 6 and c["malformed"] == 1 and c["no_blocks"] == 1
    assert c["blocks"] == 5 and c["blocks_skipped"] == 2
    assert c["children_dropped_no_match"] == 1 and c["children_with_skipped_blocks"] == 1
    assert c["children_all_blocks_matched"] == 1 and c["children_unchanged"] == 1


def test_table_says_why_instead_of_a_number() -> None:
    led = Ledger("gepa")
    led.add_proposer(100, 50, 1.0)
    led.add_evaluation(8, 400, 8, 2.0)
    ok = {"task": "rg:gcd", "seed": 0, "system": "gepa", "ledger": led.to_json(), "score_J": 0.5,
          "test_J": 0.5, "seed_test_J": 0.25, "test_ci": {"mean": 0.5, "lo": 0.2, "hi": 0.8},
          "seed_test_ci": {"mean": 0.25, "lo": 0.0, "hi": 0.5}, "validity": {"proposals": 1, "valid": 1}, "wall_s": 3}
    bad = {"task": "rg:gcd", "seed": 0, "system": "openevolve", "error": "runner exited 1: boom",
           "ledger": Ledger("openevolve").to_json()}
    md = render_table([ok, bad])
    assert "0.500 [0.20, 0.80]" in md and "| 1 | 8 | 150 / 400 |" in md
    assert "not run as intended: runner exited 1: boom" in md
    m = mean_by_system([ok, bad])
    assert m["gepa"]["mean_gain"] == pytest.approx(0.25) and "openevolve" not in m
    assert m["gepa"]["zoo_runs"] == 0
    zoo = {**ok, "system": "zoo", "test_J": 0.75}
    m = mean_by_system([ok, bad, zoo])
    assert m["gepa"]["minus_zoo"] == pytest.approx(-0.25) and (m["gepa"]["above_zoo"], m["gepa"]["zoo_runs"]) == (0, 1)
    assert render_table([bad]).splitlines()[-1].count("|") == TABLE_HEAD.splitlines()[0].count("|")


def test_gepa_validity_counts_a_whitespace_copy_as_unchanged() -> None:
    seed = {"id": "s", "source": "def solve(model, question):\n    return model(question)\n", "invalid_reason": None}
    same = {"id": "t", "source": "def solve(model, question):\n    return model(question)", "invalid_reason": None}
    new = {"id": "n", "source": "def solve(model, question):\n    return 'x'", "invalid_reason": None}
    bad = {"id": "b", "source": "def solve(:", "invalid_reason": "syntax_error"}
    props = [{"harness_id": "t"}, {"harness_id": "n"}, {"harness_id": "b"}, {"evaluated": False}]
    v = gepa_validity(props, [seed, same, new, bad], failed_calls=1)
    assert v["proposals"] == 4 and v["valid"] == 1
    assert v["note"] == "1 not a harness, 1 unchanged, 1 not evaluated, 1 failed calls"


def test_runs_recorded_before_the_zoo_measure_get_it_when_loaded(tmp_path: Path) -> None:
    import run  # benchmarks/peers/run.py

    from harnesslearn import zoo

    runs = [{"task": "rg:gcd", "seed": 0, "system": "openevolve", "test_J": 0.5}]
    (tmp_path / "results.json").write_text(json.dumps({"meta": {}, "runs": runs, "harnesses": {
        "rg:gcd|0|openevolve": zoo.source("reason_extract")}}))
    _, done = run.load_rows(tmp_path)
    assert done[("rg:gcd", 0, "openevolve")]["returned_nearest_zoo"] == {"name": "reason_extract", "ratio": 1.0}


def test_a_rebuild_classifies_every_valid_proposal_and_a_plain_load_does_not(tmp_path: Path) -> None:
    """``--from-partial`` (``load_rows(proposed=True)``) counts what a run's valid, distinct harnesses are: zoo
    near-copies, and the others by what they do with the solver; the seed (the first score-split point) and
    invalid harnesses left out. A plain load (``--carry``, the summary) does not pay for it."""
    import run  # benchmarks/peers/run.py

    from harnesslearn import zoo

    seed = "def solve(model, question):\n    return model(question).strip()\n"
    program = ("def solve(model, question):\n    reply = model.generate([{'role': 'user', 'content': question}])[0]\n"
               "    return model.python(reply).strip()\n")
    computes = "import math\n\ndef solve(model, question):\n    return str(math.gcd(4, 6))\n"
    evaluated = [{"id": "s", "invalid_reason": None, "source": seed},
                 {"id": "z", "invalid_reason": None, "source": zoo.source("interpreter_loop")},
                 {"id": "p", "invalid_reason": None, "source": program},
                 {"id": "c", "invalid_reason": None, "source": computes},
                 {"id": "x", "invalid_reason": "syntax_error", "source": "def solve(:\n"}]
    row = {"task": "rg:gcd", "seed": 0, "system": "hl-sequential", "test_J": 0.5,
           "score_best_points": [[0, 0.25, "s"], [4, 0.5, "p"]],
           "peer": {"adapt": {"proposals": 4, "valid_proposals": 3, "invalid_reasons": {"syntax_error": 1}}}}
    (tmp_path / "results.json").write_text(json.dumps({"meta": {}, "runs": [row], "harnesses": {
        "rg:gcd|0|hl-sequential": program}}))
    (tmp_path / "harnesses").mkdir()
    (tmp_path / "harnesses" / "rg_gcd-s0-hl-sequential.json").write_text(json.dumps({"harnesses": evaluated}))
    assert "proposed" not in run.load_rows(tmp_path)[1][("rg:gcd", 0, "hl-sequential")]
    got = run.load_rows(tmp_path, proposed=True)[1][("rg:gcd", 0, "hl-sequential")]["proposed"]
    assert got == {"zoo_copy": 1, "computes": 1, "solver_program": 1, "prompt_level": 0}


def test_carry_reuses_finished_runs_except_rerun_systems_and_refuses_other_settings(tmp_path: Path) -> None:
    import run  # benchmarks/peers/run.py

    now = {k: 1 for k in run.SAME_SETTINGS}
    runs = [{"task": "rg:gcd", "seed": 0, "system": s, "error": "runner exited 1: boom"}
            for s in ("gepa", "openevolve", "hl-sequential")]
    runs.append({"task": "rg:maze", "seed": 0, "system": "gepa", "error": "not run: stopped"})
    (tmp_path / "results.json").write_text(json.dumps({"meta": now, "runs": runs, "harnesses": {}}))
    kept = run.carried_runs(tmp_path, now, rerun="hl-sequential")
    assert sorted(k[2] for k in kept) == ["gepa", "openevolve"]
    assert len(run.carried_runs(tmp_path, now)) == 3
    with pytest.raises(SystemExit, match="settings differ from this run: model"):
        run.carried_runs(tmp_path, {**now, "model": 2})
    with pytest.raises(SystemExit, match="settings differ from this run: prompts"):  # our prompts' text changed
        run.carried_runs(tmp_path, {**now, "prompts": 2})


def test_first_systems_start_before_the_others_and_the_outputs_keep_the_plan_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--first (for a stretch that may be cut: the runs an issue needs land before the optional ones): with one run
    in flight the runs of the named systems start first, each group in plan order, a carried run starts nowhere,
    and results.json keeps the plan's order. A --first system that --systems does not run is a one-line error."""
    import asyncio
    import subprocess

    import run  # benchmarks/peers/run.py

    started: list[tuple[str, int]] = []

    class OneAtATime:  # the driver's interface, answering at once; records the order runs start in
        def __init__(self, *a: object) -> None:
            self.busy = 0

        async def start(self) -> None: ...

        async def close(self) -> None: ...

        async def one(self, system: str, task: object, seed: int) -> dict[str, object]:
            self.busy += 1
            assert self.busy == 1  # --parallel 1
            started.append((system, seed))
            await asyncio.sleep(0)
            self.busy -= 1
            # a failed run is finished (a carry keeps it); one "not run" is not
            failed = (system, seed) == ("zoo", 1)
            return {"task": task.spec, "seed": seed, "system": system,  # type: ignore[attr-defined]
                    "error": "runner exited 1: fake" if failed else "not run: fake"}

    monkeypatch.setattr(run, "Driver", OneAtATime)
    monkeypatch.setattr(run, "machine", lambda: "test machine")
    monkeypatch.setenv("HARNESSLEARN_CACHE", "0")  # main sets it where unset: undone after the test
    common = ["--server", "http://127.0.0.1:9/v1", "--tasks", "rg:gcd", "--seeds", "2",
              "--systems", "hl-sequential,hl-independent,zoo", "--parallel", "1"]
    assert run.main([*common, "--out", str(tmp_path / "a")]) == 0
    assert started == [("hl-sequential", 0), ("hl-independent", 0), ("zoo", 0),
                       ("hl-sequential", 1), ("hl-independent", 1), ("zoo", 1)]
    started.clear()
    assert run.main([*common, "--first", "zoo,hl-independent", "--carry", str(tmp_path / "a"),
                     "--out", str(tmp_path / "b")]) == 0
    assert started == [("hl-independent", 0), ("zoo", 0), ("hl-independent", 1),
                       ("hl-sequential", 0), ("hl-sequential", 1)]
    listed = json.loads((tmp_path / "b" / "results.json").read_text())["runs"]
    assert [(r["system"], r["seed"]) for r in listed] == [
        ("hl-sequential", 0), ("hl-independent", 0), ("zoo", 0),
        ("hl-sequential", 1), ("hl-independent", 1), ("zoo", 1)]
    assert listed[5]["carried_from"] == str(tmp_path / "a")
    bad = subprocess.run([sys.executable, str(Path(run.__file__)), *common, "--first", "gepa",
                          "--out", str(tmp_path / "c")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--first names systems that --systems does not run: ['gepa']" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "c").exists()


def test_a_run_records_the_digest_of_our_packaged_prompts() -> None:
    import argparse

    import run  # benchmarks/peers/run.py

    from harnesslearn.propose.prompt import packaged_digest

    args = argparse.Namespace(**{k: None for k in (
        "served_name", "server", "model", "trained_proposer", "memory_k", "proposer_calls", "candidates",
        "n_feedback", "n_score", "n_test", "temperature", "max_tokens", "timeout", "carry", "rerun", "executor",
        "concurrency", "tasks", "systems")}, seed0=0, seeds=1)
    assert run.meta(args, 0.0)["prompts"] == packaged_digest()


def test_a_plain_run_that_was_shown_the_memory_is_loaded_as_not_run(tmp_path: Path) -> None:
    """Rows of a system without the memory whose proposer saw memory entries (stretch 13's, before the fix) are
    not results: loaded, they are runs not run, so the tables leave them out and ``--carry`` runs them again."""
    import run  # benchmarks/peers/run.py

    now = {k: 1 for k in run.SAME_SETTINGS}

    def row(system: str, shown: list[str]) -> dict[str, object]:
        return {"task": "rg:gcd", "seed": 0, "system": system, "test_J": 0.9, "seed_test_J": 0.4, "score_J": 1.0,
                "peer": {"adapt": {"memory_shown": shown, "invalid_reasons": {}, "proposals": 1,
                                   "valid_proposals": 1}}}

    runs = [row("hl-sequential", ["e1"]), row("hl-sequential+mem", ["e1"]), row("hl-independent@trained", [])]
    (tmp_path / "results.json").write_text(json.dumps({"meta": now, "runs": runs, "harnesses": {}}))
    _, done = run.load_rows(tmp_path)
    bad = done[("rg:gcd", 0, "hl-sequential")]
    assert bad["error"].startswith("not run: its proposer was shown 1 harness-memory entries")
    assert bad["discarded"] == {"test_J": 0.9, "seed_test_J": 0.4, "score_J": 1.0}
    assert "error" not in done[("rg:gcd", 0, "hl-sequential+mem")]
    assert "error" not in done[("rg:gcd", 0, "hl-independent@trained")]
    assert sorted(k[2] for k in run.carried_runs(tmp_path, now)) == ["hl-independent@trained", "hl-sequential+mem"]


PROPOSER = '''
SEARCH_PART = "    return completion.strip()\\n"
EDITS = [
    "<<<<<<< SEARCH\\n" + SEARCH_PART + "=======\\n" + SEARCH_PART + ">>>>>>> REPLACE\\n",  # a no-op
    "<<<<<<< SEARCH\\n" + SEARCH_PART + "=======\\n\\n" + SEARCH_PART + "\\n>>>>>>> REPLACE\\n",  # blank lines only
    "<<<<<<< SEARCH\\n" + SEARCH_PART + "=======\\n    return completion.strip().rstrip('.')\\n>>>>>>> REPLACE\\n",
]

def propose(prompt, **kw):
    return EDITS.pop(0)
'''


@pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
def test_hl_validity_counts_no_op_and_blank_line_edits_as_no_change(tmp_path: Path) -> None:
    """A real adapt run whose proposer writes a no-op edit, a blank-lines-only edit and one real change:
    the benchmark reports one valid proposal of three, the other two as ``no_change``."""
    import os
    import subprocess

    from run import hl_validity

    (tmp_path / "models.py").write_text(PROPOSER + "\ndef solver(prompt, **kw):\n    return '7.'\n")
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "question": f"{i}?", "answer": "7"}) + "\n"
                                              for i in range(40)))
    rd = tmp_path / "rd"
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "adapt", "--task", f"jsonl:{tmp_path / 't.jsonl'}",
                        "--solver", f"python:{tmp_path / 'models.py'}:solver", "--proposer",
                        f"python:{tmp_path / 'models.py'}:propose", "--rounds", "1", "--candidates", "3",
                        "--n-feedback", "2", "--n-score", "3", "--n-test", "3", "--no-memory", "--json",
                        "--run-dir", str(rd)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HARNESSLEARN_PROGRESS": "0", "HARNESSLEARN_CACHE": "0"})
    assert p.returncode == 0, p.stderr[-2000:]
    v = hl_validity(json.loads(p.stdout))
    assert v["proposals"] == 3 and v["valid"] == 1, v
    assert v["note"] == "invalid: no_change 2", v


def test_hl_system_names_parse() -> None:
    from common import SYSTEMS, hl_system

    assert hl_system("hl-sequential") == ("sequential", False, False, "auto")
    assert hl_system("hl-independent+mem") == ("independent", True, False, "auto")
    assert hl_system("hl-sequential+mem@trained") == ("sequential", True, True, "auto")
    assert hl_system("hl-independent~file") == ("independent", False, False, "chat-file")
    assert hl_system("hl-sequential~prefill@trained") == ("sequential", False, True, "chat-prefill")
    with pytest.raises(ValueError, match="unknown form ~blocks"):
        hl_system("hl-sequential~blocks")
    assert all(hl_system(s)[0] in ("sequential", "independent") for s in SYSTEMS if s.startswith("hl-"))


@pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
def test_a_given_server_the_memory_rows_and_the_trained_proposer_reach_the_model(tmp_path: Path) -> None:
    """With --server the driver starts no model server of its own and asks the one given; a +mem system's
    proposer is shown the shipped memory (a plain one is not), and an @trained system asks the model named
    by --trained-proposer (a LoRA adapter's name on vLLM). The four runs go at once (--parallel 4). The fake server
    answers every call with an echo, so every proposal is invalid and every system returns its seed: only the
    wiring is under test."""
    import os
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fault_proxy import FakeOpenAIServer

    from harnesslearn.memory import shipped_copy

    # a default memory with entries, as on the device (where $HARNESSLEARN_CACHE_DIR is set, the default memory is
    # on): a plain system must not be shown it (stretch 13's plain rows were, from what earlier runs had stored)
    default_memory = tmp_path / "default-memory.sqlite"
    assert shipped_copy(default_memory) >= 2
    server = FakeOpenAIServer().start()
    try:
        out = tmp_path / "out"
        p = subprocess.run(
            [sys.executable, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers" / "run.py"),
             "--server", server.url, "--served-name", "base", "--trained-proposer", "rl",
             "--systems", "hl-sequential,hl-sequential+mem,hl-independent@trained,hl-sequential~file,"
             "hl-sequential~prefill@trained,zoo",
             "--tasks", "rg:gcd",
             "--proposer-calls", "1", "--n-feedback", "2", "--n-score", "2", "--n-test", "2", "--no-curve",
             "--parallel", "6", "--out", str(out)],
            capture_output=True, text=True, timeout=600,
            env={**os.environ, "HARNESSLEARN_PROGRESS": "0", "HARNESSLEARN_CACHE": "0",
                 "HARNESSLEARN_MEMORY": str(default_memory)})
        assert p.returncode == 0, p.stderr[-3000:]
        listed = json.loads((out / "results.json").read_text())["runs"]
        # all six ran at once (--parallel), each on its own budget; the table keeps the plan's order
        assert [r["system"] for r in listed] == ["hl-sequential", "hl-sequential+mem", "hl-independent@trained",
                                                 "hl-sequential~file", "hl-sequential~prefill@trained", "zoo"]
        runs = {r["system"]: r for r in listed}
        zoo = runs.pop("zoo")  # the best zoo harness on the score split: no proposer call, the zoo's file back
        assert "error" not in zoo and zoo["ledger"]["proposer_calls"] == 0 and zoo["ledger"]["evaluations"] == 5
        assert zoo["returned_nearest_zoo"]["ratio"] == 1.0 and zoo["validity"]["note"].startswith("no proposer: 5")
        assert all("error" not in r and r["ledger"]["proposer_calls"] == 1 for r in runs.values()), runs
        assert all(r["returned_nearest_zoo"]["ratio"] < 0.8 for r in runs.values())  # the seed came back
        md = (out / "results.md").read_text()
        assert "| best zoo harness (score split; no proposer) | 1 |" in md and " / 1) |" in md
        proposals = [r for r in server.requests if "## Current harness" in json.dumps(r)]  # the proposer's calls
        assert sorted(r["model"] for r in proposals) == ["base", "base", "base", "rl", "rl"]
        shown = ["Harnesses that worked on other tasks" in json.dumps(r) for r in proposals]
        assert sum(shown) == 1  # the +mem system's prompt alone
        assert [bool(r["peer"]["adapt"]["memory_shown"]) for r in listed[:5]] == [False, True, False, False, False]
        # ~prefill: the trained proposer's training format, the assistant turn opened with the edit block and
        # continued by the server (vLLM's continue_final_message); every other system closes its last turn
        prefilled = [r for r in proposals if r.get("continue_final_message")]
        assert len(prefilled) == 1 and prefilled[0]["model"] == "rl" and prefilled[0]["add_generation_prompt"] is False
        assert prefilled[0]["messages"][-1]["role"] == "assistant"
        assert "<<<<<<< SEARCH" in prefilled[0]["messages"][-1]["content"]
        assert [r["peer"]["adapt"]["proposer_format"] for r in listed[:5]] == [
            "chat-function", "chat-file", "chat-function", "chat-file", "chat-prefill"]
        # the whole file is asked for where the memory is shown (chat-file, the default there) and by ~file alone
        whole = ["the complete new harness file" in json.dumps(r) for r in proposals]
        assert sum(whole) == 2 and all(w for w, m in zip(whole, shown, strict=True) if m)
        assert {r["model"] for r in server.requests if r not in proposals} == {"base"}  # the solver
    finally:
        server.stop()


def test_the_service_keeps_runs_in_progress_apart_by_key() -> None:
    """Two runs in progress at once (--parallel): each proposer call is booked on its own run's budget, a request
    under one run's key for another system, or for a run not (or no longer) in progress, is refused with 409,
    and a run cannot begin twice."""
    import asyncio
    from unittest import mock

    from common import BestTracker, Ledger
    from service import RunContext, Service

    from harnesslearn.sandbox import Budgets
    from harnesslearn.tasks import load_task

    task = load_task("rg:gcd")
    svc = Service(asyncio.new_event_loop(), None, "http://127.0.0.1:9/v1", Budgets()).start()
    try:
        runs = [RunContext(system, task, seed, {"feedback": [], "score": []}, 1, Ledger(system), BestTracker(1))
                for system, seed in (("gepa", 0), ("gepa", 1))]
        for r in runs:
            svc.begin(r)
        with pytest.raises(RuntimeError, match="already in progress"):
            svc.begin(runs[0])
        assert runs[0].key != runs[1].key and svc.llm_base(runs[1]).endswith(f"/run/{runs[1].key}/llm/gepa/v1")
        ok = (200, b'{"usage": {"prompt_tokens": 3, "completion_tokens": 2}}')
        with mock.patch.object(Service, "_forward", return_value=ok):
            assert svc.handle_llm(runs[0].key, "gepa", "chat/completions", b"{}")[0] == 200
            assert svc.handle_llm(runs[0].key, "gepa", "chat/completions", b"{}")[0] == 429  # its budget of 1 spent
            assert svc.handle_llm(runs[1].key, "gepa", "chat/completions", b"{}")[0] == 200  # the other run's is not
            assert svc.handle_llm(runs[0].key, "openevolve", "chat/completions", b"{}")[0] == 409
            assert svc.handle_eval(runs[1].key, "openevolve", {"split": "score"})[0] == 409
            svc.end(runs[0])
            assert svc.handle_llm(runs[0].key, "gepa", "chat/completions", b"{}")[0] == 409
        assert [(r.ledger.proposer_calls, r.ledger.proposer_refused) for r in runs] == [(1, 1), (1, 0)]
    finally:
        svc.close()


@pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
def test_the_driver_runs_its_evaluations_through_trusted_shards_and_refuses_another_executor(tmp_path: Path) -> None:
    """--executor shards:2 (issue 31's engine setting): the harness runs go through two trusted processes, each
    calling the given server itself, and every system's runs and counts are what local gives; --executor ray is
    refused in one line before anything starts."""
    import os
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fault_proxy import FakeOpenAIServer

    run_py = str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers" / "run.py")
    env = {**os.environ, "HARNESSLEARN_PROGRESS": "0", "HARNESSLEARN_CACHE": "0"}
    server = FakeOpenAIServer().start()
    try:
        got = {}
        for executor in ("local", "shards:2"):
            out = tmp_path / executor.replace(":", "")
            p = subprocess.run(
                [sys.executable, run_py, "--server", server.url, "--served-name", "base", "--executor", executor,
                 "--concurrency", "4", "--systems", "hl-sequential,zoo", "--tasks", "rg:gcd", "--proposer-calls", "1",
                 "--n-feedback", "2", "--n-score", "2", "--n-test", "2", "--no-curve", "--out", str(out)],
                capture_output=True, text=True, timeout=600, env=env)
            assert p.returncode == 0, p.stderr[-3000:]
            data = json.loads((out / "results.json").read_text())
            assert data["meta"]["executor"] == executor
            got[executor] = {r["system"]: (r["ledger"]["evaluations"], r["ledger"]["proposer_calls"],
                                           r["returned_nearest_zoo"]["name"]) for r in data["runs"]}
        assert got["shards:2"] == got["local"] and got["local"]["zoo"][0] == 5
    finally:
        server.stop()
    bad = subprocess.run([sys.executable, run_py, "--server", "http://127.0.0.1:9/v1", "--executor", "ray",
                          "--out", str(tmp_path / "bad")], capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2 and "--executor must be local or shards:K" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "bad").exists()


def test_peers_install_offline_from_a_folder_of_wheels(tmp_path: Path) -> None:
    """--peer-wheels: on a machine without the internet a peer is installed from a folder of wheels with
    ``pip --target`` (no index), run by this interpreter with that folder on its path, and not again."""
    import base64
    import hashlib
    import subprocess
    import zipfile

    import run

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    files = {"gepa/__init__.py": "VERSION = 'offline'\n",
             "gepa-0.1.4.dist-info/METADATA": "Metadata-Version: 2.1\nName: gepa\nVersion: 0.1.4\n",
             "gepa-0.1.4.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
                     f"{len(t.encode())}\n" for n, t in files.items()) + "gepa-0.1.4.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheels / "gepa-0.1.4-py3-none-any.whl", "w") as z:
        for n, t in {**files, "gepa-0.1.4.dist-info/RECORD": record}.items():
            z.writestr(n, t)
    python, site = run.ensure_venv("gepa", tmp_path / "venvs", str(wheels))
    assert python == Path(sys.executable) and site == str(tmp_path / "venvs" / "gepa-site")
    out = subprocess.run([str(python), "-c", "import gepa; print(gepa.VERSION)"], capture_output=True, text=True,
                         env={"PYTHONPATH": site, "PATH": "/usr/bin:/bin"}, check=True)
    assert out.stdout.strip() == "offline"
    (wheels / "gepa-0.1.4-py3-none-any.whl").unlink()  # installed and pinned: not installed again
    assert run.ensure_venv("gepa", tmp_path / "venvs", str(wheels)) == (python, site)


def test_summary_compares_systems_on_the_cells_all_of_them_finished(tmp_path: Path) -> None:
    """The budget table of summary.py: means over the (task, seed) cells every system finished (a system's extra
    cells do not enter), paired against the best zoo harness and against our sequential system, zoo copies counted;
    what each returned harness does with the solver, and the cells where a peer beats each of ours; one folder per
    budget."""
    import summary  # benchmarks/peers/summary.py

    from harnesslearn import zoo

    def row(task: str, seed: int, system: str, test: float, **kw: object) -> dict[str, object]:
        return {"task": task, "seed": seed, "system": system, "test_J": test, "seed_test_J": 0.25,
                "ledger": {"proposer_calls": 0 if system == "zoo" else 16}, **kw}

    runs = [row("rg:gcd", 0, "gepa", 0.5), row("rg:gcd", 0, "zoo", 0.75), row("rg:gcd", 1, "gepa", 1.0),
            row("rg:gcd", 1, "zoo", 0.5), row("rg:maze", 0, "gepa", 0.0),  # maze: no zoo run, left out
            row("rg:maze", 0, "zoo", 0.0, error="not run: stopped"),
            *(row("rg:gcd", seed, "hl-sequential", test, peer={"adapt": {
                "proposals": 16, "valid_proposals": valid, "invalid_reasons": reasons, "memory_shown": [],
                "proposer_format": "chat-function"}})
              for seed, test, valid, reasons in ((0, 0.75, 9, {"no_blocks": 5, "no_change": 2}),
                                                 (1, 0.5, 4, {"no_change": 5, "no_blocks": 7}))),
            # the trained proposer: its proposals as --from-partial counts them (on one cell of the two)
            *(row("rg:gcd", seed, "hl-sequential@trained", test, peer={"adapt": {
                "proposals": 16, "valid_proposals": 8, "invalid_reasons": {}, "memory_shown": [],
                "proposer_format": "chat-function"}}, **kw)
              for seed, test, kw in ((0, 1.0, {"proposed": {"zoo_copy": 1, "computes": 0, "solver_program": 2,
                                                            "prompt_level": 1}}), (1, 0.5, {})))]
    for r in runs:
        r["ledger"] |= {"proposer_completion_tokens": 250 * r["ledger"]["proposer_calls"] if r["system"] != "gepa"
                        else 100 * r["ledger"]["proposer_calls"]}
        if r["system"] == "gepa":  # GEPA's validity as recorded (its own terms): not recounted on loading
            r["validity"] = {"proposals": 3, "valid": 1 if r["seed"] == 0 else 2, "note": "1 not a harness"}
    folders = []
    for calls in (16, 64):
        f = tmp_path / f"b{calls}"
        f.mkdir()
        (f / "results.json").write_text(json.dumps({"meta": {"proposer_calls": calls}, "runs": runs, "harnesses": {
            "rg:gcd|0|zoo": zoo.source("interpreter_loop"), "rg:gcd|1|zoo": zoo.source("interpreter_loop"),
            "rg:gcd|1|gepa": "from math import gcd\n\ndef solve(model, q):\n    return str(gcd(4, 6))\n",
            "rg:gcd|0|gepa": "def solve(model, q):\n    return model(q)\n",
            "rg:gcd|1|hl-sequential": "def solve(model, q):\n    return model(q)\n",
            "rg:gcd|0|hl-sequential@trained": zoo.source("interpreter_loop")}}))
        folders.append(str(f))
    assert summary.main([*reversed(folders), "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "summary.md").read_text()
    assert md.index("## 16 proposer calls") < md.index("## 64 proposer calls")
    assert "2 cells" in md and "Cells: rg:gcd (2)." in md
    assert ("| GEPA 0.1.4 | 0.750 [0.500, 1.000] | +0.500 [+0.250, +0.750] | +0.125 [-0.250, +0.500] | 1 / 2 |"
            " +0.125 [-0.250, +0.500] | 0 / 2 | 16.0 |") in md  # minus ours: 0.5 - 0.75 and 1.0 - 0.5
    assert "| harnesslearn sequential | 0.625 [0.500, 0.750] | +0.375 [+0.250, +0.500] | +0.000 [+0.000, +0.000] | 0 / 2 | n/a |" in md
    assert "| best zoo harness (score split; no proposer) | 0.625 [0.500, 0.750] |" in md and "| 2 / 2 | 0.0 |" in md
    # the trained proposer above the zoo on gcd seed 0 (1.0 against 0.75) with the zoo's own loop written back
    assert "| harnesslearn sequential, trained proposer | 0.750 [0.500, 1.000] |" in md
    assert "| +0.125 [+0.000, +0.250] | 1 / 2 (1 a zoo copy) | +0.125 [+0.000, +0.250] | 1 / 2 | 16.0 |" in md
    # solver use per budget (computes, solver_program, prompt_level): GEPA's maze run has no source recorded
    assert "| GEPA 0.1.4 | 1 | 0 | 1 | 1 | 0 | 1 |" in md
    assert "| best zoo harness (score split; no proposer) | 0 | 2 | 0 | 0 | 2 | 0 |" in md
    # the peer's win on gcd seed 1 at both budgets over our 2 systems there (seed 0: GEPA 0.5 below our 0.75), and
    # nothing on maze (none of ours)
    assert md.count("| rg:gcd | 1 | GEPA 0.1.4 | 1.000 | computes | harnesslearn sequential | 0.500 | prompt_level | 2 |") == 2
    # proposals: valid in each system's own terms, completion tokens per proposer call, our invalid reasons summed
    assert ("| harnesslearn sequential | chat-function | 13 / 32 (41%) | 250 | no_blocks 12, no_change 7 |"
            " 13 / 32 (41%) | 250 | no_blocks 12, no_change 7 |") in md
    assert "| GEPA 0.1.4 | - | 4 / 9 (44%) | 100 | - |" in md  # seeds 0 (gcd, maze): 1 valid each; seed 1: 2
    # pairs, one change at a time: trained minus untrained on the cells both finished (1.0 - 0.75, 0.5 - 0.5)
    assert md.count("| harnesslearn sequential, trained proposer | harnesslearn sequential | training (both asked in "
                    "words") == 2 and "| 2 | +0.125 [+0.000, +0.250] |" in md
    # what the proposals are: the one trained run that holds them (1 zoo copy, 2 programs, 1 prompt-level)
    assert ("| harnesslearn sequential, trained proposer | 1 | 4 | 1 (25%) | 0 (0%) | 2 (50%) | 1 (25%) | 1 | 4 |"
            in md)
    assert "| rg:gcd | 0 | GEPA" not in md and "rg:maze | 0 | GEPA" not in md
    assert "| rg:maze | GEPA 0.1.4 | 0.000 (1) | 0.000 (1) |" in md  # per task: every finished run
    # above the zoo without a zoo copy: GEPA's gcd program on seed 1, once per budget (the trained proposer's run
    # above the zoo on seed 0 returned the zoo's loop: left out)
    assert md.count("| rg:gcd | 1 | GEPA 0.1.4 | 1.000 | 0.500 | ") == 2 and "2 runs: computes 2." in md
    assert "| rg:gcd | 0 | harnesslearn sequential, trained proposer | 1.000 | 0.750 |" not in md
    assert (tmp_path / "out" / "summary.png").stat().st_size > 10_000
    # the HTML page: the plot embedded, the same tables rendered, nothing fetched from outside
    page = (tmp_path / "out" / "summary.html").read_text()
    assert page.count('<img src="data:image/png;base64,') == 1 and "<script" not in page
    assert page.count("<table>") == md.count("\n|---") and "<td>GEPA 0.1.4</td>" in page
    assert "<h2>16 proposer calls" in page and page.index("<h2>16 proposer calls") < page.index("<h2>64 proposer calls")
    with pytest.raises(SystemExit, match="a second folder at 16 proposer calls"):
        summary.main([folders[0], folders[0], "--out", str(tmp_path / "out")])


def test_above_zoo_names_the_prompts_program_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run above its cell's best zoo harness with a harness of its own is listed with what that harness is: the
    runtime API's program pattern (which every prompt shows) where it carries that pattern's request line, else its
    solver use; zoo near-copies and runs at or below the zoo are left out; a pattern line the runtime API no longer
    has stops the summary."""
    import summary  # benchmarks/peers/summary.py

    from harnesslearn.harness import runtime_api_doc

    doc = runtime_api_doc()
    block = doc[doc.index("    reply = model.generate([{\"role\": \"user\", \"content\": f\"Write a Python program"):]
    pattern = "def solve(model, question):\n" + block[:block.index("\n\n")] + "\n    return output.strip()\n"
    cell = ("rg:letter_counting", 0)

    def run(test: float, source: str, ratio: float) -> dict[str, object]:
        return {"test_J": test, "returned_source": source, "returned_nearest_zoo": {"name": "few_shot", "ratio": ratio}}

    by_system = {"zoo": {cell: run(0.7, "", 1.0)},
                 "hl-sequential": {cell: run(0.9, pattern, 0.3)},
                 "gepa": {cell: run(1.0, "import re\ndef solve(model, q):\n    return str(len(re.findall('r', q)))\n", 0.2)},
                 "hl-independent": {cell: run(0.95, "def solve(model, q):\n    return model(q)\n", 0.85)},  # a zoo copy
                 "openevolve": {cell: run(0.7, pattern, 0.3)}}  # level with the zoo: not above
    by_system["hl-sequential~file"] = {cell: {"test_J": 0.8}}  # no source recorded: listed as such, not guessed
    got = {r["system"]: (r["what"], r["use"]) for r in summary.above_zoo(64, by_system)}
    assert got == {"hl-sequential": ("the prompt's program pattern", "solver_program"), "gepa": ("computes", "computes"),
                   "hl-sequential~file": ("no source recorded", "no source recorded")}
    monkeypatch.setattr(summary, "PATTERN_LINE", "a line no runtime API has")
    with pytest.raises(SystemExit, match="no longer in the runtime API"):
        summary.above_zoo(64, by_system)


def test_summary_page_escapes_what_the_tables_hold() -> None:
    """summary.html renders the markdown's tables but never raw HTML from a cell (a harness name, a label): it is
    escaped, and the page asks for nothing from outside (its CSP) and runs no script."""
    import summary  # benchmarks/peers/summary.py

    md = "# Peers <i>x</i>\n\nlabel\n\n| system | J |\n|---|---|\n| <script>alert(1)</script> <b>x</b> | 0.5 |\n"
    page = summary.html_page(md, b"\x89PNG", 'a "label" <b>')
    assert "<table>" in page and "<td>0.5</td>" in page
    assert "&lt;script&gt;" in page and "&lt;b&gt;x&lt;/b&gt;" in page and "<script" not in page and "<b>" not in page
    assert "<title>Peers &lt;i&gt;x&lt;/i&gt;" in page and "default-src 'none'" in page


def test_partial_writes_run_off_the_loop_one_at_a_time_and_coalesce() -> None:
    """The driver's partial outputs: each write in a worker thread (the event loop keeps ticking during it), never
    two at once, marks during a write served by one more write with the latest state, and close() waits for it."""
    import asyncio
    import threading
    import time

    from common import Coalesced

    state = {"n": 0}
    writes: list[tuple[int, str]] = []
    busy = threading.Lock()

    def write(snap: int) -> None:
        assert busy.acquire(blocking=False), "two writes at once"
        try:
            time.sleep(0.2)
            writes.append((snap, threading.current_thread().name))
        finally:
            busy.release()

    async def main() -> int:
        c = Coalesced(lambda: state["n"], write)
        ticks = 0
        state["n"] = 1
        c.mark()  # the first write starts with state 1
        for n in range(2, 7):  # five more cells end during it
            await asyncio.sleep(0.01)
            state["n"] = n
            c.mark()
        while c.task is not None and not c.task.done():  # the loop is free while the threads write
            ticks += 1
            await asyncio.sleep(0.01)
        await c.close()
        return ticks

    ticks = asyncio.run(main())
    assert [w[0] for w in writes] == [1, 6]  # two writes, not six; the second with the latest state
    assert all(name != "MainThread" for _, name in writes)
    assert ticks >= 20  # ~0.4 s of writing, the loop ticking every 10 ms through it
