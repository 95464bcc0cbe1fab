"""Shared test hygiene."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    """Scripts run in-process (experiments/*.py) may set variables such as HARNESSLEARN_CACHE=0;
    none of that may leak into the tests that follow."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
