"""Deterministic rule-based solvers for the Ray executor tests (``python:tests/ray_solvers.py:NAME``).

``arith`` computes the arithmetic expression in the prompt when the prompt's hash is even and
answers "7" otherwise, so a run has right and wrong answers and J is strictly between 0 and 1.
``slow_arith`` is the same after a fixed wait, and appends a line to ``$HL_PROGRESS`` (when set)
for every call it finished, so a test can act mid-run.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re

_EXPR = re.compile(r"[0-9][0-9+\-*/(). ]*[0-9)]")


def arith(prompt, **params):
    text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
    if hashlib.sha256(text.encode()).digest()[0] % 2:
        return "7"
    exprs = _EXPR.findall(text.split("Answer:")[0])
    if not exprs:
        return "7"
    expr = max(exprs, key=len)
    if "**" in expr:
        return "7"
    try:
        value = eval(expr, {"__builtins__": {}}, {})  # digits and + - * / ( ) only (the regex)
    except (SyntaxError, ZeroDivisionError, TypeError):
        return "7"
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


async def slow_arith(prompt, **params):
    await asyncio.sleep(float(os.environ.get("HL_SOLVER_DELAY", "0.5")))
    out = arith(prompt)
    path = os.environ.get("HL_PROGRESS")
    if path:
        with open(path, "a") as f:
            f.write("done\n")
    return out
