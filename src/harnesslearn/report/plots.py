"""The report's plots as PNG bytes.

Built on ``matplotlib.figure.Figure`` with the Agg canvas directly: no pyplot, no global backend
switch, so importing this module never changes the caller's matplotlib state and no display is
needed. Each function returns ``None`` when it has nothing to draw, so a partial run simply has
fewer plots.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

Point = tuple[float, float]


def _pad_x(ax: Axes, xs: Sequence[float]) -> None:
    """Integer ticks, and room around a single x value (one round) instead of a 0.1-wide axis."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if xs and min(xs) == max(xs):
        ax.set_xlim(min(xs) - 1, max(xs) + 1)


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()



def _finish_rounds(fig: Figure, ax: Axes, xs: Sequence[float], ylabel: str, title: str) -> bytes:
    """Common finish of the per-round plots (a [0, 1] y axis over rounds) -> PNG bytes."""
    ax.set_xlabel("round")
    _pad_x(ax, xs)
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return _png(fig)

def j_per_round(
    best_score: Sequence[Point],
    best_test: Sequence[Point],
    candidates: Sequence[Point] = (),
    oracle_test: float | None = None,
    title: str = "J per round",
) -> bytes | None:
    """Lines of the selected harness's J (score and test split) per round, the candidates' score-
    split J as dots, and the oracle best-of-N test J as a dashed line labelled as an upper bound."""
    if not best_score and not best_test and not candidates:
        return None
    fig = Figure(figsize=(7, 3.8))
    ax = fig.add_subplot()
    if candidates:
        ax.scatter([x for x, _ in candidates], [y for _, y in candidates], s=14, alpha=0.35, color="tab:gray", label="candidates (score J)")
    if best_score:
        ax.plot(*zip(*best_score, strict=True), marker="o", color="tab:blue", label="best: score split")
    if best_test:
        ax.plot(*zip(*best_test, strict=True), marker="s", color="tab:orange", label="best: test split")
    if oracle_test is not None:
        ax.axhline(oracle_test, ls="--", color="tab:red", lw=1, label="oracle best-of-N test J (upper bound)")
    return _finish_rounds(fig, ax, [x for pts in (best_score, best_test, candidates) for x, _ in pts],
                          "J (mean score)", title)


def validity_per_round(rates: Mapping[str, Sequence[Point]], title: str = "Validity rates per round") -> bytes | None:
    """One line per rate (parsed, produced, valid, completion), each a list of (round, rate)."""
    series = {k: v for k, v in rates.items() if v}
    if not series:
        return None
    fig = Figure(figsize=(7, 3.5))
    ax = fig.add_subplot()
    n = len(series)
    for i, ((name, pts), marker) in enumerate(zip(series.items(), "osD^v<>", strict=False)):
        dodge = (i - (n - 1) / 2) * 0.05  # equal rates would hide each other's markers
        ax.plot([x + dodge for x, _ in pts], [y for _, y in pts], marker=marker, label=name)
    return _finish_rounds(fig, ax, [x for pts in series.values() for x, _ in pts], "rate", title)


def reward_curves(components: Mapping[str, Sequence[Point]], title: str = "Training reward") -> bytes | None:
    """One small panel per reward component, each a list of (step, value)."""
    series = {k: v for k, v in components.items() if v}
    if not series:
        return None
    n = len(series)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(3.4 * cols, 2.6 * rows))
    for i, (name, pts) in enumerate(series.items(), start=1):
        ax = fig.add_subplot(rows, cols, i)
        ax.plot(*zip(*pts, strict=True), lw=1.2)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        _pad_x(ax, [x for x, _ in pts])
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _png(fig)
