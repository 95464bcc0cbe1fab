"""The ``harnesslearn`` command. Thin: parse options, call the library, print results.

Contract (DESIGN.md): commands that produce results take ``--json`` and then print exactly one
JSON object on stdout; progress and logs go to stderr. Exit status 0 ok, 2 bad usage or input
(one-line reason on stderr), 3 an invalid edit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

try:  # typer >= 0.17 vendors click
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as _cx  # type: ignore[no-redef]

from harnesslearn.errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Harness learning: revise the program around a frozen solver model from execution feedback.",
)
train_app = typer.Typer(no_args_is_help=True, help="Train the proposer: sft-data, sft, grpo.")
app.add_typer(train_app, name="train")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")]


def emit(obj: dict[str, Any], as_json: bool, human: str | None = None) -> None:
    """Print a result: one JSON object on stdout, or a human-readable summary."""
    if as_json:
        sys.stdout.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
    else:
        sys.stdout.write((human if human is not None else json.dumps(obj, indent=2, default=str)) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------- tasks
@app.command()
def tasks(as_json: JsonOpt = False) -> None:
    """List task specs and all Reasoning Gym families."""
    from harnesslearn.tasks import list_tasks

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
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Write the revised harness here.")] = None,
) -> None:
    """Apply a proposer completion (SEARCH/REPLACE blocks) to a harness. Exit 3 if invalid."""
    from harnesslearn.edits import apply_proposal
    from harnesslearn.harness import load_harness

    h = load_harness(harness)
    if str(proposal) == "-":
        text = sys.stdin.read()
    else:
        if not proposal.is_file():
            raise UserError(f"proposal not found: {proposal}")
        try:
            text = proposal.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read proposal {proposal}: {e}") from None
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
        from harnesslearn.fsutil import atomic_write_text

        atomic_write_text(out, r.source or "")
    human = (
        f"valid edit ({r.n_blocks} block(s)) -> harness {r.harness_id[:12]}" + (f", written to {out}" if out else "")
        if r.valid
        else f"invalid edit: {r.reason}" + (f" ({r.detail})" if r.detail else "")
    )
    if r.valid and out is None and not as_json:
        human = r.source or ""
    emit(result, as_json, human)
    if not r.valid:
        raise typer.Exit(3)


# ---------------------------------------------------------------- run (executor)
# ---------------------------------------------------------------- models
# ---------------------------------------------------------------- adapt / report / demo
# ---------------------------------------------------------------- train


def main(argv: list[str] | None = None) -> None:
    """Entry point: user mistakes become one line on stderr and exit 2, never a traceback."""
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="harnesslearn", standalone_mode=False)
    except typer.Exit as e:
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
    except KeyboardInterrupt:
        sys.stderr.write("harnesslearn: interrupted\n")
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
