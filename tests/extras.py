"""Optional extras in tests: skipped on a developer's machine that lacks them, but never in CI, where
scripts/setup.sh --test installs every extra and a missing one must fail the run, not hide it."""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType

import pytest

IN_CI = bool(os.environ.get("CI"))


def needs(module: str, extra: str) -> pytest.MarkDecorator:
    """Skip unless ``module`` imports, except in CI (then the test runs and fails loudly)."""
    return pytest.mark.skipif(importlib.util.find_spec(module) is None and not IN_CI,
                              reason=f"needs the {extra} extra (CI always has it: scripts/setup.sh --test)")


def needs_true(ok: bool, extra: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not ok and not IN_CI, reason=f"needs the {extra} extra (CI always has it)")


def require(module: str) -> ModuleType:
    """``pytest.importorskip`` outside CI; a plain import (an error when missing) in CI."""
    return importlib.import_module(module) if IN_CI else pytest.importorskip(module)


# A real-model test is bounded by its work (problems, tokens, calls, each stated in the test), never by the
# wall clock: a fresh suite on 2 busy cores ran 38 minutes and a Qwen test hit its 900 s limit doing the
# same work. A subprocess's timeout is only there to catch a hang.
HANG_S = 3600
