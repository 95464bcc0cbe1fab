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
