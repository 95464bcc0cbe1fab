"""The suite leaves the user's files alone: every cache path resolves inside the session's own temporary
cache folder (conftest ``_own_cache``), the memory inside each test's own folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def test_every_cache_path_of_the_suite_is_a_temporary_one(tmp_path_factory: pytest.TempPathFactory) -> None:
    from harnesslearn.memory import default_path
    from harnesslearn.models.cache import default_cache_path
    from harnesslearn.models.embedded import models_dir
    from harnesslearn.tasks.reasoning_gym import cache_root

    base = tmp_path_factory.getbasetemp().resolve()
    home = (Path.home() / ".cache" / "harnesslearn").resolve()
    for p in (default_cache_path(), cache_root(), default_path()):
        assert p is not None and base in p.resolve().parents and home not in p.resolve().parents, p
    assert models_dir().is_symlink()  # the one shared folder: the unpacked models, read by every session
    assert os.environ["HARNESSLEARN_MEMORY"].startswith(str(base))


def test_scratch_cache_gives_benchmarks_a_temp_cache_with_the_models_linked(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 33 item 12: a benchmark run by a user (no cache folder chosen) writes into a temporary cache
    whose models folder is the real one; one who chose a folder keeps it."""
    from harnesslearn.fsutil import scratch_cache
    from harnesslearn.memory import default_path

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HARNESSLEARN_CACHE_DIR")
    monkeypatch.delenv("HARNESSLEARN_MEMORY")
    tmp = scratch_cache("hl-test-")
    assert tmp is not None and os.environ["HARNESSLEARN_CACHE_DIR"] == str(tmp)
    assert (tmp / "models").resolve() == (tmp_path / ".cache" / "harnesslearn" / "models").resolve()
    assert default_path() is None  # the memory is off unless one was chosen
    assert scratch_cache() is None and os.environ["HARNESSLEARN_CACHE_DIR"] == str(tmp)  # chosen: kept
