"""The HTML report of a run directory: one self-contained file plus PNG plots.

``write_report(run_dir)`` writes ``RUN_DIR/report.html`` (plots embedded as base64 data URIs,
no external script, style sheet, font or network fetch) and the same plots as
``RUN_DIR/plots/*.png``. It reads the run through the store and works on partial runs: a
section with nothing recorded says so.

Layout of this package: ``data`` (what to show, from the store), ``plots`` (matplotlib, Agg,
PNG bytes), ``sections`` (one HTML function per section), ``render`` (escaping, tables,
diffs, the page template ``template.html``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from harnesslearn.errors import UserError
from harnesslearn.fsutil import atomic_write_bytes, atomic_write_text
from harnesslearn.report import plots, sections
from harnesslearn.report.data import RunView, open_store, reward_series, taxonomy_groups
from harnesslearn.report.render import diff_html, esc, img, page, table, td
from harnesslearn.store import Store
from harnesslearn.taxonomy import rollup

__all__ = ["Report", "failure_taxonomy", "render_report", "write_report"]

REPORT_NAME = "report.html"
PLOTS_DIR = "plots"
HEADLINE = "headline.json"  # the demo's verdict, shown at the top (``_headline``)


@dataclass
class Report:
    path: Path
    plots: list[Path] = field(default_factory=list)


def write_report(run_dir: str | Path) -> Path:
    """Write ``report.html`` (and ``plots/*.png``) into ``run_dir``; return the report's path.
    A missing or non-run directory is a UserError."""
    return render_report(run_dir).path


def render_report(run_dir: str | Path) -> Report:
    """``write_report`` that also returns the paths of the PNG files written."""
    d = Path(run_dir)
    store = open_store(d)
    try:
        pngs: dict[str, bytes] = {}
        body = _body(store, d, pngs)
    finally:
        store.close()
    out = Report(path=d / REPORT_NAME)
    plots_dir = d / PLOTS_DIR
    if pngs and (plots_dir.is_symlink() or (plots_dir.exists() and not plots_dir.is_dir())):
        raise UserError(f"{plots_dir} is not a folder of the run directory (a link or a file): the plots are written "
                        "only into a real folder inside it; remove it and run the report again")
    try:
        for name, data in pngs.items():
            p = d / PLOTS_DIR / name
            atomic_write_bytes(p, data, mode=0o644)
            out.plots.append(p)
        # a report is meant to be read: 0644 (a temporary file is created 0600)
        atomic_write_text(out.path, page(f"harnesslearn report: {d.resolve().name}", body), mode=0o644)
    except OSError as e:
        raise UserError(f"cannot write the report into {d}: {e.strerror or e}") from None
    return out


def failure_taxonomy(run_dir: str | Path) -> dict[str, dict[str, dict[str, dict[str, int]]]]:
    """The failure taxonomy of a run directory (``taxonomy.classify``: reasoning, extraction, communication,
    timeout_or_budget, harness_error), as the report shows it: run -> ``seed_test`` | ``best_test`` | ``all`` ->
    family -> failure kind -> count. A missing or non-run directory is a UserError."""
    store = open_store(run_dir)
    try:
        return {v.id: {key: {fam: {k: n for k, n in c.items() if n}
                             for fam, c in sorted(rollup((r.family, r.taxonomy) for r in recs).items())}
                       for key, _, recs in taxonomy_groups(v)}
                for v in (RunView.load(store, run) for run in store.runs())}
    finally:
        store.close()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60] or "run"


def _figure(pngs: dict[str, bytes], name: str, png: bytes | None, alt: str, caption: str = "") -> str:
    """Register a plot to be written as ``plots/NAME`` and return its embedded <figure>."""
    if png is None:
        return f'<p class="empty">{esc(alt)}: nothing to plot yet</p>'
    pngs[name] = png
    cap = f"<figcaption class=\"note\">{esc(caption)}</figcaption>" if caption else ""
    return f"<figure>{img(name, png, alt)}{cap}</figure>"


def _body(store: Store, run_dir: Path, pngs: dict[str, bytes]) -> str:
    views = [RunView.load(store, r) for r in store.runs()]
    rewards = reward_series(store)
    parts = [f"<h1>harnesslearn report: {esc(run_dir.resolve().name)}</h1>"]
    nav = [f'<a href="#run-{i}">{esc(v.id)}</a>' for i, v in enumerate(views)]
    if rewards:
        nav.append('<a href="#training">training rewards</a>')
    parts.append("<nav>" + "".join(nav) + "</nav>")
    parts.append(_headline(store, run_dir))
    if not views and not rewards:
        parts.append('<p class="empty">this run directory has no runs recorded yet</p>')
    if len(views) > 1:
        parts.append("<h2>Comparison</h2>" + _comparison(views))
    for i, v in enumerate(views):
        parts.append(_run_section(v, i, pngs))
    if rewards:
        parts.append(_training_section(rewards, pngs))
    return "\n".join(parts)


def _headline(store: Store, run_dir: Path) -> str:
    """The demo's verdict (``HEADLINE``, written by ``harnesslearn demo``: its last lines and the seed's and the
    winner's ids) at the top of the page, with the diff from the seed to the winner; "" without the file, and one
    line saying so when it cannot be read."""
    path = run_dir / HEADLINE
    if not path.is_file():
        return ""
    try:
        h = json.loads(path.read_text())
        lines, seed, best = [str(x) for x in h["lines"]], str(h["seed"]), str(h["best"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f'<p class="empty">{esc(HEADLINE)} could not be read ({esc(e)})</p>'
    if seed == best:
        diff = '<p class="empty">the seed stayed best: no diff</p>'
    else:
        try:
            diff = diff_html(store.harness_source(seed), store.harness_source(best), f"seed {seed[:12]}",
                             f"winner {best[:12]}")
        except UserError as e:
            diff = f'<p class="empty">a harness source is missing: {esc(e)}</p>'
    return ('<h2 id="verdict">Verdict</h2>' + "".join(f"<p>{esc(line)}</p>" for line in lines)
            + "<h3>The seed and the winning revision</h3>" + diff)


def _comparison(views: list[RunView]) -> str:
    """One row per run: strategy, best harness J on both splits, and the solver budget used."""
    rows = []
    for v in views:
        best = v.best_id or ""
        spent = [r for r in v.budget_rows() if r["what"].startswith("solver")]
        rows.append([
            td(v.id), td(v.run.strategy), td(v.run.status),
            td(v.j_by_harness("score").get(best), "num"), td(v.j_by_harness("test").get(best), "num"),
            td(sum(r["calls"] for r in spent), "num"), td(sum(r["tokens"] for r in spent), "num"),
        ])
        oracle = v.oracle_test_j()
        if oracle is not None:
            rows.append([td(f"{v.id}: oracle best-of-N"), '<td class="upper">upper bound (selected on test)</td>',
                         td(""), td(None, "num"), td(oracle, "num"), td(None, "num"), td(None, "num")])
    return table(["run", "strategy", "status", "best: score J", "best: test J", "solver calls", "solver tokens"], rows)


def _run_section(v: RunView, i: int, pngs: dict[str, bytes]) -> str:
    slug = f"{i}-{_slug(v.id)}"
    best_score, best_test, cands = v.j_series()
    oracle = v.oracle_test_j()
    j_png = plots.j_per_round(best_score, best_test, cands, oracle, title=f"J per round: {v.id}")
    val_png = plots.validity_per_round(v.validity_series(), title=f"Validity rates per round: {v.id}")
    j_caption = "Best = the harness selected on the score split after each round."
    if oracle is not None:
        j_caption += " The oracle best-of-N line is selected on the test split: an upper bound, not a result."
    return "\n".join([
        f'<h2 id="run-{i}">Run {esc(v.id)}</h2>',
        sections.summary(v),
        "<h3>J per round</h3>",
        _figure(pngs, f"{slug}-j_per_round.png", j_png, "J per round", j_caption),
        "<h3>Validity rates per round</h3>",
        _figure(pngs, f"{slug}-validity.png", val_png, "validity rates per round",
                "parsed / produced / valid: shares of proposals; completion: mean completion rate of the "
                "round's candidates on the score split."),
        "<h3>Lineage</h3>",
        sections.lineage(v),
        "<h3>Diffs between consecutive best harnesses</h3>",
        sections.best_diffs(v),
        "<h3>Per-problem results (test split)</h3>",
        sections.problems(v),
        "<h3>Failure taxonomy</h3>",
        sections.taxonomy(v),
        "<h3>Proposals</h3>",
        sections.proposals(v),
        "<h3>Budgets used</h3>",
        sections.budgets(v),
    ])


def _training_section(rewards: dict[str, dict[str, list[tuple[float, float]]]], pngs: dict[str, bytes]) -> str:
    parts = ['<h2 id="training">Training rewards</h2>',
             '<p class="note">Mean per step over contexts and candidates. reward = J + 0.05·parsed + '
             "0.10·produced + 0.15·completion rate.</p>"]
    for j, (rid, series) in enumerate(rewards.items()):
        png = plots.reward_curves(series, title=f"Training reward components: {rid}")
        parts.append(f"<h3>{esc(rid)}</h3>" + _figure(pngs, f"train-{j}-{_slug(rid)}-rewards.png", png, "reward curves"))
    return "\n".join(parts)
