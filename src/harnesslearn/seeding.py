"""Seeds derived from a run's seed, in one place.

``child_seed(seed, i)`` is the seed of the ``i``-th item (a context, a candidate, a problem set)
of a run with seed ``seed``. ``SEED_STRIDE`` is a prime larger than any index we use, so the
items of two runs with neighbouring seeds never share a seed.
"""

from __future__ import annotations

SEED_STRIDE = 1_000_003


def child_seed(seed: int, index: int) -> int:
    """The seed of item ``index`` of a run seeded with ``seed``."""
    return seed * SEED_STRIDE + index
