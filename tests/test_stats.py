"""Bootstrap intervals: the percentile interval of the resampled means, at 2.5 and 97.5 %."""

from __future__ import annotations

import math

import numpy as np

from harnesslearn.stats import bootstrap_ci


def test_the_interval_is_the_2_5_and_97_5_percentiles_of_the_resampled_means() -> None:
    values = [0.0, 1.0, 1.0, 0.0, 1.0, 0.5, 0.25, 1.0, 0.0, 1.0, 1.0, 0.75]
    ci = bootstrap_ci(values, n_boot=4000, seed=7)
    x = np.asarray(values)
    means = x[np.random.default_rng(7).integers(0, x.size, size=(4000, x.size))].mean(axis=1)
    assert ci["lo"] == float(np.quantile(means, 0.025)) and ci["hi"] == float(np.quantile(means, 0.975))
    assert ci["mean"] == float(x.mean()) and ci["lo"] < ci["mean"] < ci["hi"]
    assert (means < ci["lo"]).mean() < 0.03 and (means > ci["hi"]).mean() < 0.03  # a 95 % interval, not 90 or 99


def test_empty_and_single_values() -> None:
    assert all(math.isnan(v) for v in bootstrap_ci([]).values())
    assert bootstrap_ci([0.5]) == {"mean": 0.5, "lo": 0.5, "hi": 0.5}


def test_the_paired_difference_resamples_the_problems_together() -> None:
    """``after - before`` per problem, then the same interval as ``bootstrap_ci``: a gain on every problem has
    an interval above 0 however the problems are drawn; two lists of different lengths are no pairs."""
    import pytest

    from harnesslearn.stats import bootstrap_paired_diff

    before, after = [0.0, 0.0, 0.5, 1.0], [1.0, 0.5, 1.0, 1.0]
    assert bootstrap_paired_diff(before, after, seed=3) == bootstrap_ci([1.0, 0.5, 0.5, 0.0], seed=3)
    d = bootstrap_paired_diff([0.0] * 6, [0.5, 1.0, 0.5, 1.0, 1.0, 0.5])
    assert d["lo"] > 0 and d["mean"] == 0.75
    with pytest.raises(ValueError, match="different lengths"):
        bootstrap_paired_diff([0.0], [0.0, 1.0])
