"""Pure arithmetic for the H200 experiments: bootstrap confidence intervals, the step-time
breakdown of a GRPO update, GPU utilisation per phase, and the overlapped-schedule estimate.

Nothing here touches a GPU, a model or the file system, so all of it is unit-tested on the CPU
(tests/test_experiments.py). Bootstrap intervals are percentile intervals (2.5 / 97.5 %) from
``n_boot`` resamples with a fixed seed; they describe sampling noise over the problems (and,
where said, over the families) that were run, nothing else: they do not cover variation across
training runs, proposer sampling seeds or solver non-determinism.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harnesslearn.stats import bootstrap_ci  # noqa: F401 - the one implementation, re-exported here

ALPHA = 0.05


def _interval(stats: np.ndarray, point: float) -> dict[str, float]:
    lo, hi = np.quantile(stats, [ALPHA / 2, 1 - ALPHA / 2])
    return {"mean": float(point), "lo": float(lo), "hi": float(hi)}


def bootstrap_paired_diff(before: Sequence[float], after: Sequence[float], *, n_boot: int = 2000,
                          seed: int = 0) -> dict[str, float]:
    """Mean of ``after - before`` over paired problems (the same test problems scored under two
    conditions) with a 95 % bootstrap interval that resamples the pairs."""
    if len(before) != len(after):
        raise ValueError(f"paired samples differ in length: {len(before)} vs {len(after)}")
    return bootstrap_ci([b - a for a, b in zip(before, after, strict=True)], n_boot=n_boot, seed=seed)


def bootstrap_family_mean(per_family: Mapping[str, Sequence[float]], *, n_boot: int = 2000, seed: int = 0,
                          resample_families: bool = False) -> dict[str, float]:
    """The mean over families of each family's mean score, with a 95 % bootstrap interval.

    Each replicate resamples the problems inside every family (so a family keeps its own n);
    with ``resample_families`` it also draws the families themselves with replacement, which
    widens the interval to cover "another set of families like these". Families without
    problems are left out."""
    fams = [np.asarray(v, dtype=float) for v in per_family.values() if len(v)]
    if not fams:
        return {"mean": math.nan, "lo": math.nan, "hi": math.nan}
    rng = np.random.default_rng(seed)
    boot = np.stack([f[rng.integers(0, f.size, size=(n_boot, f.size))].mean(axis=1) for f in fams])  # [F, B]
    if resample_families:
        pick = rng.integers(0, len(fams), size=(n_boot, len(fams)))  # [B, F]
        stats = boot[pick, np.arange(n_boot)[:, None]].mean(axis=1)
    else:
        stats = boot.mean(axis=0)
    return _interval(stats, float(np.mean([f.mean() for f in fams])))


def bootstrap_family_mean_diff(before: Mapping[str, Sequence[float]], after: Mapping[str, Sequence[float]], *,
                               n_boot: int = 2000, seed: int = 0, resample_families: bool = False) -> dict[str, float]:
    """Paired version of ``bootstrap_family_mean`` for ``after - before`` on the families both
    have (problem pairs resampled inside each family; the families too if ``resample_families``)."""
    common = [f for f in before if f in after and len(before[f])]
    diffs = {}
    for f in common:
        if len(before[f]) != len(after[f]):
            raise ValueError(f"family {f}: paired samples differ in length")
        diffs[f] = [b - a for a, b in zip(before[f], after[f], strict=True)]
    return bootstrap_family_mean(diffs, n_boot=n_boot, seed=seed, resample_families=resample_families)


# ---------------------------------------------------------------------- step-time breakdown
def step_breakdown(steps: Sequence[Mapping[str, float]], train_wall_s: float | None = None) -> dict[str, Any]:
    """Mean seconds per update of generation, reward execution, training and idle time.

    ``steps``: one mapping per optimizer update with ``start``/``end`` (wall-clock seconds of
    the update, from the trainer's step-begin to step-end callbacks) and ``gen_s``/``reward_s``
    (time inside the policy's generate and the reward function during that update).
    ``train_s`` is the rest of the update (forward/backward/optimizer plus TRL's bookkeeping:
    logprob passes, advantage arithmetic); ``idle_s`` is the mean gap between consecutive updates
    (data loading, logging, callbacks). Given ``train_wall_s`` (the wall time of ``train()``),
    ``setup_s`` is what is left outside updates and gaps (trainer start-up and tear-down, once).
    Means skip the first update (warm-up: CUDA kernels, allocator) when there are three or more.

    The overlap estimates assume perfect pipelining and ignore that all phases share one GPU:
    ``overlap_gen_reward_s`` = max(gen, reward) + train (generation of the next batch runs while
    the current batch is scored); ``async_offpolicy_s`` = max(gen + train, reward) (scoring runs
    one update behind, as in asynchronous RL stacks)."""
    if not steps:
        return {"updates": 0}
    per = []
    for s in steps:
        total = s["end"] - s["start"]
        gen, reward = s.get("gen_s", 0.0), s.get("reward_s", 0.0)
        per.append({"step_s": total, "gen_s": gen, "reward_s": reward, "train_s": max(0.0, total - gen - reward)})
    gaps = [max(0.0, b["start"] - a["end"]) for a, b in zip(steps, steps[1:], strict=False)]
    inside = sum(p["step_s"] for p in per)
    setup = max(0.0, train_wall_s - inside - sum(gaps)) if train_wall_s is not None else None
    n = len(per)
    steady = per[1:] if n >= 3 else per  # the first update carries the warm-up

    def mean(key: str) -> float:
        return sum(p[key] for p in steady) / len(steady)

    gen, reward, train = mean("gen_s"), mean("reward_s"), mean("train_s")
    idle = sum(gaps) / len(gaps) if gaps else 0.0
    sequential = gen + reward + train + idle
    overlap = max(gen, reward) + train + idle
    async_off = max(gen + train, reward) + idle
    return {
        "updates": n,
        "averaged_over": len(steady),
        "mean_s": {"generation": gen, "reward": reward, "training": train, "idle": idle, "update": sequential},
        "share": {k: (v / sequential if sequential > 0 else math.nan)
                  for k, v in (("generation", gen), ("reward", reward), ("training", train), ("idle", idle))},
        "first_update_s": per[0]["step_s"],
        "setup_s": setup,
        "overlap_gen_reward_s": overlap,
        "overlap_speedup": sequential / overlap if overlap > 0 else math.nan,
        "async_offpolicy_s": async_off,
        "async_speedup": sequential / async_off if async_off > 0 else math.nan,
        "per_update": per,
    }


def phase_utilisation(samples: Sequence[Sequence[float]], phases: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean GPU utilisation (%) of the samples that fall inside each named phase.

    ``samples``: ``(t, util_percent, ...)`` tuples; ``phases``: ``{"name", "start", "end"}``.
    A sample inside several phases of one name counts once. Phases without a sample get None
    (sampling every 0.25 s misses phases shorter than that)."""
    by_name: dict[str, list[tuple[float, float]]] = {}
    for p in phases:
        by_name.setdefault(str(p["name"]), []).append((float(p["start"]), float(p["end"])))
    out: dict[str, Any] = {}
    for name, spans in by_name.items():
        inside = [s[1] for s in samples if any(a <= s[0] <= b for a, b in spans)]
        out[name] = {"mean_util": (sum(inside) / len(inside)) if inside else None, "samples": len(inside),
                     "seconds": sum(b - a for a, b in spans)}
    all_u = [s[1] for s in samples]
    out["all"] = {"mean_util": (sum(all_u) / len(all_u)) if all_u else None, "samples": len(all_u)}
    return out


def throughput_ratio(inside_tok_s: float | None, raw_tok_s: float | None) -> float | None:
    """Solver tokens/s inside the reward over raw batched generate tokens/s (None if unknown)."""
    if not inside_tok_s or not raw_tok_s:
        return None
    return inside_tok_s / raw_tok_s
