"""The settings engine: one declaration per field (type, default, bounds, help, CLI option), validated by
pydantic, composed into trees, recorded flat, compared on resume.

A settings object is a frozen pydantic model (``Settings``) whose fields are values or other settings
objects (groups: ``Splits``, ``Sampling``, ...). Every field is declared with ``setting``: its default, the
CLI option that sets it (None: set by ``--set KEY=VALUE`` or a config file), its help text, its bounds,
and whether it affects results. Validation is strict (a YAML ``true`` is not an integer, ``"8"`` is not
a number) and any failure is one ``UserError`` line naming the CLI option or the dotted key.

``record`` flattens a tree into ``{"splits.n_score": 16, ...}`` (what a run store keeps), ``from_record``
reads it back (keys it does not know are ignored, a missing key is its default), ``changes`` lists the
result-affecting leaves that differ from a record. ``leaves`` walks the tree: the loader (``load.py``)
and the CLI build their options and ``--set`` keys from it.
"""

from __future__ import annotations

import difflib
import functools
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harnesslearn.errors import UserError

S = TypeVar("S", bound="Settings")


def setting(default: Any, option: str | None, help: str, *, lo: float | None = None, hi: float | None = None,
            affects_results: bool = True) -> Any:
    """A settings field: its default, the CLI option that sets it (None: a config key only), help text,
    inclusive bounds (``lo``/``hi``), and whether a change of it changes results (compared on resume).
    A tuple field takes a YAML or JSON list too (``Settings`` turns it into a tuple; its items stay strict)."""
    extra = {"option": option, "affects_results": affects_results, "lo": lo, "hi": hi}
    kw: dict[str, Any] = {"description": help, "json_schema_extra": extra, "ge": lo, "le": hi}
    if isinstance(default, list | dict):
        value = default
        return Field(default_factory=lambda: type(value)(value), **kw)
    return Field(default, **kw)


class Settings(BaseModel):
    """A frozen, strictly validated settings object. Built by the loader (``load.load``, ``from_tree``), a
    bad value is a one-line ``UserError``; built directly, pydantic's ``ValidationError`` (the CLI turns a
    stray one into one line too, ``settings_error``)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, validate_default=False)
    # record keys of older versions -> today's dotted keys (read by ``from_record`` and the loader)
    legacy: ClassVar[dict[str, str]] = {}
    # whether the fields' ``option`` names are this tree's CLI (adapt: yes; a config file's tree, no: an
    # error names the dotted key there)
    cli_options: ClassVar[bool] = False

    @model_validator(mode="before")
    @classmethod
    def _lists_as_tuples(cls, data: Any) -> Any:
        """A list given for a tuple field (YAML, JSON, ``--set a,b``) is that tuple."""
        if isinstance(data, dict):
            tuples = _tuple_fields(cls)
            return {k: tuple(v) if k in tuples and isinstance(v, list) else v for k, v in data.items()}
        return data

    def with_(self: S, **changes: Any) -> S:
        """A copy with some dotted keys changed (``s.with_(**{"splits.n_score": 8})``), validated."""
        return from_tree(type(self), merge(self.model_dump(), unflatten(changes)))

    def record(self) -> dict[str, Any]:
        """The leaves as a flat JSON object keyed by dotted path."""
        return flatten(self.model_dump(mode="json"), groups_only=type(self))

    @classmethod
    def from_record(cls: type[S], data: Mapping[str, Any]) -> S:
        """Settings read back from ``record`` (or an older record: ``legacy`` keys are renamed; keys that
        are not settings, such as a run's identity, are ignored; a missing key is its default)."""
        known = {path for path, _ in leaves(cls)}
        flat = _flat_record(cls, data)
        return from_tree(cls, unflatten({k: v for k, v in flat.items() if k in known}), strict=False)

    def changes(self, recorded: Mapping[str, Any]) -> list[str]:
        """The result-affecting leaves that differ from a record, as ``"--option (recorded X, now Y)"``."""
        now = self.record()
        default = type(self)().record()
        was_all = _flat_record(type(self), recorded)
        out = []
        for path, leaf in leaves(type(self)):
            if not leaf.affects_results:
                continue
            was = was_all.get(path, default[path])
            if isinstance(now[path], list) and isinstance(was, tuple | list):
                was = list(was)
            if was != now[path]:
                out.append(f"{leaf.option or path} (recorded {was!r}, now {now[path]!r})")
        return out


def _flat_record(cls: type[Settings], data: Mapping[str, Any]) -> dict[str, Any]:
    """A record (or an older one) as today's dotted keys: flattened along ``cls``'s groups, legacy names renamed."""
    return {cls.legacy.get(k, k): v for k, v in flatten(dict(data), groups_only=cls).items()}


@functools.cache
def _tuple_fields(cls: type[BaseModel]) -> frozenset[str]:
    def has_tuple(ann: Any) -> bool:
        return typing.get_origin(ann) is tuple or any(typing.get_origin(a) is tuple for a in typing.get_args(ann))

    return frozenset(n for n, f in cls.model_fields.items() if has_tuple(f.annotation))


@dataclass(frozen=True)
class Leaf:
    """One value field of a settings tree."""

    path: str
    annotation: Any
    help: str
    option: str | None
    affects_results: bool
    default: Any


def _is_group(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def leaves(cls: type[BaseModel], prefix: str = "", defaults: BaseModel | None = None) -> Iterator[tuple[str, Leaf]]:
    """``(dotted path, Leaf)`` of every value field of ``cls``, groups walked depth first; a leaf's default
    is the tree's (a group's default object, such as ``Splits(n_feedback=4)``, sets its leaves')."""
    for name, f in cls.model_fields.items():
        path = prefix + name
        default = getattr(defaults, name) if defaults is not None else f.get_default(call_default_factory=True)
        if _is_group(f.annotation):
            yield from leaves(f.annotation, path + ".", default)  # type: ignore[arg-type]
            continue
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        yield path, Leaf(path, f.annotation, f.description or "", extra.get("option"),  # type: ignore[arg-type]
                         bool(extra.get("affects_results", True)), default)


def groups(cls: type[BaseModel], prefix: str = "") -> set[str]:
    """The dotted paths of the groups of ``cls``."""
    out = set()
    for name, f in cls.model_fields.items():
        if _is_group(f.annotation):
            out.add(prefix + name)
            out |= groups(f.annotation, prefix + name + ".")  # type: ignore[arg-type]
    return out


def flatten(tree: Mapping[str, Any], groups_only: type[BaseModel] | None = None) -> dict[str, Any]:
    """A nested mapping as dotted keys. With ``groups_only``, only the groups of that settings class are
    walked into (a dict-valued leaf or an unknown key stays whole)."""
    names = groups(groups_only) if groups_only is not None else None

    def walk(node: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
        for k, v in node.items():
            path = f"{prefix}{k}"
            if isinstance(v, Mapping) and (names is None or path in names):
                yield from walk(v, path + ".")
            else:
                yield path, v

    return dict(walk(tree, ""))


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys as a nested mapping (``{"a.b": 1}`` -> ``{"a": {"b": 1}}``); a key that is both a value
    and a group is a UserError."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = str(key).split(".")
        node = out
        for i, p in enumerate(parts[:-1]):
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise UserError(f"key {'.'.join(parts[:i + 1])!r} is a value, so {key!r} cannot set a key inside it")
            node = nxt
        if isinstance(value, Mapping):
            value = unflatten(value)
            if isinstance(node.get(parts[-1]), dict):
                value = merge(node[parts[-1]], value)
        node[parts[-1]] = value
    return out


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base``, nested mappings merged key by key."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def from_tree(cls: type[S], tree: Mapping[str, Any], *, strict: bool = True, label: str = "{}",
              where: str | None = None) -> S:
    """Validate a nested mapping into ``cls``, laid on the class's default tree (a partial group keeps the
    defaults the tree gives it, not its own class's); a failure is one UserError line."""
    try:
        return cls.model_validate(merge(cls().model_dump(), tree), strict=strict)
    except ValidationError as e:
        raise settings_error(cls, e, label=label, where=where) from None


_KINDS = {"int_type": "an integer", "float_type": "a number", "bool_type": "true or false",
          "string_type": "text", "tuple_type": "a list", "list_type": "a list", "dict_type": "a mapping",
          "model_type": "a mapping", "model_attributes_type": "a mapping", "int_from_float": "an integer",
          "float_parsing": "a number", "int_parsing": "an integer"}


def settings_error(cls: type[BaseModel], e: ValidationError, *, label: str = "{}", where: str | None = None) -> UserError:
    """A pydantic failure as one line: the option (or dotted key, formatted with ``label``) and why."""
    err = e.errors(include_url=False)[0]
    loc = [str(x) for x in err["loc"]]
    known = dict(leaves(cls))
    names = groups(cls)
    path = ""
    for i in range(len(loc), 0, -1):  # the longest prefix that names a field (union arms add parts)
        cand = ".".join(loc[:i])
        if cand in known or cand in names:
            path = cand
            break
    leaf = known.get(path)
    name = (leaf.option if leaf and leaf.option and getattr(cls, "cli_options", False) and where is None
            else label.format(path or ".".join(loc)))
    kind, value = err["type"], err.get("input")
    head = f"{where}: " if where else ""
    if kind == "extra_forbidden":
        key = ".".join(loc)
        legacy = getattr(cls, "legacy", {})
        if key in legacy:
            return UserError(f"{head}unknown key {key!r} (did you mean {legacy[key]!r}? the settings are a tree now)")
        near = difflib.get_close_matches(key, sorted(known) + sorted(names), n=1, cutoff=0.5)
        last = difflib.get_close_matches(loc[-1], [p.rsplit(".", 1)[-1] for p in known], n=1, cutoff=0.75)
        if not near and last:
            near = [p for p in known if p.rsplit(".", 1)[-1] == last[0]][:1]
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        return UserError(f"{head}unknown key {key!r}{hint}")
    if kind == "literal_error":
        choices = _choices(leaf.annotation if leaf else None) or [err.get("ctx", {}).get("expected", "")]
        return UserError(f"{head}{name} must be one of {', '.join(map(str, choices))} (got {_shown(value)})")
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        lo, hi = _bounds(cls, path)
        ctx = err.get("ctx", {})
        sign = {"greater_than_equal": ">=", "less_than_equal": "<=", "greater_than": ">", "less_than": "<"}[kind]
        bound = (f"between {_num(lo)} and {_num(hi)}" if lo is not None and hi is not None and kind.endswith("_equal")
                 else f"{sign} {next(iter(ctx.values()), '?')}")
        return UserError(f"{head}{name} must be {bound} (got {_shown(value)})")
    if kind == "missing":
        return UserError(f"{head}{name} is required")
    if kind in _KINDS:
        return UserError(f"{head}{name} must be {_KINDS[kind]} (got {_shown(value)})")
    return UserError(f"{head}{name}: {err['msg']} (got {_shown(value)})")


def _shown(value: Any, limit: int = 80) -> str:
    """A bad value as an error message shows it: its repr, cut to ``limit`` characters with the length said (a
    900 KB value was once echoed whole on one line)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _num(x: float) -> str:
    """A bound as people write it: 1000000, not 1e+06; 0.001 and 1e-12 as they are."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _choices(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) is Literal:
        return list(typing.get_args(annotation))
    for arm in typing.get_args(annotation):
        if typing.get_origin(arm) is Literal:
            return list(typing.get_args(arm))
    return []


def _bounds(cls: type[BaseModel], path: str) -> tuple[float | None, float | None]:
    node: type[BaseModel] = cls
    parts = path.split(".")
    for p in parts[:-1]:
        node = node.model_fields[p].annotation  # type: ignore[assignment]
    f = node.model_fields.get(parts[-1])
    extra = f.json_schema_extra if f is not None and isinstance(f.json_schema_extra, dict) else {}
    return extra.get("lo"), extra.get("hi")  # type: ignore[return-value]
