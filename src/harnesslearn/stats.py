"""Bootstrap intervals for the figures we report (J over problems).

Percentile intervals (2.5 / 97.5 %) from ``n_boot`` resamples with a fixed seed. They describe
sampling noise over the problems that were run, nothing else: not variation across proposer
seeds, training runs or solver non-determinism.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

ALPHA = 0.05


def bootstrap_ci(values: Sequence[float], *, n_boot: int = 2000, seed: int = 0) -> dict[str, float]:
    """Mean of ``values`` with a 95 % bootstrap interval over the values (problems).
    An empty list gives NaNs; one value gives a zero-width interval."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return {"mean": math.nan, "lo": math.nan, "hi": math.nan}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))  # [B, n]
    lo, hi = np.quantile(x[idx].mean(axis=1), [ALPHA / 2, 1 - ALPHA / 2])
    return {"mean": float(x.mean()), "lo": float(lo), "hi": float(hi)}


def bootstrap_paired_diff(before: Sequence[float], after: Sequence[float], *, n_boot: int = 2000,
                          seed: int = 0) -> dict[str, float]:
    """Mean of ``after - before`` over paired values (the same problems, in the same order) with a 95 %
    bootstrap interval, the problems resampled together. A length mismatch is a ValueError; empty gives NaNs."""
    a, b = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired values of different lengths: {a.size} and {b.size}")
    return bootstrap_ci(b - a, n_boot=n_boot, seed=seed)
