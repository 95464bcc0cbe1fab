"""Writing SEARCH/REPLACE blocks (the other side of ``edits.py``, which parses and applies them): a
harness written as an edit of a parent. The proposer formats use it for their SFT targets, and the
zoo harnesses become teacher-free SFT revisions through it.

A zoo harness (``zoo.py``) is a whole file; an SFT example must be a *completion* of the
proposer's prompt, in the edit format the proposer writes at test time. Two forms:

- ``diff_blocks(parent, child)``: SEARCH/REPLACE blocks made from a line diff of the two sources
  (each SEARCH grown with context lines until it matches the parent exactly once); for prompts
  that end with an open SEARCH marker (``prime="search"``) or none.
- ``rewrite_completion(parent, child)``: for prompts primed with ``proposer.rewrite_tail`` (the
  parent's ``solve`` already searched, the divider and the ``def`` line written): the body of the
  child's ``solve`` and the REPLACE marker. The child must then be all inside ``solve``:
  ``inline_solve`` moves a module's imports, constants and helper functions into the body of its
  ``solve`` (nested, in their order), which keeps the behaviour for harnesses that use no
  ``global`` and no multi-line string literals (checked; the shipped zoo has neither).

Every builder verifies its output with ``edits.apply_proposal``: the text it returns applies to the
parent exactly and yields the expected child source (``EditMismatch`` otherwise).
"""

from __future__ import annotations

import ast
import difflib
import io
import tokenize
from collections.abc import Sequence
from typing import Any

from harnesslearn.harness import normalise
from harnesslearn.propose.decode import DIVIDER, END, PRIME, as_proposal, rewrite_tail, solve_lines
from harnesslearn.propose.edits import apply_proposal


class EditMismatch(ValueError):
    """A built edit does not reproduce the intended child harness."""


def _check(parent: str, proposal: str, expected: str) -> None:
    ed = apply_proposal(parent, proposal)
    if not ed.valid or ed.source is None:
        raise EditMismatch(f"edit invalid: {ed.reason} {ed.detail or ''}".strip())
    if normalise(ed.source) != normalise(expected):
        raise EditMismatch("edit applies but does not reproduce the child source")


def _count(lines: list[str], needle: list[str]) -> int:
    n = len(needle)
    return sum(lines[i:i + n] == needle for i in range(len(lines) - n + 1))


def diff_blocks(parent: str, child: str, *, context: int = 1) -> str:
    """SEARCH/REPLACE blocks turning ``parent`` into ``child`` (verified to apply exactly).

    Hunks come from ``difflib.SequenceMatcher`` over lines; each block's SEARCH text is the changed
    parent lines plus ``context`` unchanged lines on each side, grown further until it is non-empty,
    not only blank lines, and matches the parent exactly once. Hunks whose grown spans would touch
    are merged into one block (the applier refuses overlapping blocks)."""
    a, b = normalise(parent).rstrip("\n").split("\n"), normalise(child).rstrip("\n").split("\n")
    if a == b:
        raise EditMismatch("parent and child are the same")
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    spans = [[max(0, i1 - context), min(len(a), i2 + context)] for tag, i1, i2, _, _ in ops if tag != "equal"]
    while True:  # grow each span until its SEARCH text is unique, then merge spans that touch
        for sp in spans:
            while sp != [0, len(a)]:
                needle = a[sp[0]:sp[1]]
                if needle and any(s.strip() for s in needle) and _count(a, needle) == 1:
                    break
                sp[0], sp[1] = max(0, sp[0] - 1), min(len(a), sp[1] + 1)
        merged: list[list[int]] = []
        for sp in spans:
            if merged and sp[0] <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], sp[1])
            else:
                merged.append(list(sp))
        if len(merged) == len(spans):
            break
        spans = merged
    out = []
    for lo, hi in spans:
        repl = b[_map(ops, lo, min):_map(ops, hi, max)]
        out.append(PRIME + "\n".join(a[lo:hi]) + f"\n{DIVIDER}\n" + ("\n".join(repl) + "\n" if repl else "") + END)
    text = "\n\n".join(out) + "\n"
    _check(parent, text, child)
    return text


def _map(ops: Sequence[tuple[str, int, int, int, int]], x: int, pick: Any) -> int:
    """The child line index that parent line boundary ``x`` maps to (``pick=min``: before any
    lines inserted there, ``max``: after them)."""
    js = []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal" and i1 <= x <= i2:
            js.append(j1 + (x - i1))
        elif x == i1:
            js.append(j1)
        elif x == i2:
            js.append(j2)
    return int(pick(js))


def _multiline_strings(source: str) -> bool:
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.STRING and tok.start[0] != tok.end[0]:
            return True
    return False


def inline_solve(source: str) -> str:
    """``source`` as one self-contained ``solve``: the module docstring dropped, every other
    top-level statement (imports, constants, helpers) moved, in order, to the start of the body.
    ValueError when that could change the behaviour (``global``/``nonlocal``, multi-line strings
    outside the module docstring) or there is no ``solve``."""
    src = normalise(source)
    tree = ast.parse(src)
    body = list(tree.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        doc = body.pop(0)
        rest = "\n".join(src.split("\n")[doc.end_lineno or 0:])
    else:
        rest = src
    if any(isinstance(n, ast.Global | ast.Nonlocal) for n in ast.walk(tree)):
        raise ValueError("global/nonlocal statements: inlining could change the behaviour")
    if _multiline_strings(rest):
        raise ValueError("multi-line string literals: indenting them would change their text")
    solves = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == "solve"]
    if len(solves) != 1:
        raise ValueError("expected exactly one top-level solve")
    fn = solves[0]
    lines = src.split("\n")

    def seg(node: ast.stmt) -> list[str]:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return lines[start - 1 : node.end_lineno]

    pre: list[str] = []
    prev: ast.stmt | None = None
    for node in body:
        if node is fn:
            continue
        if prev is not None and (isinstance(node, ast.FunctionDef) or isinstance(prev, ast.FunctionDef)
                                 or type(node) is not type(prev)):
            pre.append("")
        prev = node
        pre.extend(("    " + s) if s.strip() else "" for s in seg(node))
    header_end = fn.body[0].lineno - 1
    header = lines[fn.lineno - 1 : header_end]
    fn_body = lines[header_end : fn.end_lineno]
    new = header + pre + ([""] if pre else []) + fn_body
    out = "\n".join(new) + "\n"
    ast.parse(out)
    return out


def replace_solve(parent: str, new_solve: str) -> str:
    """``parent`` with its top-level ``solve`` replaced by ``new_solve`` (what a rewrite does)."""
    old = solve_lines(normalise(parent))
    if old is None:
        raise ValueError("parent has no top-level solve")
    p = normalise(parent)
    return p.replace(old, new_solve.rstrip("\n"), 1)


def rewrite_completion(parent: str, child_solve: str) -> tuple[str, str]:
    """(completion, child source) for a prompt primed with ``rewrite_tail(parent)``: the completion
    is the body of ``child_solve`` (a ``def solve`` with everything inside it; see
    :func:`inline_solve`) followed by the REPLACE marker. Verified to apply exactly."""
    tail = rewrite_tail(normalise(parent))
    if tail is None:
        raise ValueError("parent has no multi-line solve to rewrite")
    fn = ast.parse(child_solve).body[0]
    if not (isinstance(fn, ast.FunctionDef) and fn.name == "solve"):
        raise ValueError("child_solve must be one def solve")
    parent_header = tail.split(f"\n{DIVIDER}\n", 1)[1]
    lines = child_solve.rstrip("\n").split("\n")
    body = "\n".join(lines[fn.body[0].lineno - 1 :])
    completion = body + "\n" + END + "\n"
    child = replace_solve(parent, parent_header.rstrip("\n") + "\n" + body)
    _check(parent, as_proposal(completion, tail), child)
    return completion, child
