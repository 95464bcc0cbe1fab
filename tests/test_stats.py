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
