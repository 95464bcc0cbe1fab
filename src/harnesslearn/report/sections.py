"""The report's sections as HTML strings, one function per section.

Each takes a ``RunView`` (and sometimes pre-rendered plots) and returns escaped HTML. A section
with no data says so in one line instead of disappearing, so a partial run shows what is
missing as well as what is there.
"""

from __future__ import annotations

import json
from collections import defaultdict

from harnesslearn.errors import UserError
from harnesslearn.report.data import RunView, taxonomy_groups
from harnesslearn.report.render import clip, diff_html, esc, fmt_num, status_cell, table, td
from harnesslearn.taxonomy import FailureKind, find_answer_tables, rollup

MAX_RAW = 4000  # characters of a proposer completion shown in a proposal's <details>
MAX_PROBLEMS = 200  # rows of the per-problem table


def _sid(h: str | None) -> str:
    return "–" if not h else h[:12]


def _source(view: RunView, harness_id: str) -> str | None:
    """A harness's source from its file, or None when the file is missing, unreadable or does
    not match its id."""
    try:
        return view.store.harness_source(harness_id)
    except UserError:
        return None


def summary(view: RunView) -> str:
    """Status, strategy, the seed and best harnesses with their J, and the run's config."""
    score, test = view.j_by_harness("score"), view.j_by_harness("test")
    seed, best = view.seed_id, view.best_id
    status = view.run.status or ""
    note = ""
    if status != "done":
        note = f'<p class="note">Run status <b>{esc(status)}</b>: the run is partial; this report shows what was recorded.</p>'
    rows = [
        [td("seed"), f'<td class="hid">{esc(_sid(seed))}</td>', td(score.get(seed or ""), "num"), td(test.get(seed or ""), "num")],
        [td("best (selected on score split)"), f'<td class="hid">{esc(_sid(best))}</td>',
         td(score.get(best or ""), "num"), td(test.get(best or ""), "num")],
    ]
    oracle = view.oracle_test_j()
    if oracle is not None:
        rows.append(['<td class="upper">oracle best-of-N (selected on test: upper bound)</td>', td("–"),
                     td(None, "num"), td(oracle, "num")])
    for z in view.zoo_rows():
        label = f"zoo:{z.get('name')}" + (" (best zoo harness, picked on score split)" if z.get("best") else "")
        rows.append([td(label), f'<td class="hid">{esc(_sid(z.get("harness_id")))}</td>',
                     td(z.get("score_J"), "num"), td(z.get("test_J"), "num")])
    near = view.result.get("best_nearest_zoo")
    beyond = "" if not near else (
        f'<p>the best harness is nearest to zoo:{esc(near["name"])} (difflib ratio {near["ratio"]:.2f}; the seed\'s '
        f'{near["seed_ratio"]:.2f}): '
        + ("<b>a near-copy of a zoo harness</b>, not a new program.</p>" if near["near_copy"]
           else "not a near-copy of a zoo harness.</p>"))
    cfg = [[td(k), td(json.dumps(v, default=str) if not isinstance(v, str) else v, "cell")]
           for k, v in sorted(view.config.items())]
    shown, added = view.result.get("memory_shown") or [], view.result.get("memory_added")
    memory = ""
    if view.config.get("memory.enabled", view.config.get("memory")) is not None or shown or added:
        memory = (f"<p>harness memory: {len(shown)} entr{'y' if len(shown) == 1 else 'ies'} shown to the proposer"
                  + (f" ({esc(', '.join(_sid(e) for e in shown))})" if shown else "")
                  + ("; this run added its best harness as entry " + f'<span class="hid">{esc(_sid(added))}</span>'
                     if added else "; this run added no entry") + ".</p>")
    return (
        note
        + f"<p>strategy: <b>{esc(view.run.strategy or '–')}</b>, created {esc(view.run.created)}, "
        f"{len(view.proposals)} proposals, {sum(p.valid for p in view.proposals)} valid.</p>"
        + memory
        + table(["harness", "id", "J score split", "J test split"], rows)
        + beyond
        + "<details><summary>run configuration</summary>"
        + table(["key", "value"], cfg, empty="no configuration recorded")
        + "</details>"
    )


def lineage(view: RunView) -> str:
    """The lineage tree as nested lists: each harness with round, J and its diff to the parent."""
    ids = view.harness_ids
    if not ids:
        return '<p class="empty">no harnesses recorded</p>'
    rows = {h: view.store.harness(h) for h in ids}
    children: dict[str | None, list[str]] = defaultdict(list)
    for h in ids:
        row = rows[h]
        parent = row.parent_id if row is not None else None
        children[parent if parent in rows else None].append(h)
    score, test = view.j_by_harness("score"), view.j_by_harness("test")
    on_path = {r.id for r in view.best_path()}
    questions = _questions(view)

    def node(h: str, depth: int) -> str:
        row = rows[h]
        bits = [f'<span class="hid">{esc(_sid(h))}</span>']
        if row is not None and row.name:
            bits.append(esc(row.name))
        if row is not None and row.round is not None:
            bits.append(f"round {esc(row.round)}")
        bits.append(f"score J {fmt_num(score.get(h))}")
        if h in test:
            bits.append(f"test J {fmt_num(test[h])}")
        label = ", ".join(bits)
        if h == view.best_id:
            label = f'<span class="best">{label} ★ best</span>'
        elif h in on_path:
            label = f'<span class="best">{label}</span>'
        extra = ""
        src = _source(view, h)
        if src is not None:
            flags = find_answer_tables(src, questions)
            if flags:
                extra += "".join(f' <span class="flag">⚑ answer table? {esc(f.kind)} line {f.line}: {esc(f.detail)}</span>'
                                 for f in flags[:3])
            parent = row.parent_id if row is not None else None
            psrc = _source(view, parent) if parent else None
            if psrc is not None:
                extra += f"<details><summary>edit (diff to parent)</summary>{diff_html(psrc, src, _sid(parent), _sid(h))}</details>"
            else:
                extra += f"<details><summary>source</summary><pre>{esc(clip(src, 20000))}</pre></details>"
        kids = children.get(h, [])
        sub = "<ul>" + "".join(node(k, depth + 1) for k in kids) + "</ul>" if kids and depth < 50 else ""
        return f"<li>{label}{extra}{sub}</li>"

    return '<ul class="tree">' + "".join(node(h, 0) for h in children[None]) + "</ul>"


def _questions(view: RunView) -> list[str]:
    """The questions of the test-split problems this run evaluated (for answer-table flags)."""
    out: list[str] = []
    for e in view.evaluations:
        if e.split == "test":
            out.extend(r.question for r in view.store.problem_records(e.id) if r.question)
    return list(dict.fromkeys(out))


def best_diffs(view: RunView) -> str:
    """Diffs between consecutive best harnesses (seed -> ... -> final best)."""
    path = view.best_path()
    if len(path) < 2:
        return '<p class="empty">the seed is still the best harness: no diff</p>'
    parts = []
    for a, b in zip(path, path[1:], strict=False):
        sa, sb = _source(view, a.id), _source(view, b.id)
        title = f"{_sid(a.id)} → {_sid(b.id)}" + (f" (round {b.round})" if b.round is not None else "")
        if sa is None or sb is None:
            parts.append(f'<h3>{esc(title)}</h3><p class="empty">a harness source file is missing</p>')
        else:
            parts.append(f"<h3>{esc(title)}</h3>" + diff_html(sa, sb, _sid(a.id), _sid(b.id)))
    return "".join(parts)


def problems(view: RunView) -> str:
    """Per-problem table of the seed and the best harness on the test split."""
    seed_ev = view.evaluation_of(view.seed_id, "test")
    best_ev = view.evaluation_of(view.best_id, "test") if view.best_id != view.seed_id else None
    if seed_ev is None and best_ev is None:
        return '<p class="empty">no test-split evaluation of the seed or the best harness recorded</p>'
    seed_rows = {r.problem_id: r for r in view.store.problem_records(seed_ev.id)} if seed_ev else {}
    best_rows = {r.problem_id: r for r in view.store.problem_records(best_ev.id)} if best_ev else {}
    pids = list(dict.fromkeys([*seed_rows, *best_rows]))
    out: list[list[str]] = []
    for pid in pids[:MAX_PROBLEMS]:
        s, b = seed_rows.get(pid), best_rows.get(pid)
        any_row = s or b
        assert any_row is not None
        row = [td(pid, "cell"), td(any_row.family), td(any_row.question, "cell"), td(any_row.gold, "cell")]
        for r in (s, b) if best_ev else (s,):
            if r is None:
                row += [td("–"), td("–"), td(None, "num"), td("–")]
            else:
                row += [status_cell(r.status), td(r.answer, "cell"), td(r.score, "num"),
                        td(": ".join(x for x in (r.taxonomy, r.error) if x), "cell")]
        out.append(row)
    heads = ["problem", "family", "question", "gold"]
    for who in ("seed", "best") if best_ev else ("seed (also best)",):
        heads += [f"{who} status", f"{who} answer", f"{who} score", f"{who} failure / error"]
    more = f'<p class="note">first {MAX_PROBLEMS} of {len(pids)} problems shown</p>' if len(pids) > MAX_PROBLEMS else ""
    return table(heads, out) + more


def taxonomy(view: RunView) -> str:
    """Failure classes per task family: for the seed and the best harness on the test split,
    and over every evaluation of the run."""
    kinds = [k.value for k in FailureKind]
    parts = []
    for _, title, recs in taxonomy_groups(view):
        counts = rollup((r.family, r.taxonomy) for r in recs)
        totals: dict[str, int] = defaultdict(int)
        for r in recs:
            totals[r.family or "unknown"] += 1
        rows = [[td(fam)] + [td(c.get(k, 0), "num") for k in kinds] + [td(sum(c.values()), "num"), td(totals[fam], "num")]
                for fam, c in sorted(counts.items())]
        parts.append(f"<h3>{esc(title)}</h3>" + table(["family", *kinds, "failed", "problems"], rows,
                                                      empty="no classified failures"))
    return "".join(parts)


def proposals(view: RunView) -> str:
    """Every proposal with its validity and reason, the raw completion behind a <details>."""
    rows = []
    for p in view.proposals:
        raw = p.raw or ""
        rows.append([
            td(p.round, "num"), td(p.idx, "num"), f'<td class="hid">{esc(_sid(p.parent_id))}</td>',
            td(p.parsed, "num"), td(p.produced, "num"),
            f'<td class="{"st-ok" if p.valid else "st-bad"}">{"valid" if p.valid else "invalid"}</td>',
            td(p.reason or "", "cell"), td(p.detail or "", "cell"),
            f'<td class="hid">{esc(_sid(p.harness_id))}</td>',
            f'<td class="hid">{esc(", ".join(_sid(m) for m in p.memory or []) or "–")}</td>',
            f"<td><details><summary>{len(raw)} chars</summary><pre>{esc(clip(raw, MAX_RAW))}</pre></details></td>",
        ])
    return table(["round", "#", "parent", "parsed", "produced", "valid", "reason", "detail", "harness",
                  "memory shown", "raw"], rows, empty="no proposals recorded")


def budgets(view: RunView) -> str:
    """Solver calls, tokens and wall time per split; the proposer's calls and tokens; and the
    cumulative counts per round as the adaptation loop recorded them."""
    rows = [[td(r["what"]), td(r["evaluations"], "num"), td(r["calls"], "num"), td(r["tokens"], "num"),
             td(round(r["wall_s"], 1), "num")] for r in view.budget_rows()]
    out = table(["", "evaluations / proposals", "calls", "tokens", "wall s"], rows)
    if view.rounds:
        rr = [[td(r.round, "num"), f'<td class="hid">{esc(_sid(r.best_harness_id))}</td>',
               td(r.best_score_J, "num"), td(r.improved, "num"), td(r.n_proposals, "num"),
               td(r.n_valid, "num"), td(r.solver_calls, "num"), td(r.tokens, "num")] for r in view.rounds]
        out += "<h3>per round (cumulative solver budget)</h3>" + table(
            ["round", "best", "best score J", "improved", "proposals", "valid", "solver calls", "tokens"], rr)
    from harnesslearn import spend

    cfg = view.config
    rows_spend = spend.per_round(view.store, view.id, str(cfg.get("solver", "")), str(cfg.get("proposer", "")))
    if rows_spend:
        sr = [[td("final test" if r["round"] is None else r["round"], "num"), td(r["proposer_tokens"], "num"),
               td(r["solver_tokens"], "num"), td(r["usd"], "num")] for r in rows_spend]
        out += ("<h3>spend per round</h3>" + table(["round", "proposer tokens", "solver tokens", "USD"], sr)
                + '<p class="note">USD from the genai-prices table for hosted models it knows; empty where a model '
                "is not priced (local ones).</p>")
    stopped = (view.result or {}).get("stopped")
    if stopped:
        out += f'<p class="note">{esc(stopped)}; <code>--resume</code> with a larger cap continues the run.</p>'
    return out
