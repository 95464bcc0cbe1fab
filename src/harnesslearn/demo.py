"""``harnesslearn demo``: the main job on the embedded default model, ending in a report.

Sequential adaptation on one Reasoning Gym family with ``local:gemma-3-270m`` as both solver
and proposer (one backend instance, loaded once), sized for 2 CPU cores: ``DEMO_SETTINGS`` below.
The demo shows the machinery (proposals, validity reasons, lineage, the report) end to end; a
270M base model rarely writes a valid edit, so expect the seed to stay best most of the time.

With an embedded Qwen coder (``--model local:qwen2.5-coder-1.5b-instruct``) the proposer is shown a
harness memory shipped with the package (``seeds/memory/paper_train.jsonl``: the zoo harnesses that beat
the minimal seed on the paper-train families simple_geometry, maze and tower_of_hanoi, built by
``experiments/memory_eval.py --only-build --export``), loaded into a temporary memory so that the
user's own memory is neither shown nor changed; the demo family (gcd) is not among them.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harnesslearn.adapt import adapt
from harnesslearn.errors import UserError
from harnesslearn.memory import SHIPPED
from harnesslearn.sandbox.records import Budgets
from harnesslearn.settings.adapt import AdaptSettings
from harnesslearn.settings.groups import MemorySettings, ProposerSettings, RuntimeSettings, Sampling, Splits

# rounds x candidates proposals; split sizes; proposer completion length; per-problem limits.
DEMO_SETTINGS = AdaptSettings(
    strategy="sequential", rounds=3, candidates=3, seed=0, splits=Splits(n_feedback=4, n_score=6, n_test=12),
    proposer=ProposerSettings(format="plain-rewrite", sampling=Sampling(temperature=0.7, max_tokens=160)),
    budgets=Budgets(timeout_s=60.0, max_calls=4, max_tokens=4096), runtime=RuntimeSettings(concurrency=2),
)
# the instruction-tuned coder: chat prompts with the assistant-turn start (proposer format auto), longer
# bodies, fewer and smaller evaluations (it generates 12-20 tokens/s here, 10x slower than Gemma)
# (with the shipped memory it writes whole files, about 600 tokens for an interpreter loop)
QWEN_SETTINGS = AdaptSettings(
    strategy="sequential", rounds=1, candidates=3, seed=0, splits=Splits(n_feedback=3, n_score=6, n_test=12),
    proposer=ProposerSettings(sampling=Sampling(temperature=0.8, max_tokens=768)),
    budgets=Budgets(timeout_s=120.0, max_calls=4, max_tokens=4096), runtime=RuntimeSettings(concurrency=2),
)
SHIPPED_MEMORY = SHIPPED  # the paper-train memory the Qwen demo shows (memory.SHIPPED)
MEMORY_MODELS = ("local:qwen2.5-coder-1.5b-instruct", "local:qwen2.5-coder-0.5b-instruct")
DEMO_SOLVER = "local:gemma-3-270m"
PROFILES: dict[str, tuple[str, AdaptSettings]] = {  # model -> (default family, settings)
    "local:gemma-3-270m": ("basic_arithmetic", DEMO_SETTINGS),
    "local:qwen2.5-coder-1.5b-instruct": ("gcd", QWEN_SETTINGS),
    "local:qwen2.5-coder-0.5b-instruct": ("gcd", QWEN_SETTINGS),
}


def profile(model_spec: str) -> tuple[str, AdaptSettings]:
    """The demo's default family and settings for a model (the Gemma ones for any other model)."""
    return PROFILES.get(model_spec, PROFILES["local:gemma-3-270m"])


def _report(run_dir: Path) -> str | None:
    """Write the HTML report if the report module is installed; its path, or None."""
    try:
        from harnesslearn.report import write_report
    except ImportError as e:
        sys.stderr.write(f"[demo] report unavailable: {e}\n")
        return None
    return str(write_report(run_dir))


def _shipped_memory(folder: Path) -> Path:
    """A memory file in ``folder`` holding the shipped paper-train entries."""
    from harnesslearn.memory import shipped_copy

    path = folder / "memory.sqlite"
    n = shipped_copy(path)
    sys.stderr.write(f"[demo] memory: the {n} harnesses shipped with harnesslearn (paper-train families); "
                     "your own memory is not used or changed\n")
    return path


async def run_demo(run_dir: str | Path | None = None, family: str | None = None, *, resume: bool = False,
                   model_spec: str = DEMO_SOLVER, memory: bool = True, isolation: str | None = None,
                   proposer_spec: str | None = None) -> dict[str, Any]:
    """Run the demo; returns adapt's JSON plus ``report`` (the HTML path) and ``family``. The demo never
    reads or writes the user's own harness memory: a memory model (``MEMORY_MODELS``) is shown the shipped
    entries from a file of its own (unless ``memory`` is False), any other model none. ``proposer_spec``: another
    proposer than the solver (a trained one: ``local:NAME?adapter=DIR``); the profile stays the solver's."""
    from harnesslearn.models import load_model
    from harnesslearn.tasks import load_task

    t0 = time.perf_counter()
    if resume and run_dir is None:
        raise UserError("--resume needs --run-dir (the demo directory to continue)")
    rd = Path(run_dir) if run_dir is not None else Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    default_family, settings = profile(model_spec)
    if isolation is not None:  # --isolation / --unsafe-no-sandbox (how harness runs are confined, not what they do)
        settings = settings.with_(**{"runtime.isolation": isolation})
    family = family or default_family
    task = load_task(f"rg:{family}")
    model = load_model(model_spec)
    proposer = load_model(proposer_spec) if proposer_spec and proposer_spec != model_spec else model
    # the shipped memory goes into a folder of this run directory's own, rebuilt the same on every start: a
    # --resume sees the same path and the same entries, and the user's memory is never read or written
    tmp = Path(tempfile.gettempdir()) / f"harnesslearn-demo-{hashlib.sha256(str(rd.resolve()).encode()).hexdigest()[:12]}"
    try:
        if memory and model_spec in MEMORY_MODELS:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            settings = settings.with_(memory=MemorySettings(enabled=True, path=str(_shipped_memory(tmp))))
        else:
            settings = settings.with_(memory=MemorySettings(enabled=False))
        result = await adapt(task, model, proposer, settings, run_dir=rd, resume=resume)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        await model.aclose()
        if proposer is not model:
            await proposer.aclose()
    out = result.to_json()
    out["family"] = family
    out["n_test"] = settings.splits.n_test
    out["report"] = _report(rd)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out
