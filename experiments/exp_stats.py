"""Pure arithmetic for the transfer experiment's report: bootstrap confidence intervals over problems and
over families, and paired differences.

Nothing here touches a GPU, a model or the file system, so all of it is unit-tested on the CPU
(tests/test_experiments.py). Bootstrap intervals are percentile intervals (2.5 / 97.5 %) from
``n_boot`` resamples with a fixed seed; they describe sampling noise over the problems (and,
where said, over the families) that were run, nothing else: they do not cover variation across
training runs, proposer sampling seeds or solver non-determinism.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

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
