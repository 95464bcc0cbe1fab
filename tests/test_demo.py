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


def test_demo_command_is_documented() -> None:
    from typer.testing import CliRunner

    from harnesslearn.cli import app

    r = CliRunner().invoke(app, ["demo", "--help"])
    assert r.exit_code == 0 and "--family" in r.output and "--run-dir" in r.output
