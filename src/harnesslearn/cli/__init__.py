"""The ``harnesslearn`` command. Thin: parse options, call the library, print results.

Contract: commands that produce results take ``--json`` and then print exactly one
JSON object on stdout; progress and logs go to stderr. Exit status 0 ok, 2 bad usage or input
(one-line reason on stderr), 3 an invalid edit.

Layout: ``app.py`` (the typer application, shared options, ``emit``), one module per command group
(``evaluate.py``: tasks, edit, run, zoo, models; ``adapt.py``: adapt, demo, report; ``memory.py``;
``train.py``), and ``main`` here, which turns user mistakes into one line and an exit status.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import NoReturn

import typer
from pydantic import BaseModel, ValidationError

try:  # typer >= 0.17 vendors click
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as _cx  # type: ignore[no-redef]

# each module registers its commands; `harnesslearn --help` lists them in this order
from harnesslearn.cli import evaluate  # noqa: I001, F401
from harnesslearn.cli import adapt, memory, train  # noqa: F401
from harnesslearn.cli.app import app
from harnesslearn.errors import InfraError, UserError, disk_full

__all__ = ["app", "main"]


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
    except ValidationError as e:  # a settings object built outside the loader: still one line
        from harnesslearn.settings.base import settings_error

        model = e.title
        sys.stderr.write(f"harnesslearn: error: {model}: {settings_error(_model(model), e)}\n")
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
    except sqlite3.DatabaseError as e:
        if isinstance(e, sqlite3.OperationalError) and disk_full(e):
            _disk_full(e)
        if isinstance(e, sqlite3.OperationalError):
            raise
        # damage a query met past the checks at open (a malformed page): one line, not a traceback
        sys.stderr.write(f"harnesslearn: error: a database this command reads is damaged ({e}); move it away or "
                         "remove it\n")
        sys.exit(2)
    except OSError as e:
        if not disk_full(e):
            raise
        _disk_full(e)
    if rv == 130:  # click returns typer's Exit(130) for a Ctrl-C when not in standalone mode
        sys.stderr.write("harnesslearn: interrupted\n")
    sys.exit(rv if isinstance(rv, int) else 0)


def _disk_full(e: BaseException) -> NoReturn:
    sys.stderr.write(f"harnesslearn: disk full ({str(e).splitlines()[0]}); what was committed before is "
                     "intact: free some space and rerun (with --resume where the command has it)\n")
    sys.exit(1)


def _model(title: str) -> type[BaseModel]:
    """The settings class a ValidationError's title names (BaseModel when unknown: the raw location)."""
    from harnesslearn.settings.base import Settings

    todo: list[type[BaseModel]] = [Settings]
    while todo:
        c = todo.pop()
        if c.__name__ == title:
            return c
        todo += c.__subclasses__()
    return BaseModel


if __name__ == "__main__":
    main()
