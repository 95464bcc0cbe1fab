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

Besides the reward parts, each batch's groups are summed up (:func:`group_stats`: distinct texts per group, the
copy share by ``sources.match``, the share running solver-written code, the share of groups whose best beats its
parent, the parents' J; ``RolloutSink.group_history``) and checked for collapse (:func:`collapse_alarm`), which
the GRPO recorder writes into the update's line of ``updates.jsonl`` and the log.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
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
    source: str | None = None  # the candidate harness, when the proposal produced one


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


# the collapse alarm's thresholds: a batch whose groups hold this few distinct texts (a share of the group size),
# whose valid candidates are this often copies of known sources, or this often one same known source
ALARM_DISTINCT = 0.25
ALARM_COPY = 0.75
ALARM_ONE_SOURCE = 0.75


def group_stats(groups: dict[str, list[Candidate]], prompt_dir: str | None = None) -> dict[str, Any]:
    """One batch's groups (context id -> its candidates) summed up: ``distinct_texts`` (mean over groups of the
    distinct proposal texts, stripped), ``distinct_harnesses`` (of the distinct valid harnesses), ``valid``
    candidates, ``copy_share`` (valid candidates that copy a known source: ``sources.match``, the prompts of
    ``prompt_dir``), ``top_source`` and ``top_source_share`` (the known source most often nearest, share of valid
    candidates that copy it), ``solver_code_share`` (valid candidates running solver-written code:
    ``taxonomy.runs_solver_code``), ``beats_parent_share`` (groups whose best J beats the parent's J, of the
    groups whose parent was scored), ``parents_J`` (each group's, None where not scored) and its mean. Shares
    are None where nothing counts."""
    from harnesslearn import sources
    from harnesslearn.taxonomy import runs_solver_code

    def mean(xs: list[float]) -> float | None:
        return round(sum(xs) / len(xs), 4) if xs else None

    valid = [c for g in groups.values() for c in g if c.source is not None]
    pool = sources.known_sources(prompt_dir) if valid else ()
    matches = [sources.match(c.source, sources=pool) for c in valid if c.source is not None]
    copied = Counter(m.name for m in matches if m.copy)
    top = copied.most_common(1)[0] if copied else None
    scored = [g for g in groups.values() if g[0].parent_J is not None]
    beats = [max((c.result.J for c in g if c.result.J is not None), default=None) for g in scored]
    parents = [g[0].parent_J for g in groups.values()]
    return {
        "groups": len(groups),
        "distinct_texts": mean([float(len({c.proposal.strip() for c in g})) for g in groups.values()]),
        "distinct_harnesses": mean([float(len({c.result.harness_id for c in g if c.source is not None}))
                                    for g in groups.values()]),
        "valid": len(valid),
        "copy_share": mean([float(m.copy) for m in matches]),
        "top_source": top[0] if top else None,
        "top_source_share": round(top[1] / len(valid), 4) if top else None,
        "solver_code_share": mean([float(runs_solver_code(c.source)) for c in valid if c.source is not None]),
        "beats_parent_share": mean([float(b is not None and b > g[0].parent_J)  # type: ignore[operator]
                                    for b, g in zip(beats, scored, strict=True)]),
        "parents_J": parents,
        "parents_J_mean": mean([j for j in parents if j is not None]),
    }


def collapse_alarm(stats: dict[str, Any], group_size: int) -> list[str]:
    """Why a batch looks collapsed onto one mode (empty: it does not): its groups hold few distinct texts
    (``ALARM_DISTINCT`` of ``group_size`` or fewer, on average), or its valid candidates mostly copy known
    sources (``ALARM_COPY``), or mostly one same known source (``ALARM_ONE_SOURCE``)."""
    out = []
    d = stats.get("distinct_texts")
    if d is not None and group_size > 1 and d <= max(1.0, ALARM_DISTINCT * group_size):
        out.append(f"{d:.2f} distinct texts per group of {group_size}")
    if (c := stats.get("copy_share")) is not None and c >= ALARM_COPY:
        out.append(f"copy share {c:.2f}")
    if (t := stats.get("top_source_share")) is not None and t >= ALARM_ONE_SOURCE:
        out.append(f"{stats['top_source']} copied by {t:.0%} of the valid candidates")
    return out


@dataclass
class RolloutSink:
    """Writes groups to the store (when ``store`` is given) and appends them to ``path`` (JSON lines; a
    ``.gz`` path gets one gzip member per update, which ``gzip.open`` reads back as one stream: a long
    run's log, prompts included, is ~8x smaller)."""

    path: Path
    store: Any = None
    run_id: str = "grpo"
    history: list[dict[str, float]] = field(default_factory=list)
    group_history: list[dict[str, Any]] = field(default_factory=list)  # group_stats of each batch, with its step
    prompt_dir: str | None = None  # the run's prompt folder: its programs are known sources too

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
        self.group_history.append({"step": step, **group_stats(groups, self.prompt_dir)})
        return comps
