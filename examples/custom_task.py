"""Bring your own task and metric, from Python: a task from a list of problems and a scoring function,
adapted by harnesslearn (one round of 2 candidates), then the held-out test J before and after.

    .venv/bin/python examples/custom_task.py

The models are scripted (examples/models.py) so that this runs in seconds anywhere; swap in real ones
with harnesslearn.models.load_model("openai:...") or ("local:qwen2.5-coder-1.5b-instruct")."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from harnesslearn.adapt import adapt
from harnesslearn.models import load_model
from harnesslearn.settings.adapt import AdaptSettings
from harnesslearn.settings.groups import MemorySettings, RuntimeSettings, Splits
from harnesslearn.tasks.custom import custom_task

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from score import grade  # noqa: E402  (the same metric as the CLI recipe)

problems = [json.loads(line) for line in (HERE / "data" / "sums.jsonl").read_text().splitlines()]


async def main(isolation: str = "auto") -> dict:
    task = custom_task("sums", problems, grade, description="Add two numbers; answer with the number only.")
    solver = load_model(f"python:{HERE / 'models.py'}:solver")
    proposer = load_model(f"python:{HERE / 'models.py'}:proposer")
    settings = AdaptSettings(rounds=1, candidates=2, splits=Splits(n_feedback=4, n_score=6, n_test=8),
                             memory=MemorySettings(enabled=False), runtime=RuntimeSettings(isolation=isolation))
    with tempfile.TemporaryDirectory() as d:
        result = await adapt(task, solver, proposer, settings, run_dir=Path(d) / "run", progress=False)
    return {"seed_test_J": result.seed_test_J, "test_J": result.test_J, "valid_proposals": result.valid_proposals}


if __name__ == "__main__":
    out = asyncio.run(main(*(sys.argv[1:2])))
    print(json.dumps(out))
    print(f"test J {out['seed_test_J']:.2f} -> {out['test_J']:.2f} (partial credit 0.5 for the number in a sentence)",
          file=sys.stderr)
