"""The one settings loader: defaults, then a YAML file, then dotted ``KEY=VALUE`` overrides, then the
values of explicit CLI options, validated once into a settings tree (``harnesslearn.cli.options``
generates the options from the same tree).

A YAML file is a mapping shaped like the tree (``splits: {n_score: 8}``; a dotted key ``splits.n_score: 8``
is the same). It is read defensively, since it is user input: at most 1 MiB, UTF-8, no anchors or
aliases (a "billion laughs" file expands without bound), bounded nesting. An override's text is typed
by the field it sets (``8`` for an integer, ``1e-5`` for a number, ``true`` for a flag, ``a,b`` for a
list, ``none`` for an optional value).
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from harnesslearn.errors import UserError
from harnesslearn.settings.base import Settings, from_tree, leaves, merge, unflatten

S = TypeVar("S", bound=Settings)
MAX_CONFIG_BYTES = 1024 * 1024
MAX_DEPTH = 32


def load(cls: type[S], config: str | Path | None = None, overrides: Iterable[str] = (), *,
         base: S | None = None, options: Mapping[str, Any] | None = None, label: str = "{}") -> S:
    """``cls`` from its defaults (or ``base``), a YAML file, ``KEY=VALUE`` overrides and ``options``
    (dotted key -> value, already typed: the CLI options a user gave). Any mistake is one UserError line."""
    tree: dict[str, Any] = base.model_dump() if base is not None else {}
    where = None
    if config is not None:
        where = f"config {Path(config).name}"
        tree = merge(tree, unflatten(read_yaml(config)))
    if overrides:
        tree = merge(tree, unflatten(parse_overrides(cls, overrides)))
        where = None if config is None else where
    if options:
        tree = merge(tree, unflatten(options))
    return from_tree(cls, tree, label=label if config is None else "key '{}'", where=where)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML config file as a mapping (empty file: ``{}``); UserError for anything else."""
    p = Path(path)
    if not str(path).strip():
        raise UserError("the config path is empty")
    if not p.is_file():
        raise UserError(f"config not found: {path}" if not p.exists() else f"config {path} is not a file")
    try:
        data = p.read_bytes()[: MAX_CONFIG_BYTES + 1]
    except OSError as e:
        raise UserError(f"cannot read config {path}: {e.strerror or e}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise UserError(f"config {path} is larger than {MAX_CONFIG_BYTES // 1024} KiB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"config {path} is not UTF-8 text (byte {e.start})") from None
    try:
        raw = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader without aliases
    except yaml.YAMLError as e:
        raise UserError(f"config {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    except RecursionError:
        raise UserError(f"config {path} is nested too deeply") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UserError(f"config {path}: expected a mapping of keys to values")
    _check_depth(raw, str(path))
    return raw


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, refusing anchors and aliases, reading ``1e-5`` as a number (YAML 1.1 needs a dot)."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.constructor.ConstructorError(None, None, "aliases (*name) are not allowed in a config",
                                                    event.start_mark)
        return super().compose_node(parent, index)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


# YAML 1.1 reads 1:30 as the base-60 number 90 (int or float): read such a value as the text it is, so that a
# setting that wants a number refuses it in one line instead of taking 90 silently
_SEXAGESIMAL = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
_Loader.yaml_implicit_resolvers = {
    first: ([("tag:yaml.org,2002:str", _SEXAGESIMAL)] if first in "-+0123456789" else []) + list(resolvers)
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()}


def _check_depth(node: Any, path: str, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise UserError(f"config {path} is nested too deeply")
    if isinstance(node, dict):
        for k, v in node.items():
            if not isinstance(k, str):
                raise UserError(f"config {path}: key {k!r} is not text")
            _check_depth(v, path, depth + 1)
    elif isinstance(node, list):
        for v in node:
            _check_depth(v, path, depth + 1)


def parse_overrides(cls: type[Settings], overrides: Iterable[str]) -> dict[str, Any]:
    """``["splits.n_score=8", ...]`` as ``{dotted key: typed value}``; an unknown key (with the near one)
    or a text that is not ``KEY=VALUE`` is a UserError."""
    known = dict(leaves(cls))
    out: dict[str, Any] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--set takes KEY=VALUE (got {item!r})")
        if key not in known:
            import difflib

            near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.5)
            raise UserError(f"--set: unknown key {key!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
        out[key] = parse_value(text.strip(), known[key].annotation)
    return out


def parse_value(text: str, annotation: Any) -> Any:
    """The text of a value typed by the field's annotation (the first arm of a union that reads it)."""
    arms = list(typing.get_args(annotation)) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else [annotation]
    if text.lower() in ("none", "null", "~") and type(None) in arms:
        return None
    if "," in text and any(typing.get_origin(a) in (tuple, list) for a in arms):
        return [x.strip() for x in text.split(",") if x.strip()]
    for arm in arms:
        origin = typing.get_origin(arm)
        if arm is bool and text.lower() in _BOOLS:
            return _BOOLS[text.lower()]
        if arm is int:
            try:
                return int(text)
            except ValueError:
                continue
        if arm is float:
            try:
                return float(text)
            except ValueError:
                continue
        if origin in (tuple, list):
            return [x.strip() for x in text.split(",") if x.strip()]
        if arm is str or origin is Literal:
            return text
    return text  # validation names what it should have been


_BOOLS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
