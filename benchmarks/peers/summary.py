"""Test J against proposer calls, per system, over the budgets of several peers runs (issue 35's table and plot).

    .venv/bin/python benchmarks/peers/summary.py benchmarks/peers/results_gpu/b16 benchmarks/peers/results_gpu/b64 \\
        --out benchmarks/peers/results_gpu

Each folder is one ``run.py --out`` (or a ``--from-partial`` rebuild) at one proposer-call budget. For each budget
the systems are compared on the same cells: the (task, seed) pairs where every system of that budget has a
finished run, so a mean never mixes tasks that another system lacks. The interval is a 95 % bootstrap over those
cells (not over problems: each cell's own interval is in its folder's ``results.md``). "minus best zoo" pairs each
cell with the best zoo harness picked on the same cell's score split, with no proposer; "minus ours" pairs it with
our plain sequential system (the untrained proposer, no memory): what training, the memory or another search adds;
"zoo copies" counts the returned harnesses whose nearest zoo file has a difflib ratio of 0.8 or more: a system that
only brings back a zoo harness it was shown has not gone beyond it.

"Pairs" changes one thing at a time (``PAIRS``: training, the memory, the proposer's format), each pair on every
cell both of its systems finished.

More sections read every finished run, not only the common cells: each system's proposals (valid in its own
terms, completion tokens per call, our invalid reasons, our proposer format); what all its valid proposals are (zoo
near-copies, or what they do with the solver: the rows' ``proposed``, counted when ``run.py --from-partial``
rebuilds a folder); what each system's returned harnesses do with the solver (``harnesslearn.taxonomy.solver_use``:
compute the answer in Python, have the solver write a program for ``model.python``, or call the solver), and every
cell where a peer (GEPA, OpenEvolve) beats each of our systems that finished it, with what both returned harnesses
do (issue 35: where a peer wins, say why); and every run above its cell's best zoo harness with a harness that is
not a zoo near-copy, with what that harness is: the runtime API's program pattern, which every prompt shows
(``PATTERN_LINE``), or else its solver use (the question: did a proposer go beyond what it was shown?).

Writes ``OUT/summary.md``, ``OUT/summary.png`` and ``OUT/summary.html`` (one self-contained page: the plot, then the
tables; markdown-it-py renders them); reads the folders only.
"""

from __future__ import annotations

import argparse
import base64
import html
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from common import LABELS, SYSTEMS, style  # this folder is on sys.path: the script's own

from harnesslearn.taxonomy import HARNESS_KINDS as KINDS
from harnesslearn.taxonomy import SOLVER_USES, solver_use
from harnesslearn.zoo import NEAR_COPY as COPY_RATIO  # returned harness this close to a zoo file: a copy

BASE = "hl-sequential"  # "minus ours": each system paired with this one on the same cell
PEERS = ("gepa", "openevolve")
PATTERN_LINE = "Write a Python program that prints the answer to"  # checked against the runtime API (pattern_line)
# (system, its control, what the difference isolates): the two differ in one setting only
PAIRS = (
    ("hl-sequential@trained", "hl-sequential", "training (both asked in words, chat-function: not the trained "
     "proposer's training format)"),
    ("hl-sequential~prefill@trained", "hl-sequential~prefill", "training (both prefilled, chat-prefill: the trained "
     "proposer's training format)"),
    ("hl-sequential~prefill", "hl-sequential", "the prefilled rewrite of solve() against the one asked for in words"),
    ("hl-sequential~file", "hl-sequential", "whole-file revisions against rewrites of solve()"),
    ("hl-independent~file", "hl-independent", "whole-file revisions against rewrites of solve()"),
    ("hl-sequential+mem", "hl-sequential~file", "the memory (both write whole files)"),
    ("hl-independent+mem", "hl-independent~file", "the memory (both write whole files)"),
)


def cells_of(rows: Mapping[tuple[str, int, str], Mapping[str, Any]]) -> dict[str, dict[tuple[str, int], Any]]:
    """system -> {(task, seed): finished run} (runs with an error, "not run" included, left out)."""
    out: dict[str, dict[tuple[str, int], Any]] = {}
    for (task, seed, system), r in rows.items():
        if not r.get("error") and r.get("test_J") is not None:
            out.setdefault(system, {})[(task, seed)] = r
    return out


def zoo_copy(run: Mapping[str, Any]) -> bool:
    """Whether a run returned a near-copy of a zoo file (its nearest zoo file within ``COPY_RATIO``)."""
    return bool((run.get("returned_nearest_zoo") or {}).get("ratio", 0) >= COPY_RATIO)


def budget_summary(by_system: Mapping[str, Mapping[tuple[str, int], Any]]) -> dict[str, Any]:
    """Per system, over the cells every system has: mean test J, gain over the seed, minus the best zoo harness
    (each with its bootstrap interval over cells), and how many returned harnesses are zoo copies."""
    from harnesslearn.stats import bootstrap_ci

    systems = [s for s in SYSTEMS if s in by_system]
    common = sorted(set.intersection(*(set(by_system[s]) for s in systems))) if systems else []
    zoo = by_system.get("zoo", {})
    out: dict[str, Any] = {"cells": common, "systems": {}}
    for s in systems:
        runs = [by_system[s][c] for c in common]
        test = [float(r["test_J"]) for r in runs]
        gain = [float(r["test_J"]) - float(r["seed_test_J"]) for r in runs]
        copy = [zoo_copy(r) for r in runs]
        row: dict[str, Any] = {"test": bootstrap_ci(test), "gain": bootstrap_ci(gain), "copies": sum(copy),
                               "proposer_calls": sum(r["ledger"]["proposer_calls"] for r in runs) / max(1, len(runs))}
        if zoo and s != "zoo":
            vs = [float(r["test_J"]) - float(zoo[c]["test_J"]) for r, c in zip(runs, common, strict=True)]
            row["minus_zoo"] = bootstrap_ci(vs)
            row["above_zoo"] = sum(1 for v in vs if v > 1e-9)
            # above the zoo with a zoo file written back: another zoo file than the score split picked (or the
            # same one edited a little), not a harness beyond the zoo
            row["above_zoo_copies"] = sum(1 for v, c in zip(vs, copy, strict=True) if v > 1e-9 and c)
        if BASE in by_system and s not in (BASE, "zoo"):
            row["minus_ours"] = bootstrap_ci([float(r["test_J"]) - float(by_system[BASE][c]["test_J"])
                                              for r, c in zip(runs, common, strict=True)])
        out["systems"][s] = row
    return out


def uses_of(by_system: Mapping[str, Mapping[tuple[str, int], Any]]) -> dict[str, dict[str, int]]:
    """system -> {solver use: count} over its finished runs' returned harnesses (their source as recorded)."""
    return {s: {u: sum(1 for r in by_system[s].values() if solver_use(r.get("returned_source") or "") == u)
                for u in SOLVER_USES}
            for s in SYSTEMS if s in by_system}


def pairs_of(by_system: Mapping[str, Mapping[tuple[str, int], Any]]) -> list[dict[str, Any]]:
    """Each of ``PAIRS`` whose two systems share finished cells: the mean difference of test J, paired by cell,
    with its bootstrap interval."""
    from harnesslearn.stats import bootstrap_ci

    out = []
    for system, control, what in PAIRS:
        a, b = by_system.get(system, {}), by_system.get(control, {})
        cells = sorted(set(a) & set(b))
        if cells:
            out.append({"system": system, "control": control, "what": what, "cells": len(cells),
                        "diff": bootstrap_ci([float(a[c]["test_J"]) - float(b[c]["test_J"]) for c in cells])})
    return out


def kinds_of(by_system: Mapping[str, Mapping[tuple[str, int], Any]]) -> dict[str, dict[str, int]]:
    """system -> its valid proposals by kind (``KINDS``) summed over the finished runs that hold ``proposed``, with
    ``runs`` the number of those runs."""
    out: dict[str, dict[str, int]] = {}
    for s in SYSTEMS:
        runs = [r["proposed"] for r in by_system.get(s, {}).values() if r.get("proposed")]
        if runs and s != "zoo":
            out[s] = {"runs": len(runs), **{k: sum(int(p.get(k, 0)) for p in runs) for k in KINDS}}
    return out


def proposals_of(by_system: Mapping[str, Mapping[tuple[str, int], Any]]) -> dict[str, dict[str, Any]]:
    """system -> its finished runs' proposals, the valid ones (each system's own terms, as in ``results.md``),
    completion tokens per proposer call (the proxy's count), and our systems' invalid reasons summed."""
    out: dict[str, dict[str, Any]] = {}
    for s in SYSTEMS:
        runs = list(by_system.get(s, {}).values())
        if not runs or s == "zoo":
            continue
        calls = sum(r["ledger"]["proposer_calls"] for r in runs)
        reasons: dict[str, int] = {}
        formats: set[str] = set()
        for r in runs:  # ours: adapt's own count (the validity note is rendered from it)
            adapt = (r.get("peer") or {}).get("adapt") or {}
            for name, n in (adapt.get("invalid_reasons") or {}).items():
                reasons[name] = reasons.get(name, 0) + int(n)
            if adapt.get("proposer_format"):
                formats.add(adapt["proposer_format"])
        out[s] = {"formats": sorted(formats), "proposals": sum((r.get("validity") or {}).get("proposals", 0) for r in runs),
                  "valid": sum((r.get("validity") or {}).get("valid", 0) for r in runs),
                  "tokens": sum(r["ledger"].get("proposer_completion_tokens", 0) for r in runs) / max(1, calls),
                  "reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1]))}
    return out


def peer_wins(calls: int, by_system: Mapping[str, Mapping[tuple[str, int], Any]]) -> list[dict[str, Any]]:
    """Every cell where a peer's test J is above each of our systems that finished the cell."""
    ours = [s for s in by_system if s.startswith("hl-")]
    wins = []
    for peer in PEERS:
        for cell, r in sorted(by_system.get(peer, {}).items()):
            mine = {s: by_system[s][cell] for s in ours if cell in by_system[s]}
            if not mine:
                continue
            best = max(mine, key=lambda s: float(mine[s]["test_J"]))
            if float(r["test_J"]) > float(mine[best]["test_J"]) + 1e-9:
                wins.append({"calls": calls, "task": cell[0], "seed": cell[1], "peer": peer, "J": float(r["test_J"]),
                             "use": solver_use(r.get("returned_source") or ""), "ours": best,
                             "ours_J": float(mine[best]["test_J"]),
                             "ours_use": solver_use(mine[best].get("returned_source") or ""), "n_ours": len(mine)})
    return wins


def pattern_line() -> str:
    """The request line of the runtime API's "write a program and run it" pattern, which every prompt shows (the
    peers' included): a returned harness that carries it applies what it was shown."""
    from harnesslearn.harness import runtime_api_doc

    doc = runtime_api_doc()
    if PATTERN_LINE not in doc:
        raise SystemExit(f"summary.py: {PATTERN_LINE!r} is no longer in the runtime API: update PATTERN_LINE")
    return PATTERN_LINE


def above_zoo(calls: int, by_system: Mapping[str, Mapping[tuple[str, int], Any]]) -> list[dict[str, Any]]:
    """Every finished run that tests above its cell's best zoo harness with a harness that is not a zoo near-copy,
    with what that harness is: the prompt's program pattern where it carries ``pattern_line`` (whatever else it
    does), else its solver use; and its solver use in any case. A run whose returned source was not recorded is
    listed as such (it cannot be told from a zoo copy)."""
    zoo = by_system.get("zoo", {})
    line = pattern_line()
    out = []
    for s in (s for s in SYSTEMS if s != "zoo"):
        for cell, r in sorted(by_system.get(s, {}).items()):
            if cell not in zoo or float(r["test_J"]) <= float(zoo[cell]["test_J"]) + 1e-9 or zoo_copy(r):
                continue
            near = r.get("returned_nearest_zoo") or {}
            source = r.get("returned_source") or ""
            use = solver_use(source) if source else "no source recorded"
            out.append({"calls": calls, "task": cell[0], "seed": cell[1], "system": s, "J": float(r["test_J"]),
                        "zoo_J": float(zoo[cell]["test_J"]), "near": near, "use": use,
                        "what": "the prompt's program pattern" if source and line in source else use})
    return out


def ci(c: Mapping[str, float], signed: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(c['mean'])} [{f.format(c['lo'])}, {f.format(c['hi'])}]"


def render(budgets: Sequence[tuple[int, str, dict[str, Any]]], per_task: dict[int, dict[str, dict[str, list[float]]]],
           label: str, uses: Mapping[int, Mapping[str, Mapping[str, int]]] = {},
           wins: Sequence[Mapping[str, Any]] = (), proposals: Mapping[int, Mapping[str, Any]] = {},
           pairs: Mapping[int, Sequence[Mapping[str, Any]]] = {}, kinds: Mapping[int, Mapping[str, Any]] = {},
           above_runs: Sequence[Mapping[str, Any]] = ()) -> str:
    lines = ["# Peers: test J against proposer calls (generated by benchmarks/peers/summary.py; do not edit)", "",
             f"{label}.", "",
             "Per budget, every system on the same cells (task x seed pairs where all of them finished); 95 % "
             "bootstrap intervals over those cells. Minus best zoo: paired with the best zoo harness picked on the "
             f"same cell's score split (no proposer). Minus ours: paired with {LABELS[BASE]} (the untrained "
             f"proposer, no memory) on the same cell. Zoo copies: returned harnesses within difflib ratio "
             f"{COPY_RATIO} of a zoo file. Cells above the zoo: where the returned harness tests above the best zoo "
             "harness; in brackets, how many of those returned a zoo copy (another zoo file than the score split "
             "picked, or the same one edited a little: not a harness beyond the zoo).", ""]
    for calls, folder, s in budgets:
        lines += [f"## {calls} proposer calls (`{folder}`): {len(s['cells'])} cells", ""]
        if not s["cells"]:
            lines += ["No cell has a finished run of every system yet.", ""]
            continue
        tasks = sorted({t for t, _ in s["cells"]})
        counts = [f"{t.split('?')[0]} ({sum(1 for c in s['cells'] if c[0] == t)})" for t in tasks]
        lines += [f"Cells: {', '.join(counts)}.",
                  "", "| system | mean test J | gain over the seed harness | minus best zoo | cells above the zoo |"
                  " minus ours (sequential) | zoo copies returned | proposer calls / cell |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, r in s["systems"].items():
            mz = ci(r["minus_zoo"], True) if "minus_zoo" in r else "n/a"
            above = f"{r['above_zoo']} / {len(s['cells'])}" if "above_zoo" in r else "n/a"
            if r.get("above_zoo_copies"):
                k = r["above_zoo_copies"]
                above += f" ({k} a zoo copy)" if k == 1 else f" ({k} zoo copies)"
            mo = ci(r["minus_ours"], True) if "minus_ours" in r else "n/a"
            lines.append(f"| {LABELS[name]} | {ci(r['test'])} | {ci(r['gain'], True)} | {mz} | {above} | {mo} |"
                         f" {r['copies']} / {len(s['cells'])} | {r['proposer_calls']:.1f} |")
        lines.append("")
    if any(pairs.values()):
        lines += ["## Pairs: one change at a time", "",
                  "Each system minus its control on every cell both finished (not only the common cells above), "
                  "95 % bootstrap over those cells.", "",
                  "| calls | system | minus | what it isolates | cells | mean difference of test J |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {c} | {LABELS[q['system']]} | {LABELS[q['control']]} | {q['what']} | {q['cells']} |"
                  f" {ci(q['diff'], True)} |" for c in pairs for q in pairs[c]]
        lines.append("")
    lines += ["## Per task: mean test J over the seeds that finished (runs in brackets), every budget", "",
              "| task | system | " + " | ".join(f"{c} calls" for c in per_task) + " |",
              "|---|---|" + "---|" * len(per_task)]
    tasks = sorted({t for pt in per_task.values() for t in pt})
    for t in tasks:
        for name in SYSTEMS:
            cells = [per_task[c].get(t, {}).get(name, []) for c in per_task]
            if any(cells):
                lines.append(f"| {t.split('?')[0]} | {LABELS[name]} | " + " | ".join(
                    f"{sum(v) / len(v):.3f} ({len(v)})" if v else "not run" for v in cells) + " |")
    if uses:
        lines += ["", "## What the returned harnesses do with the solver (every finished run)", "",
                  "computes: no solver call, the answer computed in Python; solver_program: the solver writes a "
                  "program that `model.python` runs (the zoo's interpreter loop does); prompt_level: solver calls "
                  "with Python around them. Runs of each system, per budget.", "",
                  "| system | " + " | ".join(f"{c} calls: {u}" for c in uses for u in SOLVER_USES[:3]) + " |",
                  "|---|" + "---|" * (3 * len(uses))]
        for name in SYSTEMS:
            if any(name in u for u in uses.values()):
                lines.append(f"| {LABELS[name]} | " + " | ".join(
                    str(uses[c][name][u]) if name in uses[c] else "-" for c in uses for u in SOLVER_USES[:3]) + " |")
    if any(kinds.values()):
        lines += ["", "## What the proposals are (every finished run whose row holds them)", "",
                  "Every valid, distinct harness a system evaluated, the seed left out: near-copies of a zoo file "
                  f"(difflib ratio {COPY_RATIO} or more), the others by what they do with the solver (as in the "
                  "next table). Not only the returned harness: a proposer that writes zoo files back and one that "
                  "writes programs of its own differ here even where both return the seed. Counted by "
                  "`run.py --from-partial` (slow: difflib).", "",
                  "| system | " + " | ".join(f"{c} calls: runs | {c} calls: harnesses | " + " | ".join(
                      f"{c} calls: {k}" for k in KINDS) for c in kinds) + " |",
                  "|---|" + "---|" * ((2 + len(KINDS)) * len(kinds))]
        for name in SYSTEMS:
            if any(name in k for k in kinds.values()):
                cells = []
                for c in kinds:
                    q = kinds[c].get(name)
                    if q is None:
                        cells += ["-"] * (2 + len(KINDS))
                        continue
                    n = sum(q[k] for k in KINDS)
                    cells += [str(q["runs"]), str(n)] + [f"{q[k]} ({q[k] / n:.0%})" if n else "0" for k in KINDS]
                lines.append(f"| {LABELS[name]} | " + " | ".join(cells) + " |")
    if proposals:
        lines += ["", "## Proposals (every finished run)", "",
                  "Valid: in each system's own terms (ours: an edit that applies, compiles and changes the harness; "
                  "GEPA: a candidate that is a harness; OpenEvolve: a distinct child program, other than the seed, that is "
                  "a valid harness). "
                  "Tokens: completion tokens per proposer call, counted by the proxy (the limit is the run's "
                  "`--max-tokens`). Invalid: our systems' reasons, summed. Format: how our systems' proposer was "
                  "asked (`ProposerSettings.format`).", "",
                  "| system | format | " + " | ".join(f"{c} calls: valid / proposals | {c} calls: tokens / call | "
                                            f"{c} calls: invalid (ours)" for c in proposals) + " |",
                  "|---|---|" + "---|" * (3 * len(proposals))]
        for name in SYSTEMS:
            if any(name in p for p in proposals.values()):
                fmts = sorted({f for p in proposals.values() for f in (p.get(name) or {}).get("formats", [])})
                cells = [", ".join(fmts) or "-"]
                for c in proposals:
                    q = proposals[c].get(name)
                    if q is None:
                        cells += ["-", "-", "-"]
                        continue
                    share = f" ({q['valid'] / q['proposals']:.0%})" if q["proposals"] else ""
                    top = ", ".join(f"{k} {v}" for k, v in list(q["reasons"].items())[:3])
                    cells += [f"{q['valid']} / {q['proposals']}{share}", f"{q['tokens']:.0f}", top or "-"]
                lines.append(f"| {LABELS[name]} | " + " | ".join(cells) + " |")
    if above_runs:
        counts = ", ".join(f"{w} {n}" for w, n in Counter(a["what"] for a in above_runs).most_common())
        lines += ["", "## Above the zoo without a zoo copy (every finished run)", "",
                  "Runs whose returned harness tests above the cell's best zoo harness and is not a near-copy of a "
                  f"zoo file (difflib ratio below {COPY_RATIO}). What it is: the runtime API's program pattern, "
                  "which every prompt shows (its line `" + PATTERN_LINE + "` is in the harness), or "
                  f"else what it does with the solver. {len(above_runs)} run{'s' * (len(above_runs) != 1)}: {counts}.", "",
                  "| calls | task | seed | system | test J | best zoo harness | nearest zoo file (ratio) | what it is |"
                  " what it does with the solver |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {a['calls']} | {a['task'].split('?')[0]} | {a['seed']} | {LABELS[a['system']]} | {a['J']:.3f} |"
                  f" {a['zoo_J']:.3f} | {a['near'].get('name', '-')} ({a['near'].get('ratio', 0):.2f}) | {a['what']} |"
                  f" {a['use']} |"
                  for a in above_runs]
    if uses or wins:
        lines += ["", "## Cells where a peer beats every system of ours that finished the cell", ""]
        if not wins:
            lines.append("None.")
        else:
            lines += ["| calls | task | seed | peer | its test J | what it does | our best there | its test J |"
                      " what ours does | our systems on the cell |", "|---|---|---|---|---|---|---|---|---|---|"]
            lines += [f"| {w['calls']} | {w['task'].split('?')[0]} | {w['seed']} | {LABELS[w['peer']]} | {w['J']:.3f} |"
                      f" {w['use']} | {LABELS[w['ours']]} | {w['ours_J']:.3f} | {w['ours_use']} | {w['n_ours']} |"
                      for w in wins]
    return "\n".join(lines) + "\n"


def plot(budgets: Sequence[tuple[int, str, dict[str, Any]]], path: Path, label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.8))
    joined = len({tuple(s["cells"]) for _, _, s in budgets}) == 1  # lines only between means of the same cells
    names = [n for n in SYSTEMS if any(n in s["systems"] for _, _, s in budgets)]
    for i, name in enumerate(names):
        pts = [(c, s["systems"][name]["test"], len(s["cells"])) for c, _, s in budgets if name in s["systems"]]
        if not pts:
            continue
        xs = [c * (1 + 0.03 * (i - len(names) / 2)) for c, _, _ in pts]  # dodged so the bars do not overlap
        ys = [p["mean"] for _, p, _ in pts]
        err = [[p["mean"] - p["lo"] for _, p, _ in pts], [p["hi"] - p["mean"] for _, p, _ in pts]]
        colour, marker = style(name)
        ax.errorbar(xs, ys, yerr=err, capsize=3, linestyle=("--" if name == "zoo" else "-") if joined else "none",
                    marker=marker, markersize=7, color=colour, label=f"{LABELS[name]}")
    ax.set_xscale("log", base=2)
    ax.set_xticks([c for c, _, _ in budgets], [f"{c}\n({len(s['cells'])} cells)" for c, _, s in budgets])
    ax.set_xlabel("proposer calls per system and cell")
    ax.set_ylabel("mean test J over the common cells")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: it hid points
    ax.set_title(f"{textwrap.fill(label, 80)}\ntest J against proposer calls (95 % bootstrap over cells)"
                 + ("" if joined else "; not joined: the budgets' common cells differ"), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


HTML_STYLE = """body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1300px; padding: 0 1em; color: #222; }
h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; border: 1px solid #eee; }"""


def html_page(md: str, png: bytes, label: str) -> str:
    """One self-contained page (no script, no outside request): the plot, then ``summary.md`` rendered."""
    from markdown_it import MarkdownIt

    head, _, rest = md.partition("\n")
    title = head.lstrip("# ").strip()
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(rest)
    src = "data:image/png;base64," + base64.b64encode(png).decode()
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'\">\n"
            f"<title>{html.escape(title)}</title><style>{HTML_STYLE}</style></head><body>\n"
            f"<h1>{html.escape(title)}</h1>\n<img src=\"{src}\" alt=\"{html.escape('Test J against proposer calls: ' + label)}\">\n"
            f"{body}</body></html>\n")


def main(argv: list[str] | None = None) -> int:
    # benchmarks/peers/run.py's reading of a folder: the rows as its tables read them (stale rows not run)
    from run import load_rows

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="run.py --out folders, one per budget")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--label", default="", help="what ran, for the table and the plot (model, machine; default: the "
                   "first folder's model and machine as recorded)")
    a = p.parse_args(argv)
    budgets, per_task, label = [], {}, a.label
    uses: dict[int, dict[str, dict[str, int]]] = {}
    wins: list[dict[str, Any]] = []
    above: list[dict[str, Any]] = []
    proposals: dict[int, dict[str, Any]] = {}
    pairs: dict[int, list[dict[str, Any]]] = {}
    kinds: dict[int, dict[str, dict[str, int]]] = {}
    for folder in a.folders:
        if not (folder / "results.json").is_file():
            raise SystemExit(f"{folder}: no results.json (give a run.py --out folder)")
        meta, rows = load_rows(folder)
        calls = int(meta["proposer_calls"])
        label = label or f"{meta.get('model', '?')} as solver and proposer, {meta.get('machine', '?')}"
        if calls in per_task:
            raise SystemExit(f"{folder}: a second folder at {calls} proposer calls (give one per budget)")
        by_system = cells_of(rows)
        budgets.append((calls, str(folder), budget_summary(by_system)))
        uses[calls] = uses_of(by_system)
        proposals[calls] = proposals_of(by_system)
        pairs[calls] = pairs_of(by_system)
        kinds[calls] = kinds_of(by_system)
        wins += peer_wins(calls, by_system)
        above += above_zoo(calls, by_system)
        per_task[calls] = {}
        for name, cells in by_system.items():
            for (task, _), r in cells.items():
                per_task[calls].setdefault(task, {}).setdefault(name, []).append(float(r["test_J"]))
    budgets.sort(key=lambda b: b[0])
    per_task = dict(sorted(per_task.items()))
    a.out.mkdir(parents=True, exist_ok=True)
    uses = dict(sorted(uses.items()))
    wins.sort(key=lambda w: (w["calls"], w["task"], w["seed"], w["peer"]))
    proposals = dict(sorted(proposals.items()))
    md = render(budgets, per_task, label, uses, wins, proposals, dict(sorted(pairs.items())),
                dict(sorted(kinds.items())), sorted(above, key=lambda r: (r["calls"], r["task"], r["seed"])))
    (a.out / "summary.md").write_text(md, encoding="utf-8")
    plot(budgets, a.out / "summary.png", label)
    (a.out / "summary.html").write_text(html_page(md, (a.out / "summary.png").read_bytes(), label), encoding="utf-8")
    print(f"wrote {a.out / 'summary.md'}, {a.out / 'summary.png'} and {a.out / 'summary.html'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
