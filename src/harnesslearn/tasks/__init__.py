"""Tasks: load one from a spec string, list what exists.

Specs (DESIGN.md): ``rg:FAMILY[?key=value&...]`` (``strict=1`` is ours; every other key goes to
the family's generator config), ``musique:PATH``, ``hotpotqa:PATH``, ``2wiki:PATH`` (``?metric=
em|f1``, ``?corpus=PATH``, ``?select=PATH``: feedback and score from that file), ``jsonl:PATH?scorer=exact|f1|numeric|FILE.py:FUNCTION``. A relative QA path that is
not found is also looked up in the shared QA data folder (``qa_data_dir()``).

The registry (``TASK_KINDS``) maps a spec prefix to a loader; ``register_task_kind`` adds one.
Every user mistake raises ``UserError`` with a one-line message.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harnesslearn import specs
from harnesslearn.errors import UserError
from harnesslearn.tasks.base import SPLITS, Problem, Score, SplitSizes, Task, split_of
from harnesslearn.tasks.families import FAMILY_SETS, family_set

Options = dict[str, Any]
Loader = Callable[[str, Options, str, SplitSizes | None], Task]  # (rest, options, spec, sizes)


@dataclass(frozen=True)
class TaskKind:
    prefix: str
    loader: Loader
    usage: str  # spec shape shown by `harnesslearn tasks`
    description: str


TASK_KINDS: dict[str, TaskKind] = {}


def register_task_kind(prefix: str, loader: Loader, usage: str, description: str) -> None:
    """Add a spec prefix. Raises ``ValueError`` if the prefix is taken (a programming error)."""
    if prefix in TASK_KINDS:
        raise ValueError(f"task kind {prefix!r} is already registered")
    TASK_KINDS[prefix] = TaskKind(prefix, loader, usage, description)


# ---------------------------------------------------------------------- spec parsing
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)$")


def parse_value(raw: str) -> Any:
    """A query value as int, float, bool, None or JSON when it looks like one, else the string."""
    low = raw.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none"):
        return None
    if _INT.match(raw.strip()):
        try:
            return int(raw)
        except ValueError:  # more than 4,300 digits
            raise UserError(f"option value {raw[:20]}... is an integer of {len(raw.strip()):,} digits") from None
    if _FLOAT.match(raw.strip()):
        return float(raw)
    if raw.strip()[:1] in ("[", "{", '"'):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # JSONDecodeError, an integer of over 4,300 digits, deep nesting
            raise UserError(f"option value {raw!r} looks like JSON but does not parse") from None
    return raw


def parse_spec(spec: str) -> tuple[str, str, Options]:
    """``PREFIX:REST?k=v&k2=v2`` -> (prefix, rest, options), values typed by ``parse_value``
    (the shared parser ``harnesslearn.specs.parse_spec`` splits the spec)."""
    s = specs.parse_spec(spec, "task spec", "a prefix such as rg:FAMILY or jsonl:PATH")
    return s.prefix, s.name, {k: parse_value(v) for k, v in s.options.items()}


def _take_bool(options: Options, key: str, spec: str) -> bool:
    v = options.pop(key, False)
    if isinstance(v, bool) or v in (0, 1):
        return bool(v)
    raise UserError(f"task spec {spec!r}: {key} must be 1/0 or true/false")


def _take_str(options: Options, key: str, default: str | None) -> str | None:
    v = options.pop(key, default)
    return None if v is None else str(v)


def _no_more(options: Options, spec: str, allowed: list[str]) -> None:
    for k in options:
        close = difflib.get_close_matches(k, allowed, n=1)
        hint = f"; did you mean {close[0]}?" if close else (f"; options: {', '.join(allowed)}" if allowed else "")
        raise UserError(f"task spec {spec!r}: unknown option {k!r}{hint}")


# ---------------------------------------------------------------------- loaders
def _load_rg(rest: str, options: Options, spec: str, sizes: SplitSizes | None) -> Task:
    from harnesslearn.tasks.reasoning_gym import RGTask

    if not rest:
        raise UserError("rg: needs a family, e.g. rg:basic_arithmetic (see `harnesslearn tasks`)")
    strict = _take_bool(options, "strict", spec)
    return RGTask(rest, options, strict=strict, spec=spec, split_sizes=sizes)


def _qa_loader(kind: str) -> Loader:
    def load(rest: str, options: Options, spec: str, sizes: SplitSizes | None) -> Task:
        from harnesslearn.tasks.qa import QATask

        metric = _take_str(options, "metric", "em") or "em"
        corpus = _take_str(options, "corpus", None)
        select = _take_str(options, "select", None)
        _no_more(options, spec, ["metric", "corpus", "select"])
        return QATask(kind, rest, metric=metric, corpus=corpus, spec=spec, split_sizes=sizes, select=select)

    return load


def _load_jsonl(rest: str, options: Options, spec: str, sizes: SplitSizes | None) -> Task:
    from harnesslearn.tasks.jsonl import JsonlTask

    scorer = _take_str(options, "scorer", "exact") or "exact"
    _no_more(options, spec, ["scorer"])
    return JsonlTask(rest, scorer=scorer, spec=spec, split_sizes=sizes)


register_task_kind(
    "rg", _load_rg, "rg:FAMILY[?key=value&strict=1]",
    "a Reasoning Gym family; keys go to its generator config; strict=1 counts only full scores",
)
register_task_kind(
    "musique", _qa_loader("musique"), "musique:PATH[?metric=em|f1&corpus=PATH&select=PATH]",
    "MuSiQue multi-hop QA (JSON/JSONL); search over the question's paragraphs or a corpus",
)
register_task_kind(
    "hotpotqa", _qa_loader("hotpotqa"), "hotpotqa:PATH[?metric=em|f1&corpus=PATH&select=PATH]",
    "HotpotQA multi-hop QA (JSON/JSONL); search over the question's paragraphs or a corpus",
)
register_task_kind(
    "2wiki", _qa_loader("2wiki"), "2wiki:PATH[?metric=em|f1&corpus=PATH&select=PATH]",
    "2WikiMultihopQA (JSON/JSONL); search over the question's paragraphs or a corpus",
)
register_task_kind(
    "jsonl", _load_jsonl, "jsonl:PATH[?scorer=exact|f1|numeric|FILE.py:FUNCTION|MODULE:FUNCTION]",
    "user tasks: one {id, question, answer} object a line",
)


# ---------------------------------------------------------------------- public API
def load_task(spec: str, *, split_sizes: SplitSizes | None = None) -> Task:
    """Build a task from its spec. Raises ``UserError`` (one line) for any bad input."""
    prefix, rest, options = parse_spec(spec)
    spec = spec.strip()
    kind = TASK_KINDS.get(prefix)
    if kind is None:
        close = difflib.get_close_matches(prefix, list(TASK_KINDS), n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(TASK_KINDS)}"
        raise UserError(f"unknown task kind {prefix!r} in {spec!r}{hint}")
    return kind.loader(rest, options, spec, split_sizes)


def list_tasks() -> dict[str, Any]:
    """What ``harnesslearn tasks`` shows: spec shapes, all Reasoning Gym families (105 in
    reasoning-gym 0.1.25; ``composite`` is left out), the named family sets, and the QA data
    files found in the shared data folder (empty when there is none)."""
    from harnesslearn.tasks.qa import qa_data_dir
    from harnesslearn.tasks.reasoning_gym import rg_families

    qa_dir = qa_data_dir()
    return {
        "specs": [{"spec": k.usage, "description": k.description} for k in TASK_KINDS.values()],
        "reasoning_gym": rg_families(),
        "family_sets": {name: list(fams) for name, fams in FAMILY_SETS.items()},
        "qa_data_dir": str(qa_dir) if qa_dir else None,
        "qa_files": sorted(p.name for p in qa_dir.glob("*.json*")) if qa_dir else [],
    }


__all__ = [
    "SPLITS",
    "FAMILY_SETS",
    "Problem",
    "Score",
    "SplitSizes",
    "Task",
    "TaskKind",
    "TASK_KINDS",
    "family_set",
    "list_tasks",
    "load_task",
    "parse_spec",
    "register_task_kind",
    "split_of",
]
