"""The demo's wiring (adaptation on a Reasoning Gym family, the verdict lines, then the report), with scripted
python: models standing in for the embedded ones so that the tests take seconds. The real default demo (the
embedded Qwen solver and the shipped RL proposer) runs in tests/test_qwen.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harnesslearn.demo import DEMO_SETTINGS, Profile, run_demo


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
    monkeypatch.setitem(demo.PROFILES, spec, Profile("basic_arithmetic", DEMO_SETTINGS, memory=True))
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
    assert "--proposer" in r.output and "--compare" in r.output


def test_the_default_demo_is_the_shipped_rl_proposer_on_a_family_outside_its_training_and_gemma_is_the_smoke() -> None:
    import inspect

    from harnesslearn import demo
    from harnesslearn.adapters import training_families
    from harnesslearn.cli.adapt import demo as demo_command
    from harnesslearn.tasks.families import family_set

    default_model = inspect.signature(demo_command).parameters["model"].default
    p = demo.profile(default_model)
    assert default_model == demo.DEMO_MODEL == "local:qwen2.5-coder-1.5b-instruct"
    assert p.proposer == "local:qwen2.5-coder-1.5b-instruct?adapter=rl" and not p.memory
    assert p.settings.candidates == 1 and p.settings.proposer.sampling.temperature == 0.0  # one greedy revision
    assert p.other == demo.QWEN_SETTINGS  # another proposer: the 3 sampled candidates it was measured with
    assert training_families(p.proposer) == family_set("paper-train")
    assert p.family not in family_set("paper-train")
    smoke = demo.profile("local:gemma-3-270m")
    assert smoke.settings == DEMO_SETTINGS and smoke.proposer is None
    assert training_families("local:qwen2.5-coder-1.5b-instruct") is None  # the untrained model
    assert training_families("local:qwen2.5-coder-1.5b-instruct?adapter=./rl") is None  # a folder: not known here


BASE = {"family": "fraction_simplification", "proposer": "local:qwen2.5-coder-1.5b-instruct?adapter=rl",
        "training_families": ["codeio", "maze"], "seed_test_J": 0.03, "test_J": 0.917, "n_test": 12,
        "intervals": {"seed": {"mean": 0.03, "lo": 0.0, "hi": 0.09}, "best": {"mean": 0.917, "lo": 0.75, "hi": 1.0},
                      "diff": {"mean": 0.887, "lo": 0.72, "hi": 1.0}},
        "provenance": {"winner": {"nearest": "zoo:interpreter_loop", "ratio": 0.968, "contained": 0.985,
                                  "copy": True}}}


def test_the_verdict_says_unseen_the_interval_and_that_the_winner_is_a_known_program_written_back() -> None:
    from harnesslearn.demo import verdict_lines

    assert verdict_lines(BASE) == [
        "rg:fraction_simplification was unseen in training: the proposer "
        "local:qwen2.5-coder-1.5b-instruct?adapter=rl was trained on codeio, maze only",
        "test J rose: 0.030 [0.000, 0.090] -> 0.917 [0.750, 1.000] on 12 held-out test problems (95 % bootstrap "
        "intervals over the problems); the gain +0.887 [+0.720, +1.000]",
        "the winning revision is a near-copy of zoo:interpreter_loop (difflib ratio 0.97, 98% of it held): a known "
        "program written back (the zoo harnesses were in its training data), not a new one"]


def test_the_verdict_says_a_training_family_a_gain_whose_interval_holds_0_and_the_proposers_own_program() -> None:
    from harnesslearn.demo import verdict_lines

    out = {**BASE, "family": "maze", "intervals": {**BASE["intervals"], "diff": {"mean": 0.2, "lo": 0.0, "hi": 0.5}},
           "provenance": {"winner": {"nearest": "api:1", "ratio": 0.41, "contained": 0.3, "copy": False}}}
    lines = verdict_lines(out)
    assert lines[0] == "rg:maze IS one of the proposer's training families (codeio, maze): not an unseen family"
    assert lines[1].endswith("the gain +0.200 [+0.000, +0.500], an interval that includes 0: not clearly a gain on "
                             "this small split")
    assert lines[2] == ("the winning revision is the proposer's own: its nearest known source, api:1, is at difflib "
                        "ratio 0.41 (a copy is >= 0.80)")
    every = {"mean": 1.0, "lo": 1.0, "hi": 1.0}  # all 12 problems solved: the bootstrap interval has no width
    line = verdict_lines({**BASE, "test_J": 1.0, "intervals": {**BASE["intervals"], "best": every}})[1]
    assert line.endswith("-> 1.000 [1.000, 1.000] on 12 held-out test problems (95 % bootstrap intervals over the "
                         "problems); the gain +0.887 [+0.720, +1.000] (an interval of no width: all 12 problems "
                         "scored alike, which is all that so few can show)")


def test_the_verdict_without_a_gain_names_no_winner_and_an_untrained_proposer_has_no_training_families() -> None:
    from harnesslearn.demo import verdict_lines

    out = {**BASE, "proposer": "local:gemma-3-270m", "training_families": None, "test_J": 0.03}
    lines = verdict_lines(out)
    assert lines == ["rg:fraction_simplification, proposer local:gemma-3-270m: not a proposer trained by "
                     "harnesslearn (no training families)",
                     "test J did not rise: 0.030 [0.000, 0.090] -> 0.030 on 12 held-out test problems (the seed "
                     "stayed best or the revision did not transfer)"]
    out["untrained"] = {"proposer": "local:x", "seed_test_J": 0.03, "test_J": 0.03, "valid_proposals": 0,
                        "proposals": 1, "wall_s": 61.2}
    assert verdict_lines(out)[-1] == ("untrained proposer (local:x) on the same problems: test J 0.030 -> 0.030, "
                                      "0/1 valid proposals, 61 s")


SOLVER = """import re


def solver(prompt, **kw):
    m = re.search(r"^Exactly: Calculate (.*)\\.\\nAnswer:", prompt)
    if not m:
        return '42'
    v = eval(m.group(1))
    return str(int(v)) if v == int(v) else str(round(v, 4))
"""


def _winning_models(tmp_path: Path) -> tuple[str, str]:
    """A scripted solver that computes the answer only when asked "Exactly: ...", and a scripted proposer whose
    every proposal (plain-rewrite, the smoke profile's format) asks it so: a revision that wins on every split."""
    from harnesslearn.harness import load_harness
    from harnesslearn.propose.formats import by_name

    seed = load_harness("minimal").source
    child = seed.replace('f"Question: {question}\\nAnswer:"', 'f"Exactly: {question}\\nAnswer:"')
    assert child != seed
    completion = by_name("plain-rewrite").target(seed, child)
    f = tmp_path / "m.py"
    f.write_text(SOLVER + f"\n\ndef proposer(prompt, **kw):\n    return {completion!r}\n")
    return f"python:{f}:solver", f"python:{f}:proposer"


def test_a_winning_demo_ends_with_its_verdict_and_the_report_opens_with_it_and_the_seed_to_winner_diff(
        tmp_path: Path) -> None:
    import json

    solver, proposer = _winning_models(tmp_path)
    rd = tmp_path / "run"
    out = asyncio.run(run_demo(rd, "basic_arithmetic", model_spec=solver, proposer_spec=proposer))
    assert out["test_J"] > out["seed_test_J"] and out["best_harness_id"] != out["seed_harness_id"]
    ci = out["intervals"]
    assert ci["seed"]["mean"] == round(out["seed_test_J"], 3) and ci["best"]["mean"] == round(out["test_J"], 3)
    assert ci["diff"]["mean"] == round(out["test_J"] - out["seed_test_J"], 3) and ci["diff"]["lo"] > 0
    assert out["lines"][1].startswith("test J rose: ")
    win = out["provenance"]["winner"]
    assert out["lines"][2].startswith("the winning revision is " + (
        f"a near-copy of {win['nearest']}" if win["copy"] else "the proposer's own"))
    head = json.loads((rd / "headline.json").read_text())
    assert head == {"lines": out["lines"], "seed": out["seed_harness_id"], "best": out["best_harness_id"]}
    html = Path(out["report"]).read_text()
    top = html[:html.index('<h2 id="run-0"')]  # before the first run's section
    assert all(line.replace("'", "&#x27;").replace(">", "&gt;") in top for line in out["lines"])
    assert "Exactly: {question}" in top and "Question: {question}" in top  # the diff, both sides


def test_compare_runs_the_untrained_model_as_proposer_on_the_same_problems_and_prints_both(tmp_path: Path) -> None:
    """``--compare``: a second run directory (``untrained/``) with the solver as its own proposer, the same seed
    and problems (the seed's test J is the same), one more line; and no compare when the proposer is the model."""
    import pytest

    from harnesslearn.errors import UserError

    solver, proposer = _winning_models(tmp_path)
    rd = tmp_path / "run"
    out = asyncio.run(run_demo(rd, "basic_arithmetic", model_spec=solver, proposer_spec=proposer, compare=True))
    u = out["untrained"]
    assert u["proposer"] == solver and u["run_dir"] == str(rd / "untrained") and Path(u["report"]).is_file()
    assert u["seed_test_J"] == out["seed_test_J"] and u["valid_proposals"] == 0  # '42' is no edit
    assert out["lines"][-1].startswith(f"untrained proposer ({solver}) on the same problems: test J ")
    with pytest.raises(UserError, match="--compare runs the untrained model beside another proposer"):
        asyncio.run(run_demo(tmp_path / "again", "basic_arithmetic", model_spec=solver, compare=True))


def test_another_proposer_than_the_profiles_gets_the_profiles_other_settings(tmp_path: Path,
                                                                             monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from harnesslearn import demo

    solver, proposer = _winning_models(tmp_path)
    monkeypatch.setitem(demo.PROFILES, solver, Profile("basic_arithmetic", DEMO_SETTINGS.with_(rounds=1, candidates=1),
                                                       proposer=proposer, other=DEMO_SETTINGS.with_(rounds=1)))
    assert asyncio.run(run_demo(tmp_path / "own", model_spec=solver))["proposals"] == 1
    other = asyncio.run(run_demo(tmp_path / "other", model_spec=solver, proposer_spec=solver))
    assert other["proposals"] == DEMO_SETTINGS.candidates and other["proposer"] == solver
