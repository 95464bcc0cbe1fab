"""Shared test hygiene."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _own_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each test gets an empty harness memory of its own (HARNESSLEARN_MEMORY, inherited by the CLI
    processes it starts): entries that one test's adaptation stores must not reach another's prompts."""
    os.environ["HARNESSLEARN_MEMORY"] = str(tmp_path_factory.mktemp("memory") / "memory.sqlite")
    yield


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    """Scripts run in-process (experiments/*.py) may set variables such as HARNESSLEARN_CACHE=0;
    none of that may leak into the tests that follow."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
