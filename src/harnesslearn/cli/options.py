"""CLI options generated from a settings tree (``harnesslearn.settings``): one typer option per field that
names one (its help, its default shown, its type), plus ``--config FILE`` and ``--set KEY=VALUE`` for every
other field, all read by the one loader (``settings.load.load``). The command receives the validated tree
as ``settings``; a bad value is one line and exit 2, before anything runs."""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from harnesslearn.settings.base import Leaf, Settings, leaves
from harnesslearn.settings.load import load, parse_value

SET_HELP = ("KEY=VALUE: set any setting by its dotted key (e.g. splits.n_score=8, budgets.max_calls=4); "
            "repeat it. Applied after --config, before the options above.")


def _cli_type(leaf: Leaf) -> Any:
    ann = leaf.annotation
    arms = [a for a in typing.get_args(ann) if a is not type(None)] \
        if typing.get_origin(ann) in (typing.Union, types.UnionType) else [ann]
    arm = arms[0]
    if typing.get_origin(arm) in (Literal, tuple):  # choices are checked by the settings; a list is "a,b"
        return str
    return arm


def settings_options(cls: type[Settings], base: Callable[[], Settings] | None = None,
                     config: bool = True) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorate a command taking ``settings: cls``: its signature gains the generated options. ``base``
    gives the defaults the options are laid on (the class's own when None)."""

    def wrap(fn: Callable[..., None]) -> Callable[..., None]:
        generated: list[tuple[str, str]] = []  # (parameter name, dotted key)
        annotations: dict[str, Any] = {}
        extra: list[inspect.Parameter] = []
        for path, leaf in leaves(cls):
            if leaf.option is None:
                continue
            pname = "opt_" + path.replace(".", "__")
            default = leaf.default
            shown = ", ".join(map(str, default)) if isinstance(default, tuple) else default
            help_ = leaf.help + ("" if isinstance(default, bool) else f" [default: {shown}]")
            extra.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
                _cli_type(leaf) | None, typer.Option(*leaf.option.split(" "), help=help_, show_default=False)]))
            generated.append((pname, path))
            annotations[path] = leaf.annotation
        if config:
            extra.append(inspect.Parameter("opt_config", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
                Path | None, typer.Option("--config", help="A YAML file of settings (the tree's shape, dotted keys "
                                          "allowed), applied before --set and the options above.")]))
        extra.append(inspect.Parameter("opt_set", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
            list[str] | None, typer.Option("--set", help=SET_HELP, metavar="KEY=VALUE")]))
        own_hints = typing.get_type_hints(fn, include_extras=True)
        sig = inspect.signature(fn)
        own = [p.replace(annotation=own_hints[p.name]) for p in sig.parameters.values() if p.name != "settings"]

        @functools.wraps(fn)
        def command(**kw: Any) -> None:
            options = {path: kw.pop(pname) for pname, path in generated}
            options = {k: parse_value(v, annotations[k]) if isinstance(v, str) and typing.get_origin(annotations[k])
                       is tuple else v for k, v in options.items()}
            settings = load(cls, kw.pop("opt_config", None), kw.pop("opt_set", None) or (),
                            base=base() if base is not None else None,
                            options={k: v for k, v in options.items() if v is not None})
            fn(settings=settings, **kw)

        params = own + extra
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        return command

    return wrap
