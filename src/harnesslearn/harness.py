"""A harness: Python source that defines ``solve(model, question) -> str``.

Identified by the sha256 of its source with line endings normalised. Carries its parent's id
and the edit (proposer text) that produced it. Validation compiles the source and inspects the
AST; it never executes harness code (that happens only in a sandboxed worker).
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from harnesslearn.errors import UserError

SEEDS = ("minimal", "qa_minimal")


def normalise(source: str) -> str:
    """Line endings to ``\\n``."""
    return source.replace("\r\n", "\n").replace("\r", "\n")


def harness_id(source: str) -> str:
    return hashlib.sha256(normalise(source).encode("utf-8")).hexdigest()


MAX_SOURCE_BYTES = 1 << 20  # a harness travels to its worker in one frame (8 MiB) with the question


def check_source(source: str) -> str | None:
    """Why ``source`` is not a valid harness ("too_large", "syntax_error", "missing_solve",
    "bad_solve_signature"), or None when it compiles and defines a top-level
    ``solve(model, question)`` that no later top-level statement rebinds (else "missing_solve"). Code
    nested too deeply for the parser (thousands of levels) is a syntax error of the harness, never a
    crash of the trusted process."""
    if len(source.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
        return "too_large"
    try:
        tree = ast.parse(normalise(source))
        compile(tree, "<harness>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "syntax_error"
    solves = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == "solve"]
    if not solves:
        return "missing_solve"
    fn = solves[-1]
    if any(_binds_solve(n) for n in tree.body[tree.body.index(fn) + 1:]):  # the module's solve is not that def
        return "missing_solve"
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args]
    if (
        isinstance(fn, ast.AsyncFunctionDef)
        or names != ["model", "question"]
        or a.vararg or a.kwarg or a.kwonlyargs or a.defaults
    ):
        return "bad_solve_signature"
    return None


def _binds_solve(node: ast.stmt) -> bool:
    """Whether a top-level statement rebinds or deletes the name ``solve`` (an assignment, an import, a
    class, a loop or with target, ``del``)."""
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name == "solve"
    if isinstance(node, ast.Import | ast.ImportFrom):
        return any((a.asname or a.name.split(".")[0]) == "solve" for a in node.names)
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign | ast.Delete):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
        targets = [node.target]
    elif isinstance(node, ast.With | ast.AsyncWith):
        targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
    return any(isinstance(n, ast.Name) and n.id == "solve" for t in targets for n in ast.walk(t))


@dataclass(frozen=True)
class Harness:
    source: str
    parent_id: str | None = None
    edit: str | None = None  # the proposer text that produced it from the parent
    name: str | None = None  # seed name or file path, for display

    @property
    def id(self) -> str:
        return harness_id(self.source)

    @property
    def short_id(self) -> str:
        return self.id[:12]


def seed_source(name: str) -> str:
    if name not in SEEDS:
        raise UserError(f"unknown seed harness {name!r}; shipped seeds: {', '.join(SEEDS)}")
    return (resources.files("harnesslearn") / "seeds" / f"{name}.py").read_text(encoding="utf-8")


def runtime_api_doc() -> str:
    """The harness runtime API, written for a proposer model to read."""
    return (resources.files("harnesslearn") / "seeds" / "RUNTIME_API.md").read_text(encoding="utf-8")


def load_harness(ref: str, *, check: bool = True) -> Harness:
    """A shipped seed by name, or a ``.py`` file, validated unless ``check=False`` (``harnesslearn run``:
    running an invalid harness is an evaluation result, every problem ``harness_error``). UserError for
    anything else. ``zoo.resolve_harness`` adds the other ways to name a harness (``zoo:``, ``style:``)."""
    if ref in SEEDS:
        return Harness(source=normalise(seed_source(ref)), name=ref)
    from harnesslearn.fsutil import read_user_file

    path = Path(ref)
    if not path.exists():
        raise UserError(f"harness not found: {ref} (give a .py file, zoo:NAME or one of: {', '.join(SEEDS)})")
    source = read_user_file(path, "harness").removeprefix("\ufeff")  # a UTF-8 BOM: Python runs such a file too
    if len(source.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:  # refused even unchecked: no worker takes it
        raise UserError(f"invalid harness {ref}: too large ({len(source):,} characters; at most "
                        f"{MAX_SOURCE_BYTES:,} bytes)")
    if check:
        reason = check_source(source)
        if reason is not None:
            raise UserError(f"invalid harness {ref}: {reason.replace('_', ' ')}")
    return Harness(source=normalise(source), name=str(path))
