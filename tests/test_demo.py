"""The demo's wiring (adaptation on a Reasoning Gym family, then the report), with a scripted
python: model standing in for the embedded one so that the test takes seconds. The real
local:gemma-3-270m demo is measured by hand (see the report to the lead)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harnesslearn.demo import DEMO_SETTINGS, run_demo


def test_demo_runs_adaptation_and_ends_with_a_report(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def fn(prompt, **kw):\n    return '42'\n")
    out = asyncio.run(run_demo(tmp_path / "run", "basic_arithmetic", model_spec=f"python:{f}:fn"))
    assert out["family"] == "basic_arithmetic" and out["strategy"] == "sequential"
    assert out["proposals"] == DEMO_SETTINGS.rounds * DEMO_SETTINGS.candidates
    assert out["valid_proposals"] == 0  # '42' is no edit
    assert out["report"] is not None and Path(out["report"]).is_file()
    assert (tmp_path / "run" / "runs.sqlite").is_file()


def test_demo_never_reads_or_writes_the_users_memory_and_no_memory_turns_the_shipped_one_off(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The user's memory (HARNESSLEARN_MEMORY, holding entries of other tasks) stays byte-identical and
    unshown by any demo; a memory model is shown the shipped entries unless --no-memory."""
    import hashlib
    import os

    from harnesslearn import demo
    from harnesslearn.memory import Memory, load_shipped

    user = Path(os.environ["HARNESSLEARN_MEMORY"])
    with Memory.open(user) as mem:
        assert load_shipped(mem) == 3
    digest = hashlib.sha256(user.read_bytes()).hexdigest()
    f = tmp_path / "m.py"
    f.write_text("def fn(prompt, **kw):\n    return '42'\n")
    spec = f"python:{f}:fn"
    out = asyncio.run(run_demo(tmp_path / "plain", "basic_arithmetic", model_spec=spec))
    assert out["memory_shown"] == []  # a model without the memory profile: no memory at all
    monkeypatch.setattr(demo, "MEMORY_MODELS", (spec,))
    shown = asyncio.run(run_demo(tmp_path / "mem", "basic_arithmetic", model_spec=spec))
    assert len(shown["memory_shown"]) == 2  # the shipped entries, from a file of the demo's own
    html = Path(shown["report"]).read_text()  # the report says which entries each proposal was shown
    assert "harness memory: 2 entries shown to the proposer" in html and "this run added no entry" in html
    assert html.count(shown["memory_shown"][0][:12]) >= 1 + shown["proposals"]
    again = asyncio.run(run_demo(tmp_path / "mem", "basic_arithmetic", model_spec=spec, resume=True))
    assert again["memory_shown"] == shown["memory_shown"]  # --resume finds the same memory path and entries
    off = asyncio.run(run_demo(tmp_path / "off", "basic_arithmetic", model_spec=spec, memory=False))
    assert off["memory_shown"] == []
    assert hashlib.sha256(user.read_bytes()).hexdigest() == digest


def test_demo_with_another_proposer_asks_it_and_not_the_solver_for_the_revisions(tmp_path: Path) -> None:
    """``demo --proposer SPEC`` (a trained proposer beside the embedded solver): every proposal comes from it."""
    f = tmp_path / "m.py"
    log = tmp_path / "calls"
    f.write_text(f"def solver(prompt, **kw):\n    open({str(log)!r}, 'a').write('s\\n')\n    return '42'\n\n"
                 f"def proposer(prompt, **kw):\n    open({str(log)!r}, 'a').write('p\\n')\n    return 'no edit'\n")
    out = asyncio.run(run_demo(tmp_path / "run", "basic_arithmetic", model_spec=f"python:{f}:solver",
                               proposer_spec=f"python:{f}:proposer"))
    calls = log.read_text().split()
    assert out["proposals"] == DEMO_SETTINGS.rounds * DEMO_SETTINGS.candidates == calls.count("p")
    assert calls.count("s") == out["solver_calls"] + out["test_solver_calls"] > 0  # the solver only answered


def test_demo_command_is_documented() -> None:
    from typer.testing import CliRunner

    from harnesslearn.cli import app

    r = CliRunner().invoke(app, ["demo", "--help"])
    assert r.exit_code == 0 and "--family" in r.output and "--run-dir" in r.output and "--no-memory" in r.output
    assert "--proposer" in r.output


def test_the_demo_verdict_says_when_the_winning_revision_is_a_zoo_harness_written_back() -> None:
    """The last line says whether test J rose, and, when the winner is a near-copy of a zoo harness (the
    memory's interpreter loop written back, say), that it is reuse, not a new program."""
    from harnesslearn.cli.adapt import _verdict

    out = {"seed_test_J": 0.5, "test_J": 0.75, "n_test": 12}
    assert _verdict(out) == "test J rose: 0.500 -> 0.750 (held-out test split, n=12)"
    out["best_nearest_zoo"] = {"name": "interpreter_loop", "ratio": 0.93, "near_copy": True, "seed_ratio": 0.36}
    assert _verdict(out).endswith("; the winning revision is a near-copy of zoo:interpreter_loop (difflib ratio "
                                  "0.93), reuse of a known harness, not a new program")
    out["best_nearest_zoo"] = {"name": "reason_extract", "ratio": 0.6, "near_copy": False, "seed_ratio": 0.36}
    assert _verdict(out) == "test J rose: 0.500 -> 0.750 (held-out test split, n=12)"
    assert _verdict({"seed_test_J": 0.5, "test_J": 0.5}).startswith("test J did not rise")
