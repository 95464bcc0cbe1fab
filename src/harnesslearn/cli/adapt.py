"""`harnesslearn adapt | demo | report`: test-time adaptation, the main job, the HTML report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from harnesslearn import aio
from harnesslearn.cli.app import IsolationOpt, JsonOpt, UnsafeOpt, app, emit, isolation_of
from harnesslearn.cli.options import settings_options
from harnesslearn.errors import UserError
from harnesslearn.settings.adapt import AdaptSettings

# ---------------------------------------------------------------- adapt / report / demo
# adapt, demo (E1): test-time adaptation and the demo on the embedded model


@app.command()
@settings_options(AdaptSettings)
def adapt(
    settings: AdaptSettings,
    task: Annotated[str, typer.Option("--task", help="Task spec, e.g. rg:basic_arithmetic or jsonl:FILE.")],
    solver: Annotated[str, typer.Option("--solver", help="Solver model spec (frozen), e.g. local:gemma-3-270m.")],
    proposer: Annotated[str, typer.Option("--proposer", help="Proposer model spec (writes the edits).")],
    solver_base_url: Annotated[list[str] | None, typer.Option(
        help="Base URL for an openai: solver; repeat it for a pool of servers.")] = None,
    proposer_base_url: Annotated[str | None, typer.Option(help="Base URL for an openai: proposer.")] = None,
    run_dir: Annotated[str | None, typer.Option("--run-dir", help="Run directory (default runs/adapt-TIME).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run in --run-dir.")] = False,
    harness: Annotated[str | None, typer.Option(
        "--harness", help="Start from this harness (.py, seed name or zoo:NAME); default: the task's seed.")] = None,
    unsafe_no_sandbox: UnsafeOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Test-time adaptation: revise the harness for R rounds and report it on the test split."""

    from harnesslearn.adapt import adapt as run_adapt
    from harnesslearn.models import load_model
    from harnesslearn.runtime import SolverRuntime
    from harnesslearn.tasks import load_task
    from harnesslearn.zoo import resolve_harness

    if unsafe_no_sandbox:  # = --isolation none
        isolation_of(None if settings.runtime.isolation == "auto" else settings.runtime.isolation, True)
        settings = settings.with_(**{"runtime.isolation": "none"})
    if run_dir is not None and not run_dir.strip():
        raise UserError("--run-dir must not be empty")
    if resume and run_dir is None:
        raise UserError("--resume needs --run-dir (the run directory to continue)")
    rt = SolverRuntime.of(solver, settings.runtime, base_url=solver_base_url, warm=False)
    t = load_task(task)
    seed_h = resolve_harness(harness, t, settings.seed) if harness else None
    proposer_m = load_model(proposer, base_url=proposer_base_url)

    async def go() -> dict[str, Any]:
        try:
            async with rt:
                assert rt.solver is not None
                r = await run_adapt(t, rt.solver, proposer_m, settings, run_dir=run_dir, resume=resume,
                                    seed_harness=seed_h, executor=rt.executor)
                return r.to_json()
        finally:
            await proposer_m.aclose()

    out = aio.run(go())

    def j(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    human = (
        f"{out['strategy']}: best harness {out['best_harness_id'][:12]}  score J {j(out['seed_score_J'])} -> "
        f"{j(out['score_J'])}  test J {j(out['seed_test_J'])} -> {j(out['test_J'])}  "
        f"({out['valid_proposals']}/{out['proposals']} valid proposals, {out['solver_calls']} solver calls)\n"
        f"run directory: {out['run_dir']}"
    )
    sp = out.get("spend") or {}
    if sp:
        cost = "" if sp.get("usd") in (None, 0) else f", ${sp['usd']:.4f}"
        human += f"\nspent: proposer {sp['proposer_tokens']} tokens, solver {sp['solver_tokens']} tokens{cost}"
    if out.get("stopped"):
        human += f"\n{out['stopped']}; --resume with a larger cap continues the run"
    for name, c in (out.get("compare") or {}).items():
        orc = c.get("oracle")
        human += (
            f"\n  {name:<12} test J {j(c['test_J'])}  score J {j(c['score_J'])}  "
            f"{c['valid_proposals']}/{c['proposals']} valid  {c['solver_calls']} solver calls"
            + (f"  [oracle best-of-N test J {j(orc['test_J'])}: an upper bound]" if orc else "")
        )
    for z in out.get("zoo") or []:
        human += (f"\n  zoo:{z['name']:<18} score J {j(z['score_J'])}  test J {j(z['test_J'])}"
                  + ("  (best zoo harness on the score split)" if z["best"] else ""))
    emit(out, as_json, human)
    memory_warning(out)


def memory_warning(out: dict[str, Any]) -> None:
    """After the result: one warning line when the finished run's best harness could not be added to the
    harness memory (the run is stored and its result printed; exit status 0)."""
    if out.get("memory_error"):
        sys.stderr.write(f"harnesslearn: warning: the run is done and stored, but its best harness was not added "
                         f"to the harness memory ({out['memory_error']})\n")


@app.command()
def demo(
    run_dir: Annotated[str | None, typer.Option("--run-dir", help="Run directory (default runs/demo-TIME).")] = None,
    family: Annotated[str | None, typer.Option(
        "--family", help="Reasoning Gym family (default: the model's demo family, see harnesslearn.demo).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted demo in --run-dir.")] = False,
    model: Annotated[str, typer.Option(
        "--model", help="Solver model spec; local:gemma-3-270m is the one-minute smoke (Gemma as solver and "
        "proposer).")] = "local:qwen2.5-coder-1.5b-instruct",
    proposer: Annotated[str | None, typer.Option(
        "--proposer", help="Proposer model spec. Default: with the Qwen 1.5B solver, the GRPO-trained proposer "
        "shipped with the package ('local:qwen2.5-coder-1.5b-instruct?adapter=rl'); else the solver itself. "
        "The demo's settings are --model's (with the 1.5B, another proposer gets 3 candidates at temperature 0.8).")] = None,
    compare: Annotated[bool, typer.Option(
        "--compare", help="Also run the untrained model as the proposer on the same problems, and print both.")] = False,
    isolation: IsolationOpt = None,
    unsafe_no_sandbox: UnsafeOpt = False,
    memory: Annotated[bool | None, typer.Option(
        "--memory/--no-memory", help="Show the proposer the harness memory shipped with the package (default: "
        "only for the 0.5B Qwen's demo). Your own memory is never read or written.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The main job: the GRPO-trained proposer revises a harness for the embedded Qwen coder on a family it was not
    trained on; ends in a report and says, in plain words, what changed."""

    from harnesslearn.demo import run_demo

    if run_dir is not None and not run_dir.strip():
        raise UserError("--run-dir must not be empty")
    out = aio.run(run_demo(run_dir=run_dir, family=family, resume=resume, model_spec=model, memory=memory,
                           isolation=isolation_of(isolation, unsafe_no_sandbox), proposer_spec=proposer,
                           compare=compare))
    who = model if out["proposer"] == model else f"{model} (solver), {out['proposer']} (proposer)"
    human = (
        f"demo on rg:{out['family']} with {who}: {out['valid_proposals']}/{out['proposals']} valid proposals, "
        f"{out['wall_s']:.0f} s\nreport: {out.get('report')}\n" + "\n".join(out["lines"])
    )
    emit(out, as_json, human)
    memory_warning(out)


# report (E2): the HTML report of a run directory
@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `harnesslearn adapt`.")],
    as_json: JsonOpt = False,
) -> None:
    """Write RUN_DIR/report.html (self-contained) and RUN_DIR/plots/*.png; print the path."""
    from harnesslearn.report import failure_taxonomy, render_report

    r = render_report(run_dir)
    emit({"report": str(r.path), "plots": [str(p) for p in r.plots], "taxonomy": failure_taxonomy(run_dir)}, as_json,
         str(r.path))
