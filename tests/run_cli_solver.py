"""A rule-based solver for the ``harnesslearn run`` tests: ``python:tests/run_cli_solver.py:wrong``."""


def wrong(prompt, **params):
    return "certainly not the answer"
