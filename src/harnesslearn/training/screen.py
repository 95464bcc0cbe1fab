"""The quality screen for teacher revisions, and the classifier of what kind of revision it is.

``screen(source, ...)`` returns the reasons a revised harness is rejected (an empty list means it
passes). It checks, by reading the AST and never running the code:

- it compiles and defines ``solve(model, question)`` (``harness.check_source``);
- size: characters and lines under the limits;
- no file, process or network access: imports of modules such as ``os``, ``socket``,
  ``subprocess``, ``urllib``, ``http``, ``requests``, ``shutil``, ``pathlib``, ``ctypes``,
  ``importlib``, and calls of ``open`` or ``__import__``. ``exec``/``eval`` are NOT flagged:
  interpreter-loop harnesses run the solver's code through them, inside the sandbox;
- no literal question->answer table: ``taxonomy.find_answer_tables`` (a string constant holding
  one of the given problem questions, or a large dict/pair-list literal of constants).

What it does not catch: access hidden behind ``getattr``/string building, tables assembled at
run time from fragments, or memorised answers that are not literal question strings (see
``find_answer_tables`` for that detector's own limits).

``classify_revision(parent, child)`` names the kind of change: ``interpreter_loop`` (the solver's
code is run: ``model.python`` or ``exec``/``eval`` added), ``sampling_voting`` (several samples or
calls combined: ``n=`` > 1, ``Counter``, ``most_common``, a loop around a model call),
``answer_extraction`` (regexes or string parsing of the completion added), ``prompt_rewrite``
(only string constants changed), else ``other``. The first matching kind wins, in that order.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from harnesslearn.harness import check_source
from harnesslearn.taxonomy import find_answer_tables

KINDS = ("interpreter_loop", "sampling_voting", "answer_extraction", "prompt_rewrite", "other")

FORBIDDEN_MODULES = frozenset({
    "os", "sys", "socket", "subprocess", "urllib", "http", "requests", "httpx", "shutil", "pathlib",
    "ctypes", "importlib", "multiprocessing", "pickle", "marshal",
    "tempfile", "glob", "io", "builtins", "ftplib", "smtplib", "telnetlib", "ssl", "select", "mmap",
})
FORBIDDEN_CALLS = frozenset({"open", "__import__", "breakpoint", "input", "globals", "vars"})
def _imports(tree: ast.AST) -> set[str]:
    mods: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            mods.add(node.module.split(".")[0])
    return mods


def _called_names(tree: ast.AST) -> set[str]:
    """Names of called functions: ``f(...)`` -> f, ``a.b(...)`` -> b."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                out.add(f.id)
            elif isinstance(f, ast.Attribute):
                out.add(f.attr)
    return out


def screen(
    source: str,
    *,
    questions: Iterable[str] = (),
    max_chars: int = 12000,
    max_lines: int = 300,
) -> list[str]:
    """Reasons ``source`` fails the quality screen; ``[]`` when it passes."""
    reason = check_source(source)
    if reason is not None:
        return [reason]
    reasons = []
    if len(source) > max_chars:
        reasons.append("too_many_chars")
    if source.count("\n") + 1 > max_lines:
        reasons.append("too_many_lines")
    tree = ast.parse(source)
    if _imports(tree) & FORBIDDEN_MODULES:
        reasons.append("forbidden_import")
    if _called_names(tree) & FORBIDDEN_CALLS:
        reasons.append("forbidden_call")
    if find_answer_tables(source, questions):
        reasons.append("answer_table")
    return reasons


def _model_calls_in_loops(tree: ast.AST) -> int:
    n = 0
    for loop in ast.walk(tree):
        if isinstance(loop, ast.For | ast.While | ast.ListComp | ast.GeneratorExp):
            for node in ast.walk(loop):
                if isinstance(node, ast.Call):
                    f = node.func
                    if (isinstance(f, ast.Name) and f.id == "model") or (
                        isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "model"
                        and f.attr == "generate"
                    ):
                        n += 1
    return n


def _uses_n_samples(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "n" and not (isinstance(kw.value, ast.Constant) and kw.value.value == 1):
                    return True
    return False


def _strings_blanked(tree: ast.AST) -> str:
    class Blank(ast.NodeTransformer):
        def visit_Constant(self, node: ast.Constant) -> ast.AST:
            return ast.Constant("") if isinstance(node.value, str) else node

        def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
            return ast.Constant("")

    return ast.dump(Blank().visit(tree))


def classify_revision(parent: str, child: str) -> str:
    """The kind of revision from ``parent`` to ``child`` (one of ``KINDS``)."""
    try:
        pt, ct = ast.parse(parent), ast.parse(child)
    except SyntaxError:
        return "other"
    pc, cc = _called_names(pt), _called_names(ct)
    added = cc - pc
    if "python" in added or ({"exec", "eval"} & added):
        return "interpreter_loop"
    if (_uses_n_samples(ct) and not _uses_n_samples(pt)) or ({"Counter", "most_common"} & added) or (
        _model_calls_in_loops(ct) > _model_calls_in_loops(pt)
    ):
        return "sampling_voting"
    parsing = {"search", "findall", "match", "fullmatch", "split", "rsplit", "partition", "rpartition", "sub"}
    if (parsing & added) or ("re" in _imports(ct) - _imports(pt)):
        return "answer_extraction"
    if parent != child and _strings_blanked(pt) == _strings_blanked(ct):
        return "prompt_rewrite"
    return "other"
