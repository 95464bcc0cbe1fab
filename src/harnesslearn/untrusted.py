"""Untrusted text on the trusted side: what a harness, a solver or a proposer sends can be any JSON a
Python ``json`` module decodes, including strings that no UTF-8 file, SQLite row or terminal accepts
(a lone surrogate such as ``"\\ud800"``). These helpers find such strings and make them storable.

The sandbox's channel refuses a frame carrying one (``lone_surrogate``: the problem's run is a
``bad_result``); the store, the ``--json`` output and the report write any text that still carries one
escaped (``escape``: ``\\ud800`` as the six characters ``\\ud800``), never raising.
"""

from __future__ import annotations

from typing import Any


def encodable(s: str) -> bool:
    """Whether ``s`` encodes as UTF-8 (no lone surrogate)."""
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def escape(s: str) -> str:
    """``s`` with every lone surrogate written as a backslash escape (``s`` itself when it has none)."""
    return s if encodable(s) else s.encode("utf-8", "backslashreplace").decode("utf-8")


def lone_surrogate(obj: Any) -> str | None:
    """Where a decoded JSON value carries a string (key or value) that is not valid UTF-8, as a short
    path (``answer``, ``request.prompt[2].content``; ``""`` for the value itself), or None when it
    carries none. Iterative: a frame nested as deep as ``json.loads`` allows is walked whole."""
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, str):
            if not encodable(v):
                return path
        elif isinstance(v, dict):
            for k, item in v.items():
                key = escape(str(k))[:40]
                if isinstance(k, str) and not encodable(k):
                    return f"{path}.{key} (key)" if path else f"{key} (key)"
                stack.append((f"{path}.{key}" if path else key, item))
        elif isinstance(v, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(v))
    return None


def storable(value: Any) -> Any:
    """A value bound to an SQLite statement, made storable: a str with a lone surrogate escaped."""
    return escape(value) if isinstance(value, str) else value
