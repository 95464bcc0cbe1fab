"""Where each GRPO group goes: the run store's ``rewards`` table and a rollout export JSONL.

The export has one JSON object per group (one context, its candidates), self-contained so that
another RL stack can train on it or replay it::

    {"step": 3, "context_id": "c00012-maze", "task": "rg:maze", "seed": 12,
     "parent_id": "...", "parent_J": 0.25, "prompt": "...",
     "candidates": [{"index": 0, "completion": "...", "proposal": "...", "reward": 0.35,
                     "J": 0.2, "parsed": true, "produced": true, "completion_rate": 0.0,
                     "valid": true, "reason": null, "harness_id": "..."}, ...]}

``reward`` is null when an infrastructure failure prevented scoring (the trainer treats it as
missing, never as 0). ``parent_J`` is the parent harness's J on the same problems (null when it was not
scored: ``score_parent`` off, or infrastructure failures).
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnesslearn.training.reward import RewardResult


@dataclass
class Candidate:
    context_id: str
    task: str
    seed: int
    parent_id: str
    prompt: str
    completion: str
    proposal: str
    result: RewardResult
    parent_J: float | None = None  # the parent harness on the same problems (GRPOSettings.score_parent)


def components(results: list[RewardResult]) -> dict[str, float]:
    """Batch means of the reward and its parts. J, completion rate and reward average over the
    candidates that could be scored; ``none_rate`` is the share that could not."""
    scored = [r for r in results if r.reward is not None]

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else math.nan

    return {
        "reward": mean([r.reward for r in scored if r.reward is not None]),
        "J": mean([r.J for r in scored if r.J is not None]),
        "parse_rate": mean([float(r.parsed) for r in results]),
        "produce_rate": mean([float(r.produced) for r in results]),
        "completion_rate": mean([r.completion_rate for r in scored if r.completion_rate is not None]),
        "none_rate": mean([float(r.reward is None) for r in results]),
    }


@dataclass
class RolloutSink:
    """Writes groups to the store (when ``store`` is given) and appends them to ``path`` (JSON lines; a
    ``.gz`` path gets one gzip member per update, which ``gzip.open`` reads back as one stream: a long
    run's log, prompts included, is ~8x smaller)."""

    path: Path
    store: Any = None
    run_id: str = "grpo"
    history: list[dict[str, float]] = field(default_factory=list)

    def write(self, step: int, cands: list[Candidate]) -> dict[str, float]:
        groups: dict[str, list[Candidate]] = {}
        for c in cands:
            groups.setdefault(c.context_id, []).append(c)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        opener = gzip.open if self.path.suffix == ".gz" else open
        with opener(self.path, "at", encoding="utf-8") as f:
            for cid, group in groups.items():
                head = group[0]
                f.write(json.dumps({
                    "step": step, "context_id": cid, "task": head.task, "seed": head.seed,
                    "parent_id": head.parent_id, "parent_J": head.parent_J, "prompt": head.prompt,
                    "candidates": [
                        {"index": i, "completion": c.completion, "proposal": c.proposal, **c.result.to_json()}
                        for i, c in enumerate(group)
                    ],
                }, ensure_ascii=False) + "\n")
                if self.store is not None:
                    for i, c in enumerate(group):
                        r = c.result
                        self.store.add_reward(self.run_id, step, cid, i, J=r.J, parsed=r.parsed,
                                              produced=r.produced, completion_rate=r.completion_rate,
                                              reward=r.reward)
        comps = components([c.result for c in cands])
        self.history.append({"step": step, **comps})
        return comps
