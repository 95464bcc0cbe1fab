"""Issue 12 results -> experiments/results/qwen/{results.md, transfer.json, per_family.png,
reward_curve.png}, from the files qwen12.py brought back (no model is loaded).

    python3 experiments/qwen12_report.py --ret DIR --out experiments/results/qwen [--notes NOTES.md]

Transfer table: for each row (base / sft / rl proposer, each also shown the harness memory: one
revision of the minimal seed, the best of K proposals by score-split J, kept only if strictly better
than the seed; zoo: the best zoo harness by score-split J), the mean over families of the test J, with
95 % bootstrap intervals (problems resampled within each family; and families resampled too), validity
rates, the paired difference to the seed and to the base proposer on the families both rows finished,
and whether the picks go beyond the zoo: how many are near-copies of a zoo file (difflib ratio >= 0.8),
the test J of the others, and the kind of each pick (the SFT screen's classifier: interpreter loop,
sampling/voting, answer extraction, prompt rewrite, other).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import exp_stats as st
import revision

ARMS = ["seed", "base", "sft", "rl", "base_mem", "sft_mem", "rl_mem", "zoo"]
LABEL = {"seed": "minimal seed (no revision)", "base": "base proposer (untrained 1.5B)", "sft": "SFT proposer",
         "rl": "RL proposer (SFT + GRPO)", "base_mem": "base proposer + harness memory",
         "sft_mem": "SFT proposer + harness memory", "rl_mem": "RL proposer + harness memory",
         "zoo": "best zoo harness (by score split)"}


PICKS = ("seed", "sequential", "independent", "oracle")


def read_jsonl(p: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``p`` (gzipped when it ends in .gz, as the rollout log), [] when it is missing."""
    import gzip

    if not p.is_file():
        return []
    text = gzip.decompress(p.read_bytes()).decode("utf-8") if p.suffix == ".gz" else p.read_text()
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def fmt(ci: dict[str, float] | None) -> str:
    if ci is None or math.isnan(ci.get("mean", math.nan)):
        return "n/a"
    return f"{ci['mean']:.3f} [{ci['lo']:.3f}, {ci['hi']:.3f}]"


def cell(x: float | None, d: int = 3) -> str:
    """A table cell: the number to ``d`` places, empty for None."""
    return "" if x is None else f"{x:.{d}f}"


def family_of(group: dict[str, Any]) -> str:
    """A rollout group's task family: ``rg:maze`` -> ``maze``."""
    return str(group.get("task", "?")).split(":")[-1]


def transfer(rows: list[dict[str, Any]]) -> dict[str, Any]:
    per: dict[str, dict[str, list[float]]] = {a: {} for a in ARMS}  # arm -> family -> test scores
    val: dict[str, dict[str, int]] = {a: {"proposals": 0, "parsed": 0, "produced": 0, "valid": 0, "distinct": 0,
                                          "unknown_distinct": 0, "improved": 0, "families": 0} for a in ARMS}
    for r in rows:
        per[r["arm"]][r["family"]] = r["after_scores"]
        per["seed"].setdefault(r["family"], r["seed_scores"])
        v = val[r["arm"]]
        for k in ("proposals", "parsed", "produced", "valid"):
            v[k] += int(r.get(k, 0))
        if "distinct" in r:
            v["distinct"] += int(r["distinct"])
        else:  # a row from before the count (stretch 1): the arm's count is unknown, not its valid count
            v["unknown_distinct"] += 1
        v["improved"] += bool(r.get("improved"))
        v["families"] += 1
    out: dict[str, Any] = {"rows": {}}
    for a in ARMS:
        if not per[a]:
            continue
        fam = per[a]
        row = {"label": LABEL[a], "families": len(fam),
               "test_J": st.bootstrap_family_mean(fam),
               "test_J_families_resampled": st.bootstrap_family_mean(fam, resample_families=True),
               "per_family": {f: (sum(v) / len(v) if v else None) for f, v in fam.items()}}
        if a != "seed":
            seed = {f: per["seed"][f] for f in fam if f in per["seed"]}
            row["minus_seed"] = st.bootstrap_family_mean_diff(seed, {f: fam[f] for f in seed})
            row["minus_seed_families_resampled"] = st.bootstrap_family_mean_diff(
                seed, {f: fam[f] for f in seed}, resample_families=True)
            if a not in ("base",) and per["base"]:
                common = [f for f in fam if f in per["base"]]
                row["minus_base"] = st.bootstrap_family_mean_diff({f: per["base"][f] for f in common},
                                                                  {f: fam[f] for f in common})
                row["minus_base_families"] = len(common)
                row["minus_base_families_resampled"] = st.bootstrap_family_mean_diff(
                    {f: per["base"][f] for f in common}, {f: fam[f] for f in common}, resample_families=True)
            if a != "zoo" and per["zoo"]:  # against the best thing it was shown: does the proposer go beyond it?
                common = [f for f in fam if f in per["zoo"]]
                row["minus_zoo_families_resampled"] = st.bootstrap_family_mean_diff(
                    {f: per["zoo"][f] for f in common}, {f: fam[f] for f in common}, resample_families=True)
                row["above_zoo_families"] = sum(1 for f in common if (mean(fam[f]) or 0.0) > (mean(per["zoo"][f]) or 0.0))
            row["beyond_zoo"] = beyond_zoo([r for r in rows if r["arm"] == a])
            v = val[a]
            unknown = v.pop("unknown_distinct")
            row["validity"] = {**v, "distinct": None if unknown else v["distinct"],
                               "valid_rate": v["valid"] / v["proposals"] if v["proposals"] else None,
                               "parse_rate": v["parsed"] / v["proposals"] if v["proposals"] else None}
        out["rows"][a] = row
    return out


def beyond_zoo(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Of the families where the arm's pick replaced the seed: how many picks are near-copies of a zoo
    harness (difflib ratio >= zoo.NEAR_COPY to a file of seeds/zoo), and the mean test J (and gain over
    the seed) of the picks that are not: does the proposer go beyond what it was shown?"""
    from collections import Counter

    from harnesslearn import zoo
    from harnesslearn.harness import load_harness
    from harnesslearn.training.screen import classify_revision

    won = [r for r in rows if r.get("improved") and r.get("picked_source")]
    seed = load_harness("minimal").source
    near = [r for r in won if zoo.nearest(r["picked_source"])[1] >= zoo.NEAR_COPY]
    other = [r for r in won if r not in near]

    return {"winners": len(won), "near_zoo_copies": len(near),
            "kinds": dict(Counter(classify_revision(seed, r["picked_source"]) for r in won)),
            "near_copy_share": len(near) / len(won) if won else None,
            "others_test_J": mean([r["test_J"] for r in other if r.get("test_J") is not None]),
            "others_gain": mean([r["test_J"] - r["seed_test_J"] for r in other
                                 if r.get("test_J") is not None and r.get("seed_test_J") is not None])}


def scored_candidates(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every valid candidate of the rollout log's groups, once: its update, J and the difflib ratio of its revised
    harness to the nearest zoo file. ``ratio`` is None when it is skipped, ``skipped`` says why: ``other_parent`` (a
    revision of another parent than the minimal seed), ``not_scored`` (an infrastructure failure: J None) or
    ``not_parsable_here`` (valid on the device, but the revised file does not compile under this Python: the device
    runs a newer one; 2 of 987 in stretch 5, both J 0). The zoo views below all read this."""
    from harnesslearn import zoo
    from harnesslearn.harness import harness_id, load_harness
    from harnesslearn.propose.edits import apply_blocks, parse_blocks

    seed = load_harness("minimal").source
    seed_id = harness_id(seed)
    out = []
    for r in groups:
        for c in r.get("candidates", []):
            if not c.get("valid"):
                continue
            # the blocks applied as they were when the candidate was judged valid (the rule has changed since)
            new = (apply_blocks(seed, parse_blocks(c["proposal"]).blocks)[0] if r.get("parent_id") == seed_id
                   else None)
            why = ("other_parent" if r.get("parent_id") != seed_id else "not_scored" if c.get("J") is None
                   else "not_parsable_here" if new is None else None)
            near = zoo.nearest(new) if why is None and new is not None else None
            out.append({"update": int(r["step"]) + 1, "J": None if why else float(c["J"]), "skipped": why,
                        "ratio": near[1] if near else None, "zoo": near[0] if near else None,
                        "family": family_of(r), "context": r.get("context_id")})
    return out


def _halves(updates: list[int]) -> tuple[int, dict[bool, str]]:
    """The last update of the first half of the update numbers present, and each half's label (by second half)."""
    ups = sorted(set(updates))
    cut = ups[(len(ups) - 1) // 2]
    return cut, {False: f"{ups[0]}-{cut}", True: f"{ups[ups.index(cut) + 1]}-{ups[-1]}" if cut != ups[-1] else ""}


def family_copies(cands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per training family and half of the updates (the first half of the update numbers present, then the rest):
    the scored candidates by which zoo file they copy (ratio >= zoo.NEAR_COPY; "other" below it), each with its
    count and mean J. Says what the policy learns on the training contexts: which zoo harness to write back for
    which family, or revisions of its own."""
    from harnesslearn import zoo

    scored = [c for c in cands if c["ratio"] is not None]
    if not scored:
        return []
    cut, halves = _halves([c["update"] for c in scored])
    by: dict[tuple[str, bool], dict[str, list[float]]] = {}  # (family, second half)
    for c in scored:
        kind = c["zoo"] if c["ratio"] >= zoo.NEAR_COPY else "other"
        by.setdefault((c["family"], c["update"] > cut), {}).setdefault(kind, []).append(c["J"])
    return [{"family": fam, "updates": halves[second], "candidates": sum(len(v) for v in kinds.values()),
             "kinds": {k: {"n": len(v), "J": mean(v)} for k, v in sorted(kinds.items())}}
            for (fam, second), kinds in sorted(by.items())]


def family_md(rows: list[dict[str, Any]], out: Path | None = None) -> list[str]:
    """The table of ``family_copies``: one column per zoo file copied anywhere, and "other"; with ``out``, a plot of
    the J each kind earned (count x mean J), stacked per family and half."""
    if not rows:
        return []
    names = sorted({k for r in rows for k in r["kinds"]} - {"other"}) + ["other"]
    md = ["## GRPO candidates per family: which zoo file they copy (training rollouts)", "",
          "Per paper-train family and half of the updates: the scored candidates that are near-copies of each zoo "
          "file (ratio >= 0.8), and the others, as count (mean J). A shift between the halves is what the policy "
          "learned on these contexts.", "",
          "| family | updates | candidates | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
    for r in rows:
        cells = [f"{r['kinds'][n]['n']} ({r['kinds'][n]['J']:.2f})" if n in r["kinds"] else "" for n in names]
        md.append(f"| {r['family']} | {r['updates']} | {r['candidates']} | " + " | ".join(cells) + " |")
    if out is None:
        return [*md, ""]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.4))
    labels = [f"{r['family']} {r['updates']}" for r in rows]
    bottom = [0.0] * len(rows)
    for n in names:
        earned = [r["kinds"][n]["n"] * (r["kinds"][n]["J"] or 0.0) if n in r["kinds"] else 0.0 for r in rows]
        ax.bar(labels, earned, bottom=bottom, label=n if n == "other" else f"copies of {n}")
        bottom = [b + e for b, e in zip(bottom, earned, strict=True)]
    ax.set_ylabel("J earned (sum over candidates)")
    _slant(ax)
    png = save(fig, ax, out, "grpo_family_copies.png",
               "GRPO: J earned per family and half of the updates, by kind (small-model result)")
    return [*md, "", f"![{png}]({png})", ""]


def group_duels(cands: list[dict[str, Any]], n_score: int) -> list[dict[str, Any]]:
    """Within one group (one context: the same problems, the same solver), does a candidate that is not a near-copy
    of a zoo file beat the best near-copy? Per family and half of the updates: the groups with both kinds, and how
    many of them the best non-copy wins or loses by at least one and by at least two of the ``n_score`` scoring
    problems (J is a mean over them: a one-problem margin is often luck); the groups without any near-copy whose
    best candidate has J > 0; and the mean best J of each kind over the groups with both. The training-time form of
    the question whether the proposer goes beyond the zoo it was shown (the held-out form is the transfer table)."""
    from harnesslearn import zoo

    scored = [c for c in cands if c["ratio"] is not None and c.get("context") is not None]
    if not scored or n_score < 1:
        return []
    cut, halves = _halves([c["update"] for c in scored])
    groups: dict[tuple[str, bool, str], list[dict[str, Any]]] = {}
    for c in scored:
        groups.setdefault((c["family"], c["update"] > cut, c["context"]), []).append(c)
    rows: dict[tuple[str, bool], dict[str, Any]] = {}
    one = 1.0 / n_score - 1e-9
    for (fam, second, _), cs in sorted(groups.items()):
        r = rows.setdefault((fam, second), {"family": fam, "updates": halves[second], "groups": 0,
                                            "other_by_1": 0, "other_by_2": 0, "copy_by_1": 0, "copy_by_2": 0,
                                            "no_copy_J_positive": 0, "_best_copy": [], "_best_other": []})
        r["groups"] += 1
        copies = [c["J"] for c in cs if c["ratio"] >= zoo.NEAR_COPY]
        others = [c["J"] for c in cs if c["ratio"] < zoo.NEAR_COPY]
        if copies and others:
            margin = max(others) - max(copies)
            r["other_by_1"] += margin >= one
            r["other_by_2"] += margin >= 2 * one
            r["copy_by_1"] += -margin >= one
            r["copy_by_2"] += -margin >= 2 * one
            r["_best_copy"].append(max(copies))
            r["_best_other"].append(max(others))
        elif others and max(others) > 0:
            r["no_copy_J_positive"] += 1
    out = []
    for r in rows.values():
        r["both"] = len(r["_best_copy"])
        r["best_copy_J"], r["best_other_J"] = mean(r.pop("_best_copy")), mean(r.pop("_best_other"))
        out.append(r)
    return out


def duels_md(rows: list[dict[str, Any]], n_score: int, out: Path | None = None) -> list[str]:
    """The table of ``group_duels`` and its total; with ``out``, a plot of the groups each kind led, per family and
    half (above zero the non-copies' leads, below the copies', by one problem and by two)."""
    if not rows:
        return []
    md = ["## GRPO: does a candidate that is not a zoo copy beat its group's best copy? (training rollouts)", "",
          f"Per paper-train family and half of the updates, over the groups (contexts) that have both near-copies of "
          f"a zoo file (ratio >= 0.8) and other valid candidates: how often the best other candidate is ahead of the "
          f"best copy, or behind it, by at least 1 and at least 2 of the {n_score} scoring problems (a one-problem "
          f"margin is often luck), and the mean best J of each kind there; 'no copy, J > 0': groups without a copy "
          f"whose best candidate scored. Same problems, same solver: a within-group view of whether the proposer "
          f"goes beyond the zoo on its training contexts, not a held-out one.", "",
          "| family | updates | groups | with both | other ahead by >= 1 / >= 2 | copy ahead by >= 1 / >= 2 | "
          "best other J | best copy J | no copy, J > 0 |", "|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['family']} | {r['updates']} | {r['groups']} | {r['both']} | {r['other_by_1']} / {r['other_by_2']} | "
           f"{r['copy_by_1']} / {r['copy_by_2']} | {cell(r['best_other_J'])} | {cell(r['best_copy_J'])} | "
           f"{r['no_copy_J_positive']} |" for r in rows]
    tot = {k: sum(r[k] for r in rows) for k in ("both", "other_by_1", "other_by_2", "copy_by_1", "copy_by_2")}
    md += [f"| all | | {sum(r['groups'] for r in rows)} | {tot['both']} | {tot['other_by_1']} / {tot['other_by_2']} | "
           f"{tot['copy_by_1']} / {tot['copy_by_2']} | | | {sum(r['no_copy_J_positive'] for r in rows)} |", ""]
    if out is None:
        return md
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.4))
    labels = [f"{r['family']} {r['updates']}" for r in rows]
    ax.bar(labels, [r["other_by_1"] - r["other_by_2"] for r in rows], bottom=[r["other_by_2"] for r in rows],
           color="#9ecae1", label="non-copy ahead by 1 problem")
    ax.bar(labels, [r["other_by_2"] for r in rows], color="#3182bd", label="non-copy ahead by >= 2")
    ax.bar(labels, [-(r["copy_by_1"] - r["copy_by_2"]) for r in rows], bottom=[-r["copy_by_2"] for r in rows],
           color="#fdae6b", label="zoo copy ahead by 1 problem")
    ax.bar(labels, [-r["copy_by_2"] for r in rows], color="#e6550d", label="zoo copy ahead by >= 2")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel("groups (contexts)")
    _slant(ax)
    png = save(fig, ax, out, "grpo_group_duels.png",
               "GRPO: within a group, the best non-copy against the best zoo copy (small-model result)")
    return [*md, f"![{png}]({png})", ""]


def parent_duels(groups: list[dict[str, Any]], n_score: int) -> list[dict[str, Any]]:
    """Does a group's best candidate beat the harness it was shown? Over the groups whose parent was scored on the
    same problems (the rollouts' ``parent_J``, since session 41), per parent (the minimal seed or another: a zoo
    harness in a zoo-seeded chain) and half of the updates: the mean parent J and mean best valid candidate J, and
    how many groups' best candidate is ahead of the parent, or behind it, by at least one and two of the
    ``n_score`` problems; groups without a scored valid candidate count as behind by nothing (``no_valid``)."""
    from harnesslearn.harness import harness_id, load_harness

    seed_id = harness_id(load_harness("minimal").source)
    have = [g for g in groups if g.get("parent_J") is not None]
    if not have or n_score < 1:
        return []
    cut, halves = _halves([int(g["step"]) + 1 for g in have])
    one = 1.0 / n_score - 1e-9
    rows: dict[tuple[str, bool], dict[str, Any]] = {}
    for g in have:
        kind = "minimal seed" if g.get("parent_id") == seed_id else "another harness"
        second = int(g["step"]) + 1 > cut
        r = rows.setdefault((kind, second), {"parent": kind, "updates": halves[second], "groups": 0, "no_valid": 0,
                                             "ahead_by_1": 0, "ahead_by_2": 0, "behind_by_1": 0, "behind_by_2": 0,
                                             "_parent": [], "_best": []})
        r["groups"] += 1
        js = [float(c["J"]) for c in g.get("candidates", []) if c.get("valid") and c.get("J") is not None]
        if not js:
            r["no_valid"] += 1
            continue
        margin = max(js) - float(g["parent_J"])
        r["ahead_by_1"] += margin >= one
        r["ahead_by_2"] += margin >= 2 * one
        r["behind_by_1"] += -margin >= one
        r["behind_by_2"] += -margin >= 2 * one
        r["_parent"].append(float(g["parent_J"]))
        r["_best"].append(max(js))
    out = []
    for _, r in sorted(rows.items()):
        r["parent_J"], r["best_J"] = mean(r.pop("_parent")), mean(r.pop("_best"))
        out.append(r)
    return out


def parent_md(rows: list[dict[str, Any]], n_score: int) -> list[str]:
    if not rows:
        return []
    md = ["## GRPO: does a group's best candidate beat its parent? (training rollouts with the parent scored)", "",
          f"Each context's parent harness was scored on its candidates' {n_score} problems with the same solver "
          "(`parent_J`). Per parent and half of the updates, over the groups with a scored valid candidate: the "
          "mean parent J and mean best candidate J, and how many groups' best candidate is ahead of its parent or "
          "behind it by at least 1 and 2 problems (a one-problem margin is often luck). In a zoo-seeded chain a "
          "copy of the parent is `no_change` (invalid), so 'ahead' is a revision that beats the zoo harness it "
          "was shown. Training contexts, not held out.", "",
          "| parent | updates | groups | no valid candidate | parent J | best candidate J | ahead by >= 1 / >= 2 | "
          "behind by >= 1 / >= 2 |", "|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['parent']} | {r['updates']} | {r['groups']} | {r['no_valid']} | {cell(r['parent_J'])} | "
           f"{cell(r['best_J'])} | {r['ahead_by_1']} / {r['ahead_by_2']} | {r['behind_by_1']} / {r['behind_by_2']} |"
           for r in rows]
    tot = {k: sum(r[k] for r in rows) for k in ("groups", "no_valid", "ahead_by_1", "ahead_by_2", "behind_by_1",
                                                "behind_by_2")}
    md += [f"| all | | {tot['groups']} | {tot['no_valid']} | | | {tot['ahead_by_1']} / {tot['ahead_by_2']} | "
           f"{tot['behind_by_1']} / {tot['behind_by_2']} |", ""]
    return md


def rollout_copies(cands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per GRPO update, from ``scored_candidates``: of the valid candidates (revisions of the minimal seed), how
    many are near-copies of a zoo harness (difflib ratio >= zoo.NEAR_COPY), and the mean J of those and of the
    others. The training signal's view of "beyond what it was shown": J earned by copying the zoo back (which the
    SFT rows taught) against J earned by anything else. Skipped candidates are counted."""
    from harnesslearn import zoo

    by: dict[int, dict[str, Any]] = {}
    for c in cands:
        u = by.setdefault(c["update"], {"update": c["update"], "valid": 0, "near": [], "other": [], "skipped": 0})
        if c["ratio"] is None:
            u["skipped"] += 1
            continue
        u["valid"] += 1
        u["near" if c["ratio"] >= zoo.NEAR_COPY else "other"].append(c["J"])

    return [{"update": u["update"], "valid": u["valid"], "skipped": u["skipped"], "near_copies": len(u["near"]),
             "near_copy_share": len(u["near"]) / u["valid"] if u["valid"] else None,
             "J_near": mean(u["near"]), "J_other": mean(u["other"]),
             "J_from_copies": sum(u["near"]) / (sum(u["near"]) + sum(u["other"])) if sum(u["near"]) + sum(u["other"])
             else None} for u in (by[k] for k in sorted(by))]


ZOO_BANDS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def zoo_distance(cands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scored candidates of all updates by band of their ratio to the nearest zoo file: how many, how many
    earned J > 0, their mean J and the band's share of all J. The 0.8 line of ``rollout_copies`` is a choice; this
    shows where the J sits on either side of it (a band of 0.6-0.8 rich in J would be zoo harnesses reworked, not
    copied, and a ratio of ~0.36 is what the minimal seed itself has)."""
    scored = [c for c in cands if c["ratio"] is not None]
    total = sum(c["J"] for c in scored)
    out = []
    for lo, hi in zip(ZOO_BANDS, (*ZOO_BANDS[1:], 1.0 + 1e-9), strict=True):
        band = [c["J"] for c in scored if lo <= c["ratio"] < hi]
        out.append({"band": f"{lo:.2f}-{min(hi, 1.0):.2f}", "candidates": len(band),
                    "J_positive": sum(1 for j in band if j > 0), "J_mean": mean(band),
                    "J_share": sum(band) / total if total else None})
    return out


def group_spread(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per GRPO update, how varied each context's candidates are: mean distinct completions and distinct valid
    proposals per group, the group size, and the groups whose candidates all got one reward (no gradient). A
    peaked proposer (an SFT adapter that learned its rows by heart) shows here as few distinct candidates."""
    by: dict[int, list[dict[str, Any]]] = {}
    for r in groups:
        by.setdefault(int(r["step"]) + 1, []).append(r)
    out = []
    for u in sorted(by):
        gs = [g.get("candidates", []) for g in by[u]]
        out.append({"update": u, "groups": len(gs), "size": mean([float(len(g)) for g in gs]),
                    "distinct_completions": mean([float(len({c.get("completion") for c in g})) for g in gs]),
                    "distinct_valid": mean([float(len({c.get("proposal") for c in g if c.get("valid")})) for g in gs]),
                    "one_reward": sum(1 for g in gs if len({c.get("reward") for c in g}) <= 1)})
    return out


def spread_md(spread: list[dict[str, Any]], bands: list[dict[str, Any]]) -> list[str]:
    md: list[str] = []
    if bands and any(b["candidates"] for b in bands):
        md += ["## GRPO candidates by their distance to the zoo (training rollouts, all updates)", "",
               "Each scored valid candidate's difflib ratio to the nearest file of seeds/zoo (1 = a zoo file written "
               "back; the minimal seed itself is at 0.36): where the J sits on either side of the 0.8 "
               "near-copy line.", "", "| ratio | candidates | J > 0 | mean J | share of all J |", "|---|---|---|---|---|"]
        md += [f"| {b['band']} | {b['candidates']} | {b['J_positive']} | {cell(b['J_mean'])} | {cell(b['J_share'], 2)} |"
               for b in bands]
        md.append("")
    if spread:
        md += ["## GRPO groups: how varied the candidates of one context are", "",
               "Per update: mean distinct completions and distinct valid proposals per context (of its group size), "
               "and the contexts whose candidates all got the same reward (they give no gradient).", "",
               "| update | contexts | group size | distinct completions | distinct valid proposals | one reward |",
               "|---|---|---|---|---|---|"]
        md += [f"| {r['update']} | {r['groups']} | {cell(r['size'], 0)} | {cell(r['distinct_completions'], 1)} | "
               f"{cell(r['distinct_valid'], 1)} | {r['one_reward']} |" for r in spread]
        md.append("")
    return md


def family_signal(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per training family, where GRPO's signal comes from: the candidates with J > 0, the mean J, the mean
    within-group spread (population std) of J and of the whole reward, the groups whose candidates all got one J,
    and the share of the reward's within-group variance that J's variance makes (sum over groups; the rest is the
    parse/produce/completion terms and their covariance with J). A family where that share is small trains the
    format, not the harness. Unscored candidates count as J 0, as the reward did."""
    by: dict[str, list[list[dict[str, Any]]]] = {}
    for r in groups:
        by.setdefault(family_of(r), []).append(r.get("candidates", []))

    def var(xs: list[float]) -> float:
        m = sum(xs) / len(xs)
        return sum((x - m) ** 2 for x in xs) / len(xs)
    out = []
    for fam in sorted(by):
        gs = [g for g in by[fam] if g]
        js = [[float(c.get("J") or 0.0) for c in g] for g in gs]
        rs = [[float(c.get("reward") or 0.0) for c in g] for g in gs]
        vj, vr = [var(j) for j in js], [var(r) for r in rs]
        flat = [x for j in js for x in j]
        out.append({"family": fam, "contexts": len(gs), "candidates": len(flat),
                    "J_positive": sum(1 for x in flat if x > 0) / len(flat) if flat else None, "J_mean": mean(flat),
                    "J_std": mean([v ** 0.5 for v in vj]), "reward_std": mean([v ** 0.5 for v in vr]),
                    "one_J": sum(1 for j in js if len(set(j)) <= 1),
                    "J_share_of_variance": sum(vj) / sum(vr) if sum(vr) else None})
    return out


def signal_md(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []

    md = ["## GRPO signal per family: J or the format terms (training rollouts, all updates)", "",
          "Per paper-train family: the share of candidates with J > 0, the mean J, the mean within-group std of J "
          "and of the reward, the groups where all candidates got one J, and J's share of the reward's "
          "within-group variance (the rest comes from the parse/produce/completion terms). Where that share is "
          "small, the group's advantages rank candidates by format, not by how well the harness scores.", "",
          "| family | contexts | candidates | J > 0 | mean J | J std | reward std | groups with one J | "
          "J's share of the variance |", "|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['family']} | {r['contexts']} | {r['candidates']} | {cell(r['J_positive'], 2)} | {cell(r['J_mean'])} | "
           f"{cell(r['J_std'])} | {cell(r['reward_std'])} | {r['one_J']} | {cell(r['J_share_of_variance'], 2)} |" for r in rows]
    return [*md, ""]


def reward_anatomy(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per GRPO update, from the rollout log's groups (runs of session 31 on; older logs lack the fields): the
    evaluated candidates' wall seconds (p50, p90, max), their slowest run, solver calls per candidate, and the
    share of runs that hit their time limit: where the reward phase's time goes."""
    by: dict[int, list[dict[str, Any]]] = {}
    for r in groups:
        by.setdefault(int(r["step"]) + 1, []).extend(c for c in r.get("candidates", []) if c.get("statuses"))
    out = []
    for u in sorted(by):
        cs = by[u]
        if not cs:
            continue
        secs = sorted(float(c["seconds"]) for c in cs)
        runs = sum(sum(c["statuses"].values()) for c in cs)
        out.append({"update": u, "evaluated": len(cs), "p50_s": secs[len(secs) // 2],
                    "p90_s": secs[min(len(secs) - 1, int(0.9 * len(secs)))], "max_s": secs[-1],
                    "slowest_run_s": max(float(c["slowest_run_s"]) for c in cs),
                    "solver_calls": sum(int(c["solver_calls"]) for c in cs) / len(cs),
                    "timeout_share": sum(int(c["statuses"].get("timeout", 0)) for c in cs) / runs if runs else 0.0})
    return out


def anatomy_md(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    md = ["## GRPO reward phase: where its time goes (rollout log)", "",
          "Per update: the evaluated candidates' wall seconds (each is n_score runs in parallel), the slowest single "
          "run, solver calls per candidate, and the share of runs that hit their time limit.", "",
          "| update | evaluated | p50 s | p90 s | max s | slowest run s | solver calls / candidate | timeouts |",
          "|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['update']} | {r['evaluated']} | {r['p50_s']:.1f} | {r['p90_s']:.1f} | {r['max_s']:.1f} | "
           f"{r['slowest_run_s']:.1f} | {r['solver_calls']:.1f} | {r['timeout_share']:.2f} |" for r in rows]
    return [*md, ""]


def copies_md(rows: list[dict[str, Any]], out: Path) -> list[str]:
    """The table and plot of ``rollout_copies``."""
    if not rows:
        return []

    md = ["## GRPO candidates against the zoo (training rollouts)", "",
          "Per update, the valid candidates (revisions of the minimal seed on the paper-train contexts of that "
          "update): how many are near-copies of a zoo harness (difflib ratio >= 0.8 to a file of seeds/zoo), the "
          "mean J of those and of the others, and the share of all J that the near-copies earned. Each update sees "
          "new contexts: a training-signal view, not a held-out one (that is the transfer table's column).", "",
          "| update | valid | near-copies | share | J near-copies | J others | share of J from copies |",
          "|---|---|---|---|---|---|---|"]
    md += [f"| {r['update']} | {r['valid']} | {r['near_copies']} | {cell(r['near_copy_share'], 2)} | {cell(r['J_near'])} | "
           f"{cell(r['J_other'])} | {cell(r['J_from_copies'], 2)} |" for r in rows]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    xs = [r["update"] for r in rows]
    ax.plot(xs, [r["near_copy_share"] for r in rows], "-o", label="share of valid candidates that copy the zoo")
    ax.plot(xs, [r["J_near"] for r in rows], "--s", label="mean J, near-copies")
    ax.plot(xs, [r["J_other"] for r in rows], "--^", label="mean J, the others")
    ax.set_xlabel("update")
    png = save(fig, ax, out, "grpo_zoo_copies.png", "GRPO candidates: zoo near-copies (small-model result)")
    return [*md, "", f"![{png}]({png})", ""]


def plots(tr: dict[str, Any], grpo: dict[str, Any] | None, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    rows = tr["rows"]
    fams = sorted({f for r in rows.values() for f in r["per_family"]})
    if fams:
        arms = [a for a in ARMS if a in rows]
        fig, ax = plt.subplots(figsize=(max(8, len(fams) * 0.7), 4))
        w = 0.8 / len(arms)
        for i, a in enumerate(arms):
            ys = [rows[a]["per_family"].get(f) for f in fams]
            ax.bar([x + i * w for x in range(len(fams))], [y if y is not None else 0 for y in ys], w, label=a)
        ax.set_xticks([x + 0.4 - w / 2 for x in range(len(fams))], fams, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("test J")
        made.append(save(fig, ax, out, "per_family.png",
                         "Qwen2.5-Coder-1.5B solver: test J per paper-eval family (small-model result)"))
    parts = (grpo or {}).get("reward_parts") or []
    if parts:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        xs = list(range(len(parts)))
        for k in ("reward", "J", "parse_rate", "produce_rate", "completion_rate"):
            ax.plot(xs, [p.get(k) for p in parts], marker="o", label=k)
        ax.set_xlabel("generation batch (update)")
        made.append(save(fig, ax, out, "reward_curve.png", "GRPO reward components (batch means)"))
    return made


def grpo_runs(specs: list[str], ret: Path) -> dict[str, list[dict[str, Any]]]:
    """``LABEL=DIR`` (a ret folder or a GRPO state folder) -> its per-update records (updates.jsonl);
    the ret folder's own GRPO state, when it has one, is the run labelled ``rl``."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for label, folder in [("rl", str(ret)), *(x.split("=", 1) for x in specs)]:
        d = Path(folder)
        for f in (d / "grpo" / "state" / "updates.jsonl", d / "updates.jsonl"):
            if f.is_file():
                runs[label] = read_jsonl(f)
                break
    return runs


def grpo_table(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One row per update of each run: reward parts, TRL's figures, seconds per phase, memory."""
    md = ["| run | update | reward | J | parse | produce | completion | frac zero std | clipped | mean length | "
          "adapter norm | gen s | reward s | update s | GB (process peak / GPU) |", "|" + "---|" * 15]
    for label, recs in runs.items():
        for r in recs:
            p, t, sec = r.get("reward_parts") or {}, r.get("trl") or {}, r.get("seconds") or {}
            md.append(f"| {label} | {r['update']} | {cell(p.get('reward'))} | {cell(p.get('J'))} | "
                      f"{cell(p.get('parse_rate'), 2)} | "
                      f"{cell(p.get('produce_rate'), 2)} | {cell(p.get('completion_rate'), 2)} | "
                      f"{cell(t.get('frac_reward_zero_std'), 2)} | {cell(t.get('completions/clipped_ratio'), 2)} | "
                      f"{cell(t.get('completions/mean_length'), 0)} | {cell(r.get('adapter_norm'), 4)} | "
                      f"{cell(sec.get('generation'), 1)} | {cell(sec.get('reward'), 1)} | "
                      f"{cell(sec.get('update'), 1)} | "
                      f"{r.get('peak_gb_this_process', '')} / {r.get('gpu_used_gb', '')} |")
    return md


def groups_table(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One row per update that recorded its groups (``rollouts.group_stats``): the collapse figures."""
    md = ["| run | update | entropy | distinct texts | copy share | most copied (share) | solver code | beats parent | "
          "parents' J (mean) | alarm |", "|" + "---|" * 10]
    for label, recs in runs.items():
        for r in recs:
            g = r.get("groups")
            if not g:
                continue
            top = f"{g['top_source']} ({cell(g.get('top_source_share'), 2)})" if g.get("top_source") else ""
            md.append(f"| {label} | {r['update']} | {cell(r.get('entropy'), 3)} | {cell(g.get('distinct_texts'), 2)} | "
                      f"{cell(g.get('copy_share'), 2)} | {top} | {cell(g.get('solver_code_share'), 2)} | "
                      f"{cell(g.get('beats_parent_share'), 2)} | {cell(g.get('parents_J_mean'))} | "
                      f"{'; '.join(r.get('collapse_alarm') or [])} |")
    return md


def grpo_plot(runs: dict[str, list[dict[str, Any]]], out: Path, name: str, title: str) -> str | None:
    """Reward and J per update (left), the adapter's norm (right), one line per run."""
    if not any(runs.values()):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for label, recs in runs.items():
        xs = [r["update"] for r in recs]
        for key, style in (("reward", "-o"), ("J", "--s")):
            ax.plot(xs, [(r.get("reward_parts") or {}).get(key) for r in recs], style, label=f"{label} {key}")
        ax2.plot(xs, [r.get("adapter_norm") for r in recs], "-o", label=label)
    ax.set_xlabel("update")
    ax2.set_xlabel("update")
    ax2.set_ylabel("norm of the LoRA B matrices")
    ax2.set_yscale("log")
    ax2.legend(fontsize=8)
    return save(fig, ax, out, name, title)


def _slant(ax: Any) -> None:
    """Small x labels turned 30 degrees, right-aligned under their bars (one per family and half)."""
    ax.tick_params(axis="x", labelsize=7, labelrotation=30)
    for t in ax.get_xticklabels():
        t.set_horizontalalignment("right")


def save(fig: Any, ax: Any, out: Path, name: str, title: str) -> str:
    """Title, legend, layout; write ``out/name`` and close the figure."""
    import matplotlib.pyplot as plt

    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def _load(ret: Path, name: str) -> Any:
    return json.loads((ret / name).read_text()) if (ret / name).is_file() else None


def sft_sections(sd: dict[str, Any] | None, sft: dict[str, Any] | None) -> list[str]:
    md: list[str] = []
    if sd:
        own = sd.get("source") == "self"
        md += ["## SFT data (" + ("the proposer's own revisions of a pool of parents (expert iteration)" if own else
                                  "zoo revisions + best-of-N self samples") + ", paper-train families)", "",
               f"- contexts: {sd['contexts']}, kept: **{sd['kept']}**, interpreter-loop share: "
               f"**{sd['interpreter_loop_share']:.0%}** (paper: 432 kept, 48 %)",
               f"- kinds: {sd['kinds']}", f"- per family: {sd['per_family']}", f"- per source: {sd['per_source']}"]
        if "distinct_completions" in sd:  # the figures of issue 62's generator
            y = sd.get("yield_per_context") or {}
            md += [f"- margin over the parent: {sd.get('margin')}; parents: {sd.get('parents')}; per parent: "
                   f"{sd.get('per_parent')}; held-out loop: {sd.get('hold_out_loop')}",
                   f"- yield per context: mean {y.get('mean')}, contexts with a row {y.get('with_rows')}, histogram "
                   f"{y.get('histogram')}; per self proposal: {sd.get('self_yield')}",
                   f"- distinct completions {sd['distinct_completions']}, distinct harnesses "
                   f"{sd.get('distinct_harnesses')}, mean gain over the parent {sd.get('mean_gain')}, copies of a "
                   f"known source {sd.get('copies')}, solver-code share {sd.get('solver_code_share')}"]
        md += [f"- candidate outcomes: {sd['counts']}", f"- score split n = {sd['n_score']}, {sd['seconds']} s", ""]
    if sft:
        md += ["## SFT", "", f"- examples {sft.get('examples')}, steps {sft.get('steps')}, "
               f"train loss {sft.get('train_loss')}, {sft.get('seconds')} s", ""]
    return md


def grpo_sections(runs: dict[str, list[dict[str, Any]]], grpo: dict[str, Any] | None, out: Path) -> list[str]:
    md: list[str] = []
    if runs:
        png = grpo_plot(runs, out, "grpo_updates.png", "GRPO per update (small-model result)")
        md += ["## GRPO per update (from the resumable state's updates.jsonl)", "",
               "Reward = J + 0.05 parsed + 0.10 produced + 0.15 completion rate, batch means; 'frac zero std': "
               "share of contexts whose candidates all got the same reward; 'clipped': completions cut at the "
               "length limit; seconds per phase; GB: peak allocated by the training process (its colocated "
               "vLLM included) / used on the whole GPU (the solver's server included).", "",
               *grpo_table(runs), ""] + ([f"![{png}]({png})", ""] if png else [])
        if any(r.get("groups") for recs in runs.values() for r in recs):
            md += ["### The groups per update (mode collapse)", "",
                   "Entropy: TRL's, of the sampled tokens; distinct: distinct proposal texts per group (mean); copy: "
                   "share of the valid candidates that copy a known source (`sources.match`), and the one most "
                   "copied; solver code: share running solver-written code with model.python; beats parent: share "
                   "of the groups whose best J beats the parent's J; alarm: `rollouts.collapse_alarm`.", "",
                   *groups_table(runs), ""]
    if grpo:
        md += [f"## GRPO (this stretch's start: {grpo.get('start', '?')}; reward J + 0.05 parsed + 0.10 produced "
               "+ 0.15 completion)", "",
               f"- status {grpo.get('status')}, steps {grpo.get('steps')}, {grpo.get('seconds')} s, lr "
               f"{grpo.get('learning_rate')}, {grpo.get('contexts_per_update')} contexts x "
               f"{grpo.get('num_generations')} candidates per update, n_score {grpo.get('n_score')}", "",
               "| batch | reward | J | parse | produce | completion | none |", "|---|---|---|---|---|---|---|"]
        for i, r in enumerate(grpo.get("reward_parts") or []):
            md.append(f"| {i} | {r.get('reward', 0):.3f} | {r.get('J', 0):.3f} | {r.get('parse_rate', 0):.2f} | "
                      f"{r.get('produce_rate', 0):.2f} | {r.get('completion_rate', 0):.2f} | {r.get('none_rate', 0):.2f} |")
        if grpo.get("error"):
            md += ["", "```", grpo["error"][-1500:], "```"]
        md.append("")
    return md


def musique_sections(rows: list[dict[str, Any]]) -> list[str]:
    """Per proposer arm: R sequential rounds against the best of R independent proposals (same proposer calls)
    and their oracle, EM and F1 on the test split with 95 % intervals, and the paired gains over the seed."""
    if not rows:
        return []
    r0 = rows[0]
    md = [f"## MuSiQue: {r0['rounds']} sequential rounds against the best of {r0['rounds']} independent proposals",
          "", f"Test split {r0['n_test']} questions (score split {r0['n_score']}); mean [95 % bootstrap interval over "
          "questions]; the oracle is picked on the test split (an upper bound, not a method); gains are paired over "
          "the same questions. Small-model result.", "",
          "| proposer | seed EM | sequential EM | independent EM | oracle EM | seed F1 | sequential F1 | independent F1 "
          "| oracle F1 | sequential gain F1 | valid (seq / ind) | best zoo F1 | sequential minus best zoo F1 | "
          "sequential pick: nearest zoo (ratio) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sc, ic = r["sequential_calls"], r["independent_calls"]
        near = (r.get("nearest_zoo") or {}).get("sequential")
        zoo = (f"{fmt(r['zoo'].get('f1'))} ({r['zoo_pick']['name']})" if r.get("zoo") and r.get("zoo_pick")
               else "n/a")
        md.append(f"| {r['arm']} | " + " | ".join(fmt(r.get(k, {}).get("em")) for k in PICKS) + " | "
                  + " | ".join(fmt(r.get(k, {}).get("f1")) for k in PICKS)
                  + f" | {fmt(r.get('sequential_gain', {}).get('f1'))} | {sc['valid']}/{sc['proposals']} / "
                  f"{ic['valid']}/{ic['proposals']} | {zoo} | {fmt(r.get('sequential_minus_zoo', {}).get('f1'))} | "
                  + (f"{near['name']} ({near['ratio']:.2f})" if near else "n/a") + " |")
    return [*md, "", "The best zoo harness is picked on the score split, as in the transfer table; a sequential pick "
            "at ratio >= 0.8 to a zoo file is a near-copy of what the proposer was shown.", ""]


def failed_sections(status: dict[str, Any]) -> list[str]:
    md: list[str] = []
    for stage, info in status.items():
        if isinstance(info, dict) and info.get("state") == "failed":
            md += [f"## Stage `{stage}` failed ({info.get('seconds')} s)", "", "```",
                   str(info.get("error", ""))[-1200:].strip(), "```", ""]
    return md


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ret", required=True, help="the unpacked results.tgz (WORK/ret)")
    p.add_argument("--out", required=True)
    p.add_argument("--notes", default=None)
    p.add_argument("--grpo-run", action="append", default=[], metavar="LABEL=DIR",
                   help="more GRPO runs for the update table and curve (a ret folder or a GRPO state folder)")
    a = p.parse_args(argv)
    ret, out = Path(a.ret), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    all_rows = read_jsonl(ret / "eval_rows.jsonl")
    # the transfer table: one revision of the minimal seed on the table's splits (the rules arm and the revisions of
    # the zoo pick have their own sections: revision.py)
    rows = [r for r in revision.select(all_rows) if r["arm"] != "rules"]
    grpo = _load(ret, "grpo.json")
    tr = transfer(rows)
    ship = ship_verdict(tr)
    if rows:
        (out / "transfer.json").write_text(json.dumps({**tr, "ship": ship}, indent=1))
    made = plots(tr, grpo, out)
    md = ["# Issue 12: Qwen2.5-Coder-1.5B-Instruct solver and proposer on one GPU (H200 or H100: each stretch's notes say which; small-model result)", ""]
    if a.notes and Path(a.notes).is_file():
        md += [Path(a.notes).read_text().strip(), ""]
    md += sft_sections(_load(ret, "sftdata.json"), _load(ret, "sft.json"))
    md += grpo_sections(grpo_runs(a.grpo_run, ret), grpo, out)
    groups = read_jsonl(ret / "rollouts.jsonl.gz")  # read once, for both views
    n = sum(len(g.get("candidates", [])) for g in groups)
    print(f"comparing the valid ones of {n} GRPO candidates ({len(groups)} groups) with the zoo files (difflib: "
          "~3 min for 76 updates on 2 cores)", file=sys.stderr, flush=True)
    t = time.monotonic()
    cands = scored_candidates(groups)
    print(f"  {len(cands)} valid candidates in {time.monotonic() - t:.0f} s", file=sys.stderr, flush=True)
    md += copies_md(rollout_copies(cands), out)
    md += family_md(family_copies(cands), out)
    n_score = int((_load(ret, "settings.json") or {}).get("grpo.splits.n_score") or 0)
    md += duels_md(group_duels(cands, n_score), n_score, out)
    md += parent_md(parent_duels(groups, n_score), n_score)
    md += signal_md(family_signal(groups))
    md += spread_md(group_spread(groups), zoo_distance(cands))
    md += anatomy_md(reward_anatomy(groups))
    md += musique_sections(read_jsonl(ret / "musique_rows.jsonl"))
    md += failed_sections(_load(ret, "status.json") or {})
    md += revision.report(all_rows, "small-model result")[0]
    md += [*verdict_md(ship), *transfer_md(tr)] if rows else [
        "No transfer table yet: the eval stage has not run on these files.", ""]
    md += [f"![{m}]({m})" for m in made]
    (out / "results.md").write_text("\n".join(md) + "\n")
    print(f"wrote {out / 'results.md'}")


def ship_verdict(tr: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 30's item 6 for each trained arm (SFT, RL), two verdicts: ``ship``, the issue's rule (the arm beats the
    untrained proposer: the families-resampled interval of the difference lies above 0), and ``beyond_zoo``, the
    claim the project cares about (it also beats the best zoo harness the same way). An adapter that only writes
    zoo files back can ship by the first and fail the second; its README then says so (session 40 shipped the RL
    adapter that way: ``harnesslearn.adapters``)."""
    def above(ci: dict[str, float] | None) -> bool:
        return ci is not None and not math.isnan(ci.get("lo", math.nan)) and ci["lo"] > 0

    out = []
    for arm in ("sft", "rl"):
        r = tr["rows"].get(arm)
        if r is None:
            continue
        base, zoo_ = r.get("minus_base_families_resampled"), r.get("minus_zoo_families_resampled")
        bz = r.get("beyond_zoo") or {}
        out.append({"arm": arm, "label": r["label"], "minus_base": base, "beats_base": above(base),
                    "minus_zoo": zoo_, "beats_zoo": above(zoo_), "near_copy_share": bz.get("near_copy_share"),
                    "ship": above(base), "beyond_zoo": above(base) and above(zoo_)})
    return out


def verdict_md(verdicts: list[dict[str, Any]]) -> list[str]:
    """The ship decision as a table, with the rule it applies."""
    if not verdicts:
        return []
    md = ["## Ship the adapter? (issue 30, item 6)", "",
          "An adapter ships with the package when its row beats the untrained proposer with the families-resampled "
          "95 % interval of the paired difference above 0 (the issue's rule). It **goes beyond the zoo** only when "
          "its row also beats the best zoo harness the same way: a proposer that writes zoo files back can ship "
          "and still give nothing that `zoo:NAME` does not, and its README must say so.", "",
          "| row | minus untrained [families] | above 0 | minus best zoo [families] | above 0 | "
          "winners that are zoo near-copies | ships | beyond the zoo |", "|---|---|---|---|---|---|---|---|"]
    for v in verdicts:
        share = "" if v["near_copy_share"] is None else f"{v['near_copy_share']:.0%}"
        md.append(f"| {v['label']} | {fmt(v['minus_base'])} | {'yes' if v['beats_base'] else 'no'} | "
                  f"{fmt(v['minus_zoo'])} | {'yes' if v['beats_zoo'] else 'no'} | {share} | "
                  f"**{'yes' if v['ship'] else 'no'}** | **{'yes' if v['beyond_zoo'] else 'no'}** |")
    return [*md, ""]


def kinds(k: dict[str, int] | None) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted((k or {}).items(), key=lambda x: -x[1]))


def validity_cell(v: dict[str, Any]) -> str:
    if not v:
        return ""
    return f"{v['valid']} ({'n/a' if v['distinct'] is None else v['distinct']}) / {v['proposals']}"


def zoo_cell(r: dict[str, Any]) -> str:
    if "minus_zoo_families_resampled" not in r:
        return "n/a"
    return f"{fmt(r['minus_zoo_families_resampled'])} ({r['above_zoo_families']})"


def transfer_md(tr: dict[str, Any]) -> list[str]:
    """The transfer table and the per-family table."""
    md = ["## Transfer table (21 paper-eval families, one revision of the minimal seed)", "",
           "Intervals: 95 % bootstrap; 'problems' resamples the test problems inside each family, 'families' "
           "resamples the families too (the honest one for a claim about unseen families). Differences are "
           "paired by family and problem.", "",
           "| row | families | mean test J [95 % CI, problems] | [95 % CI, families too] | minus seed [problems] | "
           "minus seed [families] | minus base [problems] | minus base [families] | minus best zoo [families] "
           "(families above it) | valid (distinct) / proposals | "
           "picked a revision | of them near-copies of a zoo harness | test J (gain) of the others | "
           "kinds of the picks |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in tr["rows"].values():
        v, bz = r.get("validity") or {}, r.get("beyond_zoo") or {}
        others = "" if bz.get("others_test_J") is None else f"{bz['others_test_J']:.3f} ({bz['others_gain']:+.3f})"
        md.append(f"| {r['label']} | {r['families']} | {fmt(r['test_J'])} | {fmt(r['test_J_families_resampled'])} | "
                  f"{fmt(r.get('minus_seed'))} | {fmt(r.get('minus_seed_families_resampled'))} | "
                  f"{fmt(r.get('minus_base'))} | {fmt(r.get('minus_base_families_resampled'))} | {zoo_cell(r)} | "
                  f"{validity_cell(v)} | {v.get('improved', '')} | "
                  f"{bz.get('near_zoo_copies', '')} | {others} | {kinds(bz.get('kinds'))} |")
    md += ["", "Paper (4B solver): base 0.32, SFT 0.42, RL 0.62, 35B teacher 0.56.", ""]
    fams = sorted({f for r in tr["rows"].values() for f in r["per_family"]})
    if fams:
        arms = list(tr["rows"])
        md += ["### Per family (test J)", "", "| family | " + " | ".join(arms) + " |",
               "|---|" + "---|" * len(arms)]
        for f in fams:
            cells = []
            for a_ in arms:
                x = tr["rows"][a_]["per_family"].get(f)
                cells.append("" if x is None else f"{x:.2f}")
            md.append(f"| {f} | " + " | ".join(cells) + " |")
    return [*md, ""]


if __name__ == "__main__":
    main()
