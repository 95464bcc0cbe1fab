"""The typer application, its sub-applications, the options and output helpers every command shares."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Annotated, Any, TypeVar

import typer

from harnesslearn.errors import UserError
from harnesslearn.fsutil import finite
from harnesslearn.sandbox.executors import EXECUTOR_HELP
from harnesslearn.untrusted import encodable, escape

F = TypeVar("F", bound=Callable[..., Any])
_RESULTS: list[IO[str]] = []  # where a running command's result goes (its stdout), innermost last


@contextlib.contextmanager
def user_output_to_stderr() -> Iterator[None]:
    """For the body of a command: what user code in this process prints (a scorer, a ``python:`` model, a
    library), through ``sys.stdout`` or file descriptor 1, goes to stderr; the command's result (``emit``,
    ``result_stream``) alone goes to stdout, so ``--json`` prints exactly one JSON object there."""
    out = sys.stdout
    fd = None
    with contextlib.suppress(AttributeError, OSError, ValueError):
        if out.fileno() == 1:
            out.flush()
            fd = os.dup(1)
            os.dup2(2, 1)
    results = os.fdopen(fd, "w", encoding="utf-8", closefd=False) if fd is not None else out
    _RESULTS.append(results)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = out
        _RESULTS.pop()
        if fd is not None:
            with contextlib.suppress(OSError, ValueError):
                results.flush()
            os.dup2(fd, 1)
            os.close(fd)


def result_stream() -> IO[str]:
    """Where a command writes its result: stdout (the real one, while user output goes to stderr)."""
    return _RESULTS[-1] if _RESULTS else sys.stdout


class _Typer(typer.Typer):
    """Every command's body runs under ``user_output_to_stderr`` (help and usage errors are not inside it)."""

    def command(self, name: str | None = None, **kwargs: Any) -> Callable[[F], F]:
        register = super().command(name, **kwargs)

        def deco(f: F) -> F:
            @functools.wraps(f)
            def body(*a: Any, **kw: Any) -> Any:
                with user_output_to_stderr():
                    return f(*a, **kw)

            register(body)
            return f

        return deco


app = _Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Harness learning: revise the program around a frozen solver model from execution feedback.",
)
train_app = _Typer(no_args_is_help=True, help="Train the proposer: sft-data, sft, grpo.")
app.add_typer(train_app, name="train")
memory_app = _Typer(no_args_is_help=True, help="The harness memory: harnesses that beat their seed on earlier "
                                                     "tasks, shown to the proposer of a new one.")
app.add_typer(memory_app, name="memory")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")]
IsolationOpt = Annotated[str | None, typer.Option(
    "--isolation", help="Sandbox isolation of harness runs: auto (bubblewrap, else Landlock) | bwrap | landlock | "
                        "none (unsafe: harness code runs as you, unconfined; warns on every run).")]
UnsafeOpt = Annotated[bool, typer.Option(
    "--unsafe-no-sandbox", help="The same as --isolation none: for a machine without bubblewrap or Landlock (macOS, "
                                "Windows, a container without user namespaces). Unsafe: run only harnesses you trust.")]


def isolation_of(isolation: str | None, unsafe: bool) -> str | None:
    """The isolation the two options choose (None: the command's own default); a contradiction or an unknown
    mode is a UserError. ``--isolation auto`` with ``--unsafe-no-sandbox`` is no contradiction: auto is the default,
    and adapt, whose settings hold it, cannot tell it from an option left out (every command now takes it so)."""
    from harnesslearn.sandbox.executor import ISOLATIONS

    if unsafe:
        if isolation not in (None, "none", "auto"):
            raise UserError(f"--unsafe-no-sandbox contradicts --isolation {isolation}")
        return "none"
    if isolation is not None and isolation not in ISOLATIONS:
        raise UserError(f"--isolation must be one of {', '.join(ISOLATIONS)} (got {isolation!r})")
    return isolation
ExecutorOpt = Annotated[str, typer.Option("--executor", help=EXECUTOR_HELP)]


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
    """Print a result: one JSON object on stdout (never NaN or Infinity: those are null), or a human-readable
    summary. Text that UTF-8 cannot carry (a lone surrogate from untrusted output) is written escaped."""
    if as_json:
        text = json.dumps(finite(obj), ensure_ascii=False, default=str, allow_nan=False)
        if not encodable(text):
            text = json.dumps(finite(obj), default=str, allow_nan=False)
    else:
        text = escape(human if human is not None else json.dumps(obj, indent=2, default=str))
    out = result_stream()
    out.write(text + "\n")
    out.flush()


def zoo_names(task: Any, only: str | None, seed: int) -> list[str] | None:
    """The zoo entries ``--only`` names (None: all that apply); an unknown or inapplicable name is a
    UserError before anything runs."""
    from harnesslearn import zoo

    names = [x.strip() for x in only.split(",") if x.strip()] if only else None
    for name in names or []:
        zoo.build(name, task, seed)
    return names


def split_problems(task: Any, split: str, n: int, seed: int) -> list[Any]:
    """The problems ``split`` gives for ``n`` and ``seed``; an empty split is a UserError (exit 2), a short
    one is said in one stderr line (the command goes on with what there is)."""
    probs = task.problems(split, n, seed)
    s = task.split_sizes
    if not probs:
        raise UserError(f"the {split} split of {task.spec} holds no problems (too few in the task for its split "
                        f"fractions feedback/score/test = {s.feedback:g}/{s.score:g}/{s.test:g})")
    if len(probs) < n:
        sys.stderr.write(f"harnesslearn: the {split} split of {task.spec} holds {len(probs)} problems (asked "
                         f"{n}); going on with {len(probs)}\n")
    return list(probs)
