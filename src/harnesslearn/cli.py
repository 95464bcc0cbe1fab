"""The ``harnesslearn`` command. Thin: parse options, call the library, print results.

Contract (DESIGN.md): commands that produce results take ``--json`` and then print exactly one
JSON object on stdout; progress and logs go to stderr. Exit status 0 ok, 2 bad usage or input
(one-line reason on stderr), 3 an invalid edit.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import sqlite3
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

try:  # typer >= 0.17 vendors click
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as _cx  # type: ignore[no-redef]

from harnesslearn import aio
from harnesslearn.errors import InfraError, UserError, disk_full
from harnesslearn.sandbox.records import Budgets
from harnesslearn.settings import MAX_CONCURRENCY, MAX_PROBLEMS, MAX_SEED, MAX_TIMEOUT_S, AdaptSettings

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Harness learning: revise the program around a frozen solver model from execution feedback.",
)
train_app = typer.Typer(no_args_is_help=True, help="Train the proposer: sft-data, sft, grpo.")
app.add_typer(train_app, name="train")
memory_app = typer.Typer(no_args_is_help=True, help="The harness memory: harnesses that beat their seed on earlier "
                                                     "tasks, shown to the proposer of a new one.")
app.add_typer(memory_app, name="memory")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")]
ExecutorOpt = Annotated[str, typer.Option(
    "--executor", help="Where harness runs execute: local | ray (a local Ray instance) | ray:auto | ray:HOST:PORT | "
                       "ray://HOST:PORT (Ray Client).")]


def write_output(path: str, text: str) -> None:
    """Write a command's output file atomically; a path that cannot be written is a UserError
    (one line) and leaves nothing behind."""
    if not path.strip():
        raise UserError("the output path is empty")
    p = Path(path)
    if p.is_dir():
        raise UserError(f"cannot write {path}: it is a directory")
    from harnesslearn.fsutil import atomic_write_text

    try:
        atomic_write_text(p, text)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


def emit(obj: dict[str, Any], as_json: bool, human: str | None = None) -> None:
    """Print a result: one JSON object on stdout, or a human-readable summary."""
    if as_json:
        sys.stdout.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
    else:
        sys.stdout.write((human if human is not None else json.dumps(obj, indent=2, default=str)) + "\n")
    sys.stdout.flush()


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
        probs = task.problems(split, n, seed)
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
    from harnesslearn.edits import apply_proposal
    from harnesslearn.harness import load_harness

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
    unsafe_no_sandbox: Annotated[
        bool, typer.Option("--unsafe-no-sandbox", help="Run harness code WITHOUT isolation (unsafe; warns on every run).")
    ] = False,
    executor: ExecutorOpt = "local",
    as_json: JsonOpt = False,
) -> None:
    """Evaluate one harness on a task split in sandboxed workers and print its score J."""

    from harnesslearn.evaluation import Evaluation, evaluate
    from harnesslearn.runtime import SolverRuntime
    from harnesslearn.sandbox import Budgets, ExecutorConfig
    from harnesslearn.tasks import load_task
    from harnesslearn.zoo import resolve_harness

    config = ExecutorConfig(isolation="none" if unsafe_no_sandbox else "auto")
    rt = SolverRuntime(solver, base_url=solver_base_url, executor=executor, config=config, concurrency=concurrency,
                       warm=False)
    t = load_task(task)
    h = resolve_harness(harness, t, check=False)  # an invalid harness file: every problem harness_error
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
    as_json: JsonOpt = False,
) -> None:
    """Evaluate the harness zoo (human-designed harnesses) on the score and test splits."""

    from harnesslearn import zoo as zoo_mod
    from harnesslearn.runtime import SolverRuntime
    from harnesslearn.sandbox import Budgets
    from harnesslearn.tasks import load_task

    t = load_task(task)
    names = [x.strip() for x in only.split(",") if x.strip()] if only else None
    for name in names or []:
        zoo_mod.build(name, t, seed)  # unknown or inapplicable names: exit 2 before anything runs
    if test not in ("all", "best"):
        raise UserError(f"--test must be all or best, not {test!r}")
    rt = SolverRuntime(solver, base_url=solver_base_url, concurrency=concurrency, warm=False)
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


# ---------------------------------------------------------------- adapt / report / demo
# adapt, demo (E1): test-time adaptation and the demo on the embedded model
H = AdaptSettings.help


def settings_options(fn: Callable[..., None]) -> Callable[..., None]:
    """One typer option per ``AdaptSettings`` field that names a CLI option (its help, default and option
    come from the field's metadata, so they are written once, in settings.py); the command receives the
    ``AdaptSettings`` built from them as ``settings`` (a bad value: one line, exit 2, before anything runs)."""
    hints = typing.get_type_hints(AdaptSettings)
    extra = []
    for f in dataclasses.fields(AdaptSettings):
        if f.metadata["option"] is None:
            continue
        name, typ, default = f.name, hints[f.name], f.default
        if f.name == "budgets":  # --timeout sets Budgets.timeout_s
            name, typ, default = "timeout", float, Budgets().timeout_s
        elif typing.get_origin(typ) is typing.Literal:  # choices are checked by AdaptSettings, naming the option
            typ = str
        extra.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[
            typ, typer.Option(f.metadata["option"], help=f.metadata["help"])]))
    own_hints = typing.get_type_hints(fn, include_extras=True)
    sig = inspect.signature(fn)
    own = [p.replace(annotation=own_hints[p.name]) for p in sig.parameters.values() if p.name != "settings"]

    @functools.wraps(fn)
    def command(**kw: Any) -> None:
        values = {f.name: kw.pop("timeout" if f.name == "budgets" else f.name) for f in dataclasses.fields(AdaptSettings)
                  if f.metadata["option"] is not None}
        values["budgets"] = Budgets(timeout_s=values["budgets"])
        fn(settings=AdaptSettings(**values), **kw)

    params = own + extra
    command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    return command


@app.command()
@settings_options
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
    executor: ExecutorOpt = "local",
    as_json: JsonOpt = False,
) -> None:
    """Test-time adaptation: revise the harness for R rounds and report it on the test split."""

    from harnesslearn.adapt import adapt as run_adapt
    from harnesslearn.models import load_model
    from harnesslearn.runtime import SolverRuntime
    from harnesslearn.tasks import load_task
    from harnesslearn.zoo import resolve_harness

    if run_dir is not None and not run_dir.strip():
        raise UserError("--run-dir must not be empty")
    if resume and run_dir is None:
        raise UserError("--resume needs --run-dir (the run directory to continue)")
    rt = SolverRuntime(solver, base_url=solver_base_url, executor=executor, concurrency=settings.concurrency,
                       warm=False)
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


def _verdict(out: dict[str, Any]) -> str:
    """The demo's last line: whether adaptation raised test J (from the seed's to the selected harness's)."""
    a, b = out.get("seed_test_J"), out.get("test_J")
    if a is None or b is None:
        return f"test J could not be measured (seed {a}, adapted {b})"
    if b > a:
        return f"test J rose: {a:.3f} -> {b:.3f} (held-out test split, n={out.get('n_test', '?')})"
    return f"test J did not rise: {a:.3f} -> {b:.3f} (the seed stayed best or the revision did not transfer)"


@app.command()
def demo(
    run_dir: Annotated[str | None, typer.Option("--run-dir", help="Run directory (default runs/demo-TIME).")] = None,
    family: Annotated[str | None, typer.Option(
        "--family", help="Reasoning Gym family (default: the model's demo family, see harnesslearn.demo).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted demo in --run-dir.")] = False,
    model: Annotated[str, typer.Option(
        "--model", help="Solver and proposer model spec.")] = "local:gemma-3-270m",
    as_json: JsonOpt = False,
) -> None:
    """The main job on the embedded model (local:gemma-3-270m as solver and proposer), ending in a report."""

    from harnesslearn.demo import run_demo

    if run_dir is not None and not run_dir.strip():
        raise UserError("--run-dir must not be empty")
    out = aio.run(run_demo(run_dir=run_dir, family=family, resume=resume, model_spec=model))
    human = (
        f"demo on rg:{out['family']} with {model}: {out['valid_proposals']}/{out['proposals']} valid proposals, "
        f"{out['wall_s']:.0f} s\nreport: {out.get('report')}\n{_verdict(out)}"
    )
    emit(out, as_json, human)


# report (E2): the HTML report of a run directory
@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `harnesslearn adapt`.")],
    as_json: JsonOpt = False,
) -> None:
    """Write RUN_DIR/report.html (self-contained) and RUN_DIR/plots/*.png; print the path."""
    from harnesslearn.report import render_report

    r = render_report(run_dir)
    emit({"report": str(r.path), "plots": [str(p) for p in r.plots]}, as_json, str(r.path))


# ---------------------------------------------------------------- memory
MemoryPathOpt = Annotated[str | None, typer.Option(
    "--memory-path", help="The memory file (default: $HARNESSLEARN_MEMORY, else memory.sqlite in the cache folder).")]


def _memory(path: str | None) -> Any:
    from harnesslearn.memory import Memory

    return Memory.open(path)


def _entry_line(e: Any) -> str:
    gain = "n/a" if e.gain is None else f"{e.gain:+.3f}"
    return f"{e.id}  {e.task:<28} gain {gain:<7} {e.origin:<22} {e.note[:60]}"


@memory_app.command("list")
def memory_list(path: MemoryPathOpt = None, as_json: JsonOpt = False) -> None:
    """List the entries (id, task, score-split gain over the seed, origin, note)."""
    with _memory(path) as mem:
        entries = mem.entries()
        out = {"memory": str(mem.path), "entries": [{k: v for k, v in e.to_json().items() if k != "source"}
                                                    for e in entries]}
    emit(out, as_json, "\n".join([f"{len(entries)} entries in {out['memory']}", *map(_entry_line, entries)]))


@memory_app.command("show")
def memory_show(entry: Annotated[str, typer.Argument(help="An entry id (or a unique prefix of one).")],
                path: MemoryPathOpt = None, as_json: JsonOpt = False) -> None:
    """One entry in full, with its harness source."""
    with _memory(path) as mem:
        e = mem.get(entry)
    human = (f"{_entry_line(e)}\ntask: {e.task}\nsolver: {e.solver}  date: {e.date}  score J {e.seed_J} -> {e.score_J}\n"
             f"examples:\n" + "\n".join(f"  - {q[:200]}" for q in e.examples) + f"\n\n{e.source}")
    emit(e.to_json(), as_json, human)


@memory_app.command("remove")
def memory_remove(entry: Annotated[str, typer.Argument(help="An entry id (or a unique prefix of one).")],
                  path: MemoryPathOpt = None, as_json: JsonOpt = False) -> None:
    """Remove one entry."""
    with _memory(path) as mem:
        e = mem.remove(entry)
    emit({"removed": e.id, "task": e.task}, as_json, f"removed {e.id} ({e.task})")


@memory_app.command("export")
def memory_export(out: Annotated[str | None, typer.Option("-o", "--out", help="Write JSONL here (default: stdout).")] = None,
                  path: MemoryPathOpt = None) -> None:
    """Every entry as JSON lines (to stdout, or to a file written atomically)."""
    from harnesslearn.memory import export_jsonl

    with _memory(path) as mem:
        text = export_jsonl(mem)
    if out is None:
        sys.stdout.write(text)
    else:
        write_output(out, text)


@memory_app.command("import")
def memory_import(file: Annotated[str, typer.Argument(help="A JSONL file written by `memory export` ('-': stdin).")],
                  path: MemoryPathOpt = None, as_json: JsonOpt = False) -> None:
    """Add the entries of a JSONL export (every line is checked first: a bad one writes nothing)."""
    from harnesslearn.fsutil import read_user_file
    from harnesslearn.memory import import_jsonl

    text = sys.stdin.read() if file == "-" else read_user_file(file, "memory export")
    with _memory(path) as mem:
        ids = import_jsonl(mem, text, file)
    emit({"imported": ids, "memory": str(path or "")}, as_json, f"imported {len(ids)} entries")


@memory_app.command("add-zoo")
def memory_add_zoo(
    task: Annotated[str, typer.Option("--task", help="Task spec, e.g. rg:maze.")],
    solver: Annotated[str, typer.Option("--solver", help="Solver model spec, e.g. local:qwen2.5-coder-1.5b-instruct.")],
    solver_base_url: Annotated[str | None, typer.Option("--solver-base-url", help="Base URL for openai: solvers.")] = None,
    n_score: Annotated[int, typer.Option("--n-score", min=1, max=MAX_PROBLEMS, help="Score-split problems.")] = 8,
    seed: Annotated[int, typer.Option("--seed", min=0, max=MAX_SEED, help="Problem sampling seed.")] = 0,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, max=MAX_TIMEOUT_S,
                                           help="Wall-clock limit (s) of one solve() call.")] = 60.0,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, max=MAX_CONCURRENCY,
                                                    help="Problems in flight.")] = None,
    only: Annotated[str | None, typer.Option("--only", help="Comma-separated zoo names (default: all that apply).")] = None,
    path: MemoryPathOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Evaluate the zoo on a task's score split; store each zoo harness that beats the task's seed."""

    from harnesslearn import zoo as zoo_mod
    from harnesslearn.memory import add_zoo
    from harnesslearn.runtime import SolverRuntime
    from harnesslearn.tasks import load_task

    t = load_task(task)
    names = [x.strip() for x in only.split(",") if x.strip()] if only else None
    for name in names or []:
        zoo_mod.build(name, t, seed)  # unknown or inapplicable names: exit 2 before anything runs
    mem = _memory(path)
    rt = SolverRuntime(solver, base_url=solver_base_url, concurrency=concurrency, warm=False)

    async def go() -> dict[str, Any]:
        async with rt:
            return await add_zoo(mem, t, rt.sandbox, solver=solver, n_score=n_score, seed=seed,
                                 budgets=Budgets(timeout_s=timeout), only=names)

    try:
        out = aio.run(go())
    finally:
        mem.close()
    lines = [f"zoo on {t.spec} (score n={n_score}): seed J {out['seed_score_J']}"]
    lines += [f"  {r['name']:<18} J {r['score_J']}  {'stored' if r['stored'] else 'not stored'}"
              + (f" (screen: {', '.join(r['screen'])})" if r["screen"] else "") for r in out["rows"]]
    emit(out, as_json, "\n".join(lines))


# ---------------------------------------------------------------- train


ConfigOpt = Annotated[Path, typer.Option("--config", help="YAML config (see configs/paper and configs/tiny).")]


TrainExecutorOpt = Annotated[str | None, typer.Option(
    "--executor", help="Where harness runs execute (overrides the config's executor): local | ray | ray:auto | "
                       "ray:HOST:PORT | ray://HOST:PORT.")]


def _with_executor(cfg: Any, executor: str | None) -> Any:
    if executor is not None:
        from harnesslearn.sandbox import parse_executor

        parse_executor(executor)
        cfg.executor = executor
    return cfg


@train_app.command("sft-data")
def train_sft_data(config: ConfigOpt, executor: TrainExecutorOpt = None, as_json: JsonOpt = False) -> None:
    """Teacher revisions of the seed on the training families, filtered into a chat JSONL."""

    from harnesslearn.training.config import SFTDataConfig, load_config
    from harnesslearn.training.sft_data import generate

    result = aio.run(generate(_with_executor(load_config(SFTDataConfig, config), executor)))
    share = ", ".join(f"{k} {v:.0%}" for k, v in result["kind_share"].items())
    emit(result, as_json, f"kept {result['kept']} of {result['candidates']} revisions -> {result['out']} ({share})")


@train_app.command("sft")
def train_sft(config: ConfigOpt, as_json: JsonOpt = False) -> None:
    """Supervised fine-tuning of the proposer (TRL SFTTrainer + LoRA)."""
    from harnesslearn.training.config import SFTTrainConfig, load_config
    from harnesslearn.training.sft import run_sft

    result = run_sft(load_config(SFTTrainConfig, config))
    emit(result, as_json, f"{result['steps']} steps, loss {result['train_loss']:.4f}, adapter {result['adapter']}")


@train_app.command("grpo")
def train_grpo(config: ConfigOpt, executor: TrainExecutorOpt = None, as_json: JsonOpt = False) -> None:
    """GRPO of the proposer with the execution reward (TRL GRPOTrainer + LoRA)."""
    from harnesslearn.training.config import GRPOTrainConfig, load_config
    from harnesslearn.training.grpo import run_grpo

    result = run_grpo(_with_executor(load_config(GRPOTrainConfig, config), executor))
    emit(result, as_json, f"{result['steps']} steps on {result['contexts']} contexts, adapter {result['adapter']}, "
         f"rollouts {result['rollouts']}")



def main(argv: list[str] | None = None) -> None:
    """Entry point: user mistakes become one line on stderr and exit 2, never a traceback."""
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="harnesslearn", standalone_mode=False)
    except typer.Exit as e:
        if e.exit_code == 130 and isinstance(e.__cause__, KeyboardInterrupt):  # typer's Ctrl-C
            sys.stderr.write("harnesslearn: interrupted\n")
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.stderr.write("harnesslearn: aborted\n")
        sys.exit(130)
    except _cx.UsageError as e:
        msg = e.format_message().splitlines()[0] if e.format_message() else "bad usage"
        sys.stderr.write(f"harnesslearn: error: {msg}\n")
        sys.exit(2)
    except _cx.ClickException as e:
        sys.stderr.write(f"harnesslearn: error: {e.format_message().splitlines()[0]}\n")
        sys.exit(2)
    except UserError as e:
        sys.stderr.write(f"harnesslearn: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}\n")
        sys.exit(2)
    except InfraError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        sys.stderr.write(f"harnesslearn: infrastructure failure (not scored; resumable where the command has --resume): {first}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.stderr.write("harnesslearn: interrupted\n")
        sys.exit(130)
    except (sqlite3.OperationalError, OSError) as e:
        if not disk_full(e):
            raise
        sys.stderr.write(f"harnesslearn: disk full ({str(e).splitlines()[0]}); what was committed before is "
                         "intact: free some space and rerun (with --resume where the command has it)\n")
        sys.exit(1)
    if rv == 130:  # click returns typer's Exit(130) for a Ctrl-C when not in standalone mode
        sys.stderr.write("harnesslearn: interrupted\n")
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
