"""Scripted `python:` models for the expert-iteration SFT data tests: one function is both the solver and the
proposer (the transfer recipe's untrained proposer is the solver model itself). Asked to revise a harness (the
proposer's chat prompt), it writes, by the sampling seed, one of ``KINDS`` as the chat-prefill completion that
makes that harness; asked anything else it answers as a solver."""

from __future__ import annotations

import re

from zoo_solver import six

from harnesslearn import zoo
from harnesslearn.propose.formats import by_name
from harnesslearn.transfer import smoke

# an own revision (no known source): ask for an Answer: line, read the last one with a regex
OWN = '''import re


def solve(model, question):
    text = model("Solve this and end with Answer: <value>.\\n" + question, max_tokens=200)
    found = re.findall(r"Answer:\\s*(\\S+)", text)
    if not found:
        return text.strip()
    return found[-1].strip(" .")
'''
ZERO = '''def solve(model, question):
    return "0"
'''
# an own revision that runs the solver's program (the held-out pattern, in other words than the zoo's)
LOOP = '''def solve(model, question):
    reply = model("Write a Python program that prints the result for the numbers: " + question, max_tokens=300)
    body = reply.split("```python")[-1].split("```")[0]
    printed = model.python(body)
    if printed.startswith("Error"):
        return "1"
    return printed.strip()
'''
# for rg:gcd: the answer computed in Python, no solver call needed
GCD = '''import math
import re


def solve(model, question):
    m = re.search(r"numbers:\\s*([\\d,\\s]+)", question)
    nums = [int(x) for x in re.findall(r"\\d+", m.group(1))] if m else []
    if len(nums) < 2:
        return model(question).strip()
    return str(math.gcd(*nums))
'''
KINDS = ("own", "copy", "zero", "loop")


def child_of(kind: str) -> str:
    return {"own": OWN, "copy": zoo.source("reason_extract"), "zero": ZERO, "loop": LOOP, "gcd": GCD}[kind]


def kind_of(seed: int) -> str:
    return KINDS[seed % len(KINDS)]


def _parent(messages: list[dict[str, str]]) -> str:
    user = next(m["content"] for m in messages if m["role"] == "user")
    m = re.search(r"## Current harness\n```python\n(.*?)\n```\n", user, re.DOTALL)
    assert m, "no current harness in the prompt"
    return m.group(1) + "\n"


def _revising(prompt: object) -> bool:
    return isinstance(prompt, list) and prompt[0].get("content", "").startswith("You improve a Python program")


def six_and_revise(prompt: object, seed: int = 0, **kw: object) -> str:
    """On a task whose answer is always 6 (tests/zoo_solver.py's solver); revisions by ``kind_of(seed)``."""
    if _revising(prompt):
        return by_name("chat-prefill").target(_parent(prompt), child_of(kind_of(seed)))  # type: ignore[arg-type]
    return six(prompt, n=1)[0]


def gcd_and_revise(prompt: object, seed: int = 0, **kw: object) -> str:
    """On rg:gcd (the smoke's solver); every revision computes the gcd in Python (of a parent that does already:
    the same with another last resort)."""
    if _revising(prompt):
        parent = _parent(prompt)  # type: ignore[arg-type]
        child = GCD if "math.gcd" not in parent else GCD.replace("return model(question).strip()", 'return "1"')
        return by_name("chat-prefill").target(parent, child)
    return smoke.solver(prompt)
