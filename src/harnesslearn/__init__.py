"""harnesslearn: adapt an LLM agent by revising the program (the harness) around a frozen solver.

Public API (internals may move; import from here)::

    from harnesslearn import load_harness, apply_proposal, load_task, load_model, evaluate, build_executor
    from harnesslearn import AdaptSettings, Store
    from harnesslearn import KnownSource, known_sources, provenance  # what a proposer is shown; revise or paste?
    from harnesslearn.adapt import adapt  # (the module and the function share the name)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from harnesslearn.errors import InfraError, UserError
from harnesslearn.harness import Harness, check_source, harness_id, load_harness, runtime_api_doc
from harnesslearn.propose.edits import EditResult, Reason, apply_proposal, parse_blocks

__all__ = [
    "AdaptSettings",
    "EditResult",
    "Harness",
    "InfraError",
    "KnownSource",
    "Reason",
    "Store",
    "UserError",
    "__version__",
    "apply_proposal",
    "build_executor",
    "check_source",
    "evaluate",
    "harness_id",
    "known_sources",
    "load_harness",
    "load_model",
    "load_task",
    "parse_blocks",
    "provenance",
    "runtime_api_doc",
]

if TYPE_CHECKING:
    from harnesslearn.evaluation import evaluate
    from harnesslearn.models import load_model
    from harnesslearn.sandbox import build_executor
    from harnesslearn.settings.adapt import AdaptSettings
    from harnesslearn.sources import KnownSource, known_sources, provenance
    from harnesslearn.store import Store
    from harnesslearn.tasks import load_task

_LAZY = {  # name -> module: imported on first use, so `import harnesslearn` stays light
    "load_task": "harnesslearn.tasks", "load_model": "harnesslearn.models", "evaluate": "harnesslearn.evaluation",
    "AdaptSettings": "harnesslearn.settings.adapt", "Store": "harnesslearn.store", "build_executor": "harnesslearn.sandbox",
    "KnownSource": "harnesslearn.sources", "known_sources": "harnesslearn.sources", "provenance": "harnesslearn.sources",
}


def __getattr__(name: str) -> Any:
    """Lazy imports keep `import harnesslearn` light (no torch, no reasoning-gym)."""
    if name not in _LAZY:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
