"""A Python callable named by a reference: ``MODULE:FUNCTION`` (an importable module) or
``FILE.py:FUNCTION`` (a file, imported under a private module name). Used by ``python:`` models and by
user scorers (``jsonl:FILE?scorer=score.py:grade``); the callable runs in the trusted process."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError


def load(ref: str, what: str = "callable", shape: str = "MODULE:FUNCTION or FILE.py:FUNCTION") -> Callable[..., Any]:
    """The callable ``ref`` names; a UserError (naming ``what``) when it cannot be found or imported."""
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr:
        raise UserError(f"bad {what} {ref!r}: expected {shape}")
    if target.endswith(".py"):
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise UserError(f"{what} file not found: {target}")
        mod_name = f"_harnesslearn_ref_{abs(hash(str(path)))}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise UserError(f"cannot import {what} file {target}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            sys.modules.pop(mod_name, None)
            raise UserError(f"error importing {target}: {type(e).__name__}: {e}") from None
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            raise UserError(f"cannot import {what} module {target!r}: {e}") from None
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise UserError(f"{what} {target!r} has no callable {attr!r}")
    return fn


def source_digest(fn: Callable[..., Any]) -> str | None:
    """The sha256 of the file that defines ``fn`` (its whole module: a helper it calls counts too), or None
    when it has no source file (a builtin, a lambda typed at a prompt)."""
    for obj in (fn, type(fn)):
        try:
            path = inspect.getsourcefile(obj)
        except TypeError:
            continue
        if path is not None:
            try:
                return hashlib.sha256(Path(path).read_bytes()).hexdigest()
            except OSError:
                return None
    return None
