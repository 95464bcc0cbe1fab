"""Failure taxonomy: why a problem failed, automatically, from its run record.

Classes, checked in this order for a problem whose score is below 1:

1. ``timeout_or_budget``: the run ended with status timeout, budget_exceeded or memory.
2. ``communication``: a model or tool call failed (it carries an error, or the python tool
   answered ``"Error: ..."``) or returned unusable output (an empty/whitespace completion).
   A harness_error whose run contains such a call lands here: the exception followed a failed
   exchange between components.
3. ``harness_error``: status harness_error, crash, no_result or bad_result with no failed call.
4. ``extraction``: the gold answer (or one of its aliases) appears as a whole token in some
   call's output (a solver completion or a python tool result) but the returned answer is not
   that gold answer (after lower-casing and collapsing whitespace).
5. ``reasoning``: none of the above: the components talked fine and the solver got it wrong.

Not classified (``None``): a full score, or an infrastructure failure (score None).

What it does not catch: a gold answer written differently in a completion (``6.0`` vs ``6``,
``six``) is not an extraction failure; a completion that is non-empty but garbage counts as
reasoning, not communication; a short gold answer ("1", "a") may appear in a completion by
accident and make a reasoning failure look like extraction.

``find_answer_tables`` flags a literal question->answer table in a harness source (see there).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class FailureKind(StrEnum):
    HARNESS_ERROR = "harness_error"
    TIMEOUT_OR_BUDGET = "timeout_or_budget"
    EXTRACTION = "extraction"
    COMMUNICATION = "communication"
    REASONING = "reasoning"


_BUDGET_STATUSES = {"timeout", "budget_exceeded", "memory"}
_HARNESS_STATUSES = {"harness_error", "crash", "no_result", "bad_result"}


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def _texts(value: Any) -> list[str]:
    """All strings inside a call response (a str, a list of completions, a list of dicts...)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, Iterable):
        return [t for v in value for t in _texts(v)]
    return [str(value)]


def gold_aliases(gold: Any) -> list[str]:
    """Gold answer(s) as normalised strings. A JSON list stored as text is decoded."""
    if isinstance(gold, str) and gold.startswith("["):
        try:
            gold = json.loads(gold)
        except json.JSONDecodeError:
            pass
    return [a for a in (_norm(t) for t in _texts(gold)) if a]


def _contains_token(haystack: str, needle: str) -> bool:
    pattern = r"(?<![\w.])" + re.escape(needle) + r"(?![\w])"
    return re.search(pattern, _norm(haystack)) is not None


def _get(call: Any, name: str) -> Any:
    return call.get(name) if isinstance(call, Mapping) else getattr(call, name, None)


def _call_failed(call: Any) -> bool:
    if _get(call, "error"):
        return True
    kind, texts = _get(call, "kind"), _texts(_get(call, "response"))
    if kind == "model":
        return not texts or all(not t.strip() for t in texts)
    if kind == "python":
        return any(t.lstrip().startswith("Error:") for t in texts)
    return False


def classify(
    *, status: str, score: float | None, answer: str | None, gold: Any, calls: Sequence[Any] = ()
) -> FailureKind | None:
    """The failure class of one problem, or None when it did not fail (or was not scored).
    ``calls`` are CallRecord objects or store rows (dicts with kind, response, error)."""
    if score is None or score >= 1.0 or status == "infra_error":
        return None
    if status in _BUDGET_STATUSES:
        return FailureKind.TIMEOUT_OR_BUDGET
    if any(_call_failed(c) for c in calls):
        return FailureKind.COMMUNICATION
    if status in _HARNESS_STATUSES:
        return FailureKind.HARNESS_ERROR
    golds = gold_aliases(gold)
    outputs = [t for c in calls for t in _texts(_get(c, "response"))]
    returned = _norm(answer or "")
    if returned not in golds and any(_contains_token(o, g) for o in outputs for g in golds):
        return FailureKind.EXTRACTION
    return FailureKind.REASONING


def classify_result(problem: Any) -> FailureKind | None:
    """``classify`` for an evaluation.ProblemResult (uses its run record's calls)."""
    record = getattr(problem, "record", None)
    return classify(
        status=str(problem.status),
        score=problem.score,
        answer=problem.answer,
        gold=problem.gold,
        calls=list(getattr(record, "calls", None) or []),
    )


def rollup(rows: Iterable[tuple[str | None, str | None]]) -> dict[str, dict[str, int]]:
    """Counts per family and failure class from (family, taxonomy) pairs (``store.ProblemRow``
    fields). Pairs without a taxonomy (successes) are skipped."""
    out: dict[str, dict[str, int]] = {}
    for family, kind in rows:
        if not kind:
            continue
        fam = family or "unknown"
        out.setdefault(fam, {k.value: 0 for k in FailureKind})
        out[fam][kind] = out[fam].get(kind, 0) + 1
    return out


# ---------------------------------------------------------------- answer tables


@dataclass(frozen=True)
class TableFlag:
    kind: str  # "question_literal" | "dict_literal" | "pair_list"
    line: int
    detail: str


MIN_TABLE_ENTRIES = 8
MIN_QUESTION_CHARS = 12


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_const(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str | int | float)


def find_answer_tables(source: str, questions: Iterable[str] = ()) -> list[TableFlag]:
    """Flag a literal question->answer table in a harness source (AST scan; never executes).

    Flags: (a) ``question_literal``: a string constant that contains one of ``questions``
    (normalised, at least MIN_QUESTION_CHARS long); (b) ``dict_literal``: a dict display with at
    least MIN_TABLE_ENTRIES entries whose keys are all string constants and values constants;
    (c) ``pair_list``: a list/tuple/set display of at least MIN_TABLE_ENTRIES 2-tuples of
    constants with a string first element.

    Does not catch: tables built at run time (split/joined/encoded/compressed strings, base64,
    arithmetic on keys), tables smaller than the threshold, answers embedded in a prompt as
    prose that does not repeat a known question verbatim. May flag legitimate constant maps
    (e.g. a word->digit map of eight or more entries); a flag is evidence to look at, not proof.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    qs = [q for q in (_norm(q) for q in questions) if len(q) >= MIN_QUESTION_CHARS]
    flags: list[TableFlag] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        s = _const_str(node)
        if s is not None and qs:
            ns = _norm(s)
            hit = next((q for q in qs if q in ns), None)
            if hit is not None:
                flags.append(TableFlag("question_literal", line, f"contains a problem question: {hit[:60]!r}"))
        if isinstance(node, ast.Dict) and len(node.keys) >= MIN_TABLE_ENTRIES:
            if all(_const_str(k) is not None for k in node.keys) and all(_is_const(v) for v in node.values):
                flags.append(TableFlag("dict_literal", line, f"dict literal with {len(node.keys)} constant entries"))
        if isinstance(node, ast.List | ast.Tuple | ast.Set) and len(node.elts) >= MIN_TABLE_ENTRIES:
            pairs = [
                e for e in node.elts
                if isinstance(e, ast.Tuple) and len(e.elts) == 2 and _const_str(e.elts[0]) is not None
                and _is_const(e.elts[1])
            ]
            if len(pairs) == len(node.elts):
                flags.append(TableFlag("pair_list", line, f"{len(pairs)} literal (key, value) pairs"))
    return flags


SOLVER_USES = ("computes", "solver_program", "prompt_level", "invalid")


def solver_use(source: str) -> str:
    """What a harness does with its solver, from its source (no run needed):

    - ``computes``: ``solve()`` never calls the model: the answer is computed in Python (GEPA's gcd program);
    - ``solver_program``: the solver writes a program that ``model.python`` runs (the zoo's interpreter loop);
    - ``prompt_level``: solver calls and Python around them (prompts, extraction, post-processing);
    - ``invalid``: no parseable module with a ``solve`` function.

    The model is ``solve``'s first parameter, followed into the module's functions that receive it as an argument;
    a top-level ``if __name__ == "__main__":`` block is not the harness and is left out.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "invalid"
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    solve = funcs.get("solve")
    if solve is None or not solve.args.args:
        return "invalid"
    reached, todo, uses = set(), [(solve, solve.args.args[0].arg)], set()
    while todo:
        fn, name = todo.pop()
        if (fn.name, name) in reached:
            continue
        reached.add((fn.name, name))
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name) and f.id == name:
                uses.add("call")
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == name:
                uses.add("python" if f.attr == "python" else "call")
            callee = funcs.get(f.id) if isinstance(f, ast.Name) else None
            if callee is not None:  # the model passed on to a helper of the module: follow it there
                params = [a.arg for a in callee.args.args]
                for i, arg in enumerate(node.args):
                    if isinstance(arg, ast.Name) and arg.id == name and i < len(params):
                        todo.append((callee, params[i]))
                for kw in node.keywords:
                    if isinstance(kw.value, ast.Name) and kw.value.id == name and kw.arg in params:
                        todo.append((callee, kw.arg))
    if "python" in uses:
        return "solver_program"
    return "prompt_level" if uses else "computes"


HARNESS_KINDS = ("zoo_copy", "computes", "solver_program", "prompt_level")


def harness_kind(source: str) -> str:
    """What a revision is, as the peers summary and the training comparisons count it: ``zoo_copy`` for a near-copy
    of a zoo file (difflib ratio ``zoo.NEAR_COPY`` or more: what a proposer was shown, written back), else its
    ``solver_use`` (``invalid`` where no ``solve`` can be read). ~0.1 s a harness (difflib)."""
    from harnesslearn.zoo import NEAR_COPY, nearest

    return "zoo_copy" if nearest(source)[1] >= NEAR_COPY else solver_use(source)


def runs_solver_code(source: str) -> bool:
    """Whether a harness runs code the solver wrote: a ``model.python(...)`` call whose code argument comes from
    the solver's output (the zoo's interpreter loop, the runtime API's "write a program and run it" pattern).

    Read from the source, never run: in ``solve`` and in every module function the model is passed to (followed
    as :func:`solver_use` follows it, with the parameters it is handed solver output in marked), a name is the
    solver's output when something assigned to it (``=``,
    ``+=``, a ``for`` target, a walrus, ``with ... as``) holds a call of the model (``model(...)``,
    ``model.generate(...)``; not ``model.python`` or ``model.search``), a call that is handed the model, or a name
    already marked so, repeated until nothing changes; the code argument is marked the same way. What it does
    not catch: solver output that reaches the code through a container mutated in place (``parts.append(reply)``
    then ``model.python("".join(parts))``), an attribute or a global, or a helper's return value when the model is
    not passed to the helper. Order is ignored (a name assigned the solver's output anywhere in the function is
    marked everywhere), so code the harness wrote itself into a name that also holds solver output counts."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    solve = funcs.get("solve")
    if solve is None or not solve.args.args:
        return False
    seen: set[tuple[str, str, frozenset[str]]] = set()
    todo: list[tuple[Any, str, frozenset[str]]] = [(solve, solve.args.args[0].arg, frozenset())]
    while todo:
        fn, model, given = todo.pop()  # given: the parameters handed the solver's output by the caller
        if (fn.name, model, given) in seen:
            continue
        seen.add((fn.name, model, given))
        marked = _solver_output_names(fn, model, set(given))
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == "python" and isinstance(f.value, ast.Name)
                    and f.value.id == model):
                code = node.args[:1] + [k.value for k in node.keywords if k.arg == "code"]
                if any(_holds_output(c, model, marked) for c in code):
                    return True
            callee = funcs.get(f.id) if isinstance(f, ast.Name) else None
            if callee is None:
                continue
            # the model handed to a helper of the module: follow it there, with the parameters given solver output
            params = [a.arg for a in callee.args.args]
            bound = [(params[i], a) for i, a in enumerate(node.args) if i < len(params)]
            bound += [(k.arg, k.value) for k in node.keywords if k.arg in params]
            handles = [p for p, a in bound if isinstance(a, ast.Name) and a.id == model]
            outputs = frozenset(p for p, a in bound if p not in handles and _holds_output(a, model, marked))
            todo += [(callee, h, outputs) for h in handles]
    return False


def _holds_output(expr: ast.AST, model: str, marked: set[str]) -> bool:
    """Whether ``expr`` holds a marked name, a call of the model other than its tools, or a call handed the model."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id in marked:
            return True
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == model:
                return True
            if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == model
                    and f.attr not in ("python", "search")):
                return True
            if any(isinstance(a, ast.Name) and a.id == model for a in [*node.args, *(k.value for k in node.keywords)]):
                return True
    return False


def _solver_output_names(fn: ast.AST, model: str, marked: set[str]) -> set[str]:
    """The names of ``fn`` that hold the solver's output (see :func:`runs_solver_code`), from ``marked`` to a
    fixed point."""
    pairs: list[tuple[ast.AST, ast.AST]] = []  # (target, value) of every binding in the function
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            pairs += [(t, node.value) for t in node.targets]
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value is not None:
            pairs.append((node.target, node.value))
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            pairs.append((node.target, node.iter))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            pairs.append((node.optional_vars, node.context_expr))
    grew = True
    while grew:
        grew = False
        for target, value in pairs:
            names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} - marked - {model}
            if names and _holds_output(value, model, marked):
                marked |= names
                grew = True
    return marked


def solver_code_share(sources: Iterable[str]) -> float | None:
    """The share of ``sources`` (proposals' harnesses) that run solver-written code (:func:`runs_solver_code`);
    None for none."""
    flags = [runs_solver_code(s) for s in sources]
    return sum(flags) / len(flags) if flags else None
