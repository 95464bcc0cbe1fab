"""`harnesslearn memory list | show | remove | export | import | add-zoo`: the harness memory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from harnesslearn import aio
from harnesslearn.cli.app import (
    IsolationOpt,
    JsonOpt,
    UnsafeOpt,
    emit,
    isolation_of,
    memory_app,
    result_stream,
    write_output,
    zoo_names,
)
from harnesslearn.sandbox.records import MAX_TIMEOUT_S, Budgets
from harnesslearn.settings.groups import MAX_CONCURRENCY, MAX_PROBLEMS, MAX_SEED

# ---------------------------------------------------------------- memory
MemoryPathOpt = Annotated[str | None, typer.Option(
    "--memory-path", help="The memory file (default: $HARNESSLEARN_MEMORY, else memory.sqlite in the cache folder).")]


def _memory(path: str | None, *, readonly: bool = False) -> Any:
    from harnesslearn.memory import Memory

    return Memory.open(path, readonly=readonly)


def printable(text: str) -> str:
    """``text`` safe for a terminal line: control characters (NUL, newlines, ANSI escapes), bidi overrides
    and other format characters are written as escapes, so an entry cannot move the cursor, recolour the
    screen or reorder what is shown."""
    import unicodedata

    return "".join(ch if ch.isprintable() and unicodedata.category(ch) != "Cf" else ch.encode("unicode_escape").decode()
                   for ch in text)


def _entry_line(e: Any) -> str:
    gain = "n/a" if e.gain is None else f"{e.gain:+.3f}"
    return printable(f"{e.id}  {e.task:<28} gain {gain:<7} {e.origin:<22} {e.note[:60]}")


@memory_app.command("list")
def memory_list(path: MemoryPathOpt = None, as_json: JsonOpt = False) -> None:
    """List the entries (id, task, score-split gain over the seed, origin, note)."""
    with _memory(path, readonly=True) as mem:
        entries = mem.entries()
        out = {"memory": str(mem.path), "entries": [{k: v for k, v in e.to_json().items() if k != "source"}
                                                    for e in entries]}
    emit(out, as_json, "\n".join([f"{len(entries)} entries in {out['memory']}", *map(_entry_line, entries)]))


@memory_app.command("show")
def memory_show(entry: Annotated[str, typer.Argument(help="An entry id (or a unique prefix of one).")],
                path: MemoryPathOpt = None, as_json: JsonOpt = False) -> None:
    """One entry in full, with its harness source."""
    with _memory(path, readonly=True) as mem:
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

    with _memory(path, readonly=True) as mem:
        text = export_jsonl(mem)
    if out is None:
        result_stream().write(text)
        result_stream().flush()
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
        where = str(Path(mem.path).resolve())
    emit({"imported": ids, "memory": where}, as_json, f"imported {len(ids)} entries into {where}")


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
    isolation: IsolationOpt = None,
    unsafe_no_sandbox: UnsafeOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Evaluate the zoo on a task's score split; store each zoo harness that beats the task's seed."""

    from harnesslearn.memory import add_zoo
    from harnesslearn.runtime import SolverRuntime
    from harnesslearn.sandbox import ExecutorConfig
    from harnesslearn.tasks import load_task

    t = load_task(task)
    names = zoo_names(t, only, seed)  # unknown or inapplicable names: exit 2 before anything runs
    config = ExecutorConfig(isolation=isolation_of(isolation, unsafe_no_sandbox) or "auto")
    mem = _memory(path)
    rt = SolverRuntime(solver, base_url=solver_base_url, config=config, concurrency=concurrency, warm=False)

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
