"""`harnesslearn tasks | edit | run | zoo | models`: look at tasks, apply an edit, evaluate harnesses."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from harnesslearn import aio
from harnesslearn.cli.app import (
    ExecutorOpt,
    IsolationOpt,
    JsonOpt,
    UnsafeOpt,
    app,
    emit,
    isolation_of,
    split_problems,
    write_output,
    zoo_names,
)
from harnesslearn.errors import InfraError, UserError
from harnesslearn.sandbox.records import MAX_TIMEOUT_S
from harnesslearn.settings.groups import MAX_CONCURRENCY, MAX_PROBLEMS, MAX_SEED


# ---------------------------------------------------------------- tasks
@app.command()
def tasks(
    spec: Annotated[
        str | None, typer.Argument(help="A task spec to preview (description and problems) instead of the list.")
    ] = None,
    split: Annotated[str, typer.Option(help="Split to preview: feedback, score or test.")] = "feedback",
    n: Annotated[int, typer.Option(min=1, max=MAX_PROBLEMS, help="Number of problems to preview.")] = 3,
    seed: Annotated[int, typer.Option(min=0, max=MAX_SEED, help="Seed of the problems to preview.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """List task specs and all Reasoning Gym families, or preview one task spec."""
    from harnesslearn.tasks import list_tasks, load_task

    if spec is not None:
        task = load_task(spec)
        probs = split_problems(task, split, n, seed)
        preview = {
            "spec": task.spec,
            "name": task.name,
            "family": task.family,
            "tools": list(task.tools),
            "description": task.description,
            "split": split,
            "seed": seed,
            "problems": [{"id": p.id, "question": p.question, "answer": p.answer} for p in probs],
        }
        human = "\n\n".join(
            [task.description] + [f"[{p.id}]\n{p.question}\n-> gold: {p.answer}" for p in probs]
        )
        emit(preview, as_json, human)
        return
    info = list_tasks()
    human = "\n".join(
        [f"{s['spec']:<28} {s['description']}" for s in info["specs"]]
        + ["", f"Reasoning Gym families ({len(info['reasoning_gym'])}): " + ", ".join(info["reasoning_gym"])]
        + [f"family set {k}: {', '.join(v)}" for k, v in info["family_sets"].items()]
    )
    emit(info, as_json, human)


# ---------------------------------------------------------------- edit
@app.command()
def edit(
    harness: Annotated[str, typer.Argument(help="A .py file or a shipped seed name (minimal, qa_minimal).")],
    proposal: Annotated[Path, typer.Argument(help="A text file with the proposer's completion ('-' for stdin).")],
    as_json: JsonOpt = False,
    out: Annotated[str | None, typer.Option("-o", "--out", help="Write the revised harness here.")] = None,
) -> None:
    """Apply a proposer completion (SEARCH/REPLACE blocks) to a harness. Exit 3 if invalid."""
    from harnesslearn.harness import load_harness
    from harnesslearn.propose.edits import apply_proposal

    h = load_harness(harness)
    if str(proposal) == "-":
        text = sys.stdin.read()
    else:
        from harnesslearn.fsutil import read_user_file

        text = read_user_file(proposal, "proposal")
    r = apply_proposal(h.source, text)
    result = {
        "valid": r.valid,
        "reason": r.reason,
        "parsed": r.parsed,
        "produced": r.produced,
        "blocks": r.n_blocks,
        "harness_id": r.harness_id,
        "parent_id": h.id,
        "source": r.source,
    }
    if r.valid and out is not None:
        write_output(out, r.source or "")
    human = (
        f"valid edit ({r.n_blocks} block(s)) -> harness {(r.harness_id or '')[:12]}" + (f", written to {out}" if out else "")
        if r.valid
        else f"invalid edit: {r.reason}" + (f" ({r.detail})" if r.detail else "")
    )
    if r.valid and out is None and not as_json:
        human = r.source or ""
    emit(result, as_json, human)
    if not r.valid:
        raise typer.Exit(3)


# ---------------------------------------------------------------- run (executor)
@app.command()
def run(
    harness: Annotated[str, typer.Argument(
        help="A .py file, a shipped seed name (minimal, qa_minimal) or zoo:NAME (harnesslearn zoo lists them).")],
    task: Annotated[str, typer.Option("--task", help="Task spec, e.g. rg:basic_arithmetic or jsonl:FILE.")],
    solver: Annotated[str, typer.Option("--solver", help="Solver model spec, e.g. openai:NAME or python:FILE.py:FN.")],
    solver_base_url: Annotated[list[str] | None, typer.Option(
        "--solver-base-url", help="Base URL for openai: solvers; repeat it for a pool of servers.")] = None,
    split: Annotated[str, typer.Option("--split", help="feedback, score or test.")] = "score",
    n: Annotated[int, typer.Option("--n", min=1, max=MAX_PROBLEMS, help="Number of problems.")] = 20,
    seed: Annotated[int, typer.Option("--seed", min=0, max=MAX_SEED, help="Problem sampling seed.")] = 0,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=0.1, max=MAX_TIMEOUT_S, help="Wall-clock limit (s) of one solve() call.")] = 60.0,
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", min=1, max=MAX_CONCURRENCY, help="Problems in flight at once (per node with a Ray executor).")] = None,
    isolation: IsolationOpt = None,
    unsafe_no_sandbox: UnsafeOpt = False,
    executor: ExecutorOpt = "local",
    as_json: JsonOpt = False,
) -> None:
    """Evaluate one harness on a task split in sandboxed workers and print its score J."""

    from harnesslearn.evaluation import Evaluation, evaluate
    from harnesslearn.runtime import SolverRuntime
    from harnesslearn.sandbox import Budgets, ExecutorConfig
    from harnesslearn.tasks import load_task
    from harnesslearn.zoo import resolve_harness

    t = load_task(task)
    h = resolve_harness(harness, t, check=False)  # an invalid harness file: every problem harness_error
    split_problems(t, split, n, seed)  # an empty split is exit 2, not a run that blames the infrastructure
    config = ExecutorConfig(isolation=isolation_of(isolation, unsafe_no_sandbox) or "auto")
    rt = SolverRuntime(solver, base_url=solver_base_url, executor=executor, config=config, concurrency=concurrency,
                       warm=False)
    budgets = Budgets(timeout_s=timeout)
    stats: dict[str, Any] = {}

    async def go() -> Evaluation:
        async with rt:
            assert rt.executor is not None
            ev = await evaluate(h, t, split, n, seed, rt.executor, budgets=budgets, progress=True)
            stats.update(rt.stats())
            return ev

    ev = aio.run(go())
    result = ev.to_json()
    result["model_stats"] = stats["solver"]  # calls, tokens, cache hits, retries, faults, infra errors; endpoints
    result["executor"] = stats["executor"]  # local, or the Ray actors, their nodes and the problems dispatched again
    j = "n/a (all runs hit infrastructure failures)" if ev.J is None else f"{ev.J:.3f}"
    rate = "n/a" if ev.completion_rate is None else f"{ev.completion_rate:.0%}"
    counts = ", ".join(f"{k} {v}" for k, v in sorted(ev.status_counts().items()))
    human = f"harness {h.short_id} on {t.spec} [{split}, n={ev.n}]: J = {j}, completion {rate} ({counts})"
    emit(result, as_json, human)
    if ev.problems and ev.infra_failures == len(ev.problems):
        raise InfraError(f"every one of the {ev.n} runs hit an infrastructure failure (J not scored); first: "
                         f"{(ev.problems[0].error or 'no detail').splitlines()[0][:300]}")


# ---------------------------------------------------------------- zoo
@app.command()
def zoo(
    task: Annotated[str, typer.Option("--task", help="Task spec, e.g. rg:gcd or musique:FILE.")],
    solver: Annotated[str, typer.Option("--solver", help="Solver model spec, e.g. local:qwen2.5-coder-1.5b-instruct.")],
    solver_base_url: Annotated[str | None, typer.Option("--solver-base-url", help="Base URL for openai: solvers.")] = None,
    n_score: Annotated[int, typer.Option("--n-score", min=1, max=100_000, help="Score-split problems.")] = 16,
    n_test: Annotated[int, typer.Option("--n-test", min=1, max=100_000, help="Test-split problems.")] = 32,
    seed: Annotated[int, typer.Option("--seed", min=0, max=2**31 - 1, help="Problem sampling seed.")] = 0,
    only: Annotated[str | None, typer.Option("--only", help="Comma-separated zoo names (default: all that apply).")] = None,
    test: Annotated[str, typer.Option("--test", help="all: every harness on the test split; best: only the "
                                                    "one picked on the score split (and the seed).")] = "all",
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Wall-clock limit (s) of one solve() call.")] = 60.0,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, max=256, help="Problems in flight.")] = None,
    isolation: IsolationOpt = None,
    unsafe_no_sandbox: UnsafeOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Evaluate the harness zoo (human-designed harnesses) on the score and test splits."""

    from harnesslearn import zoo as zoo_mod
    from harnesslearn.runtime import SolverRuntime
    from harnesslearn.sandbox import Budgets, ExecutorConfig
    from harnesslearn.tasks import load_task

    t = load_task(task)
    names = zoo_names(t, only, seed)  # unknown or inapplicable names: exit 2 before anything runs
    if test not in ("all", "best"):
        raise UserError(f"--test must be all or best, not {test!r}")
    split_problems(t, "score", n_score, seed)  # an empty score split: nothing to pick on (exit 2)
    config = ExecutorConfig(isolation=isolation_of(isolation, unsafe_no_sandbox) or "auto")
    rt = SolverRuntime(solver, base_url=solver_base_url, config=config, concurrency=concurrency, warm=False)
    stats: dict[str, Any] = {}

    async def go() -> dict[str, Any]:
        async with rt:
            assert rt.executor is not None
            out = await zoo_mod.evaluate_zoo(t, rt.executor, n_score=n_score, n_test=n_test, seed=seed,
                                             budgets=Budgets(timeout_s=timeout), only=names, test=test)
            stats.update(rt.stats())
            return out

    out = aio.run(go())
    out["solver"] = solver
    out["model_stats"] = stats["solver"]

    def j(d: dict[str, Any]) -> str:
        return "-" if not d or d.get("J") is None else f"{d['J']:.3f} [{d['lo']:.2f}, {d['hi']:.2f}]"

    lines = [f"zoo on {t.spec} (score n={n_score}, test n={n_test}); picked on the score split: {out['best']}",
             f"{'harness':<20} {'score J [95% CI]':<24} {'test J [95% CI]':<24}"]
    lines += [f"{r['name']:<20} {j(r['score']):<24} {j(r['test']):<24}" for r in out["rows"]]
    emit(out, as_json, "\n".join(lines))
    if out["rows"] and all(not (r.get("score") or {}).get("n") for r in out["rows"]):  # as `run` does
        raise InfraError(f"every run of every zoo harness on the score split hit an infrastructure failure (J not "
                         f"scored): is the solver {solver} reachable?")


# ---------------------------------------------------------------- models
@app.command()
def models(as_json: JsonOpt = False) -> None:
    """List model providers and whether each is available here."""
    from harnesslearn.models import list_providers

    rows = list_providers()
    lines = []
    for r in rows:
        state = "available" if r["available"] else f"missing {', '.join(r['missing'])}: {r['install']}"
        lines.append(f"{r['example']:<24} {state}\n{'':<24} {r['description']}")
        for m in r.get("models", []):
            where = (f"GGUF {'assembled' if m['assembled'] else 'not assembled yet'} at {m['gguf_path']}, "
                     f"engine {r['engine']}" if m["installed"] else f"not installed: {m['install']}")
            lines.append(f"  {m['spec']:<38} {where}\n  {'':<38} {m['description']}\n  {'':<38} {m['provenance']}")
    emit({"providers": rows}, as_json, "\n".join(lines))
