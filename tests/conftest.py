"""Shared test hygiene."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The whole session's cache folder (HARNESSLEARN_CACHE_DIR: response cache, Reasoning Gym items,
    memory default) is a temporary one, so the tests never write into the user's ~/.cache/harnesslearn.
    Only its ``models`` folder is the real one, linked: the embedded models are an install artefact that
    every session would otherwise unpack again (1 GB for the Qwen 1.5B)."""
    from harnesslearn.fsutil import use_cache

    use_cache(tmp_path_factory.mktemp("cache"))
    yield


@pytest.fixture(autouse=True)
def _own_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each test gets an empty harness memory of its own (HARNESSLEARN_MEMORY, inherited by the CLI
    processes it starts): entries that one test's adaptation stores must not reach another's prompts."""
    os.environ["HARNESSLEARN_MEMORY"] = str(tmp_path_factory.mktemp("memory") / "memory.sqlite")
    yield


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    """Scripts run in-process (experiments/*.py) may set variables such as HARNESSLEARN_CACHE=0;
    none of that may leak into the tests that follow.

    Only what a test changed is put back, never ``os.environ.clear()``: glibc's getenv is not
    thread-safe against setenv/unsetenv, and the gRPC threads of an in-process Ray driver (the Ray
    tests' module fixture) call getenv all the time. Clearing and refilling the whole environment
    after every test crashed the full suite with a segfault in getenv (seen 2026-12-04)."""
    saved = dict(os.environ)
    yield
    for key in [k for k in os.environ if k not in saved]:
        del os.environ[key]
    for key, value in saved.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
