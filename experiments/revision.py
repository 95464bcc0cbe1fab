"""Does a proposer revise, or paste? Measures on the transfer experiment's eval rows (``ret/eval_rows.jsonl``),
read by ``qwen12_report.py`` and runnable alone:

    python3 experiments/revision.py --ret experiments/results/qwen/state --out experiments/results/qwen/revision

- **Provenance**: every valid proposal's nearest *known source* (``harnesslearn.sources``: the zoo files and every
  program the prompts and the runtime API show) and its difflib ratio; a copy is a ratio >= ``sources.COPY``.
  Rows from before the eval stage recorded it (stretch 11) carry only the proposals' texts: each is applied again
  to the parent here (``edits.apply_proposal``); a text cut at 3,000 characters no longer applies and counts as
  ``unknown``.
- **Distinct texts** among an arm's valid proposals and among its winners (the picks that replaced the parent).
- **Fixed rules**: for a known source S, the rule "submit S; keep it if its score-split J beats the parent's" on
  the same problems. Its test scores per family are S's where S's score J is strictly higher than the parent's,
  else the parent's. S's score and test J come from the ``rules`` arm (every known source evaluated on both splits);
  without it, from what the other rows evaluated (the zoo arm scores every zoo file on the score split, and each
  pick on test): a rule whose needed test scores no row holds is incomplete for that family and left out.
  The best fixed rule is the one with the highest mean test J over the table's families: picking it looks at the
  test split, so it is an upper bound on any single rule (labelled so). Each arm minus the best fixed rule, paired
  by family and problem, families resampled.
- **Failure taxonomy** of the picked harnesses' test runs (rows since the eval stage records it), per arm.
- **Rounds**: with sequential rounds (``round_trace``), the share of the final test-J gain that round 1 brings.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import exp_stats as st

from harnesslearn.transfer.stages import read_jsonl  # the stages' own reader of their row files

FIXED = ("zoo", "rules")


def mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def select(rows: list[dict[str, Any]], parent: str = "seed", rounds: int = 1,
           family_set: str = "paper-eval", prompt_dir: str | None = None) -> list[dict[str, Any]]:
    """The rows of one table: the proposer arms that revised ``parent`` for ``rounds`` rounds on the families of
    ``family_set`` with the prompts of ``prompt_dir`` (None: the packaged ones), and the fixed arms' rows on the
    same splits and problem seed."""
    from harnesslearn.tasks.families import family_set as families

    fams = set(families(family_set))

    def mine(r: dict[str, Any]) -> bool:
        return r["arm"] not in FIXED and (r.get("parent", "seed"), r.get("rounds", 1), r.get("prompt_dir")) == (
            parent, rounds, prompt_dir)

    splits = {(r.get("n_score"), r.get("eval_seed")) for r in rows if mine(r) and r["family"] in fams}
    return [r for r in rows if r["family"] in fams and (r.get("n_score"), r.get("eval_seed")) in splits
            and (r["arm"] in FIXED or mine(r))]


def parent_source(row: dict[str, Any]) -> str:
    """The source of the harness a proposer row revised."""
    from harnesslearn.harness import load_harness
    from harnesslearn.sources import known_sources

    name = row.get("parent_name", "minimal")
    if name == "minimal":
        return load_harness("minimal").source
    return next(k.source for k in known_sources() if k.name == name)


def candidates(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A proposer row's proposals as ``{valid, harness_id, nearest, ratio, copy, score_J}`` (``valid`` None: the text
    was cut and no longer applies, so it is unknown). Rows with ``candidates`` carry them; older rows are rebuilt
    from their texts."""
    from harnesslearn import sources
    from harnesslearn.propose.edits import apply_proposal

    if "candidates" in row:
        return list(row["candidates"])
    parent = parent_source(row)
    scores = list((row.get("candidate_score_J") or {}).values())
    out = []
    for text in row.get("proposal_texts", []):
        res = apply_proposal(parent, text)
        if res.valid and res.source is not None:
            out.append({"valid": True, "harness_id": res.harness_id, **sources.provenance(res.source)})
        else:
            cut = len(text) >= 3000 and res.reason is not None and str(res.reason) != "no_change"
            out.append({"valid": None if cut else False, "reason": str(res.reason)})
    valid = [c for c in out if c["valid"]]
    if len(valid) == len(scores):  # the row kept the valid ones' score J in proposal order
        for c, j in zip(valid, scores, strict=True):
            c["score_J"] = j
    return out


def winner_provenance(row: dict[str, Any]) -> dict[str, Any] | None:
    from harnesslearn import sources

    if not row.get("improved") or not row.get("picked_source"):
        return None
    return row.get("picked_provenance") or sources.provenance(row["picked_source"])


def provenance(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per proposer arm: proposals, valid, unknown (cut texts), copies of a known source among the valid ones and
    of which source, distinct valid texts (per family, summed), winners, distinct winning texts, copies among
    the winners."""
    from harnesslearn.harness import harness_id

    out: dict[str, dict[str, Any]] = {}
    for arm in dict.fromkeys(r["arm"] for r in rows if r["arm"] not in FIXED):
        ar = [r for r in rows if r["arm"] == arm]
        cs = [(r["family"], c) for r in ar for c in candidates(r)]
        valid = [c for _, c in cs if c["valid"]]
        copies = Counter(c["nearest"] for c in valid if c["copy"])
        wins = [(r, winner_provenance(r)) for r in ar]
        wins = [(r, w) for r, w in wins if w is not None]
        out[arm] = {"families": len(ar), "proposals": len(cs), "valid": len(valid),
                    "unknown": sum(c["valid"] is None for _, c in cs),
                    "no_change": sum(c.get("reason") == "no_change" for _, c in cs),
                    "invalid": sum(c["valid"] is False for _, c in cs),
                    "copies": sum(copies.values()), "copies_by_source": dict(copies.most_common()),
                    "distinct_valid": len({(f, c["harness_id"]) for f, c in cs if c["valid"]}),
                    "distinct_valid_texts": len({c["harness_id"] for _, c in cs if c["valid"]}),
                    "winners": len(wins), "distinct_winners": len({harness_id(r["picked_source"]) for r, _ in wins}),
                    "winner_copies": sum(w["copy"] for _, w in wins),
                    "winners_by_source": dict(Counter(w["nearest"] for _, w in wins if w["copy"]).most_common())}
    return out


def source_scores(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """family -> known source name -> ``{score_J, test_scores}`` as far as the rows hold them: the rules arm's, else
    the zoo arm's score J of each zoo file and the test scores of any harness a row picked (by harness id)."""
    from harnesslearn import sources, zoo
    from harnesslearn.harness import harness_id
    from harnesslearn.tasks import load_task

    out: dict[str, dict[str, dict[str, Any]]] = {}
    tested: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r.get("improved") and r.get("picked_source"):
            tested[(r["family"], harness_id(r["picked_source"]))] = r["after_scores"]
    for r in rows:
        fam = r["family"]
        if r["arm"] == "rules":
            for name, v in r["sources"].items():
                out.setdefault(fam, {})[name] = {"score_J": v["score_J"], "test_scores": v["test_scores"]}
        elif r["arm"] == "zoo":
            task = load_task(f"rg:{fam}")
            for name, j in (r.get("candidate_score_J") or {}).items():
                hid = zoo.build(name, task, r["eval_seed"]).id
                out.setdefault(fam, {}).setdefault(f"zoo:{name}", {"score_J": j, "test_scores": tested.get((fam, hid))})
            for k in sources.known_sources():
                if k.origin != "zoo" and not k.qa:
                    hid = harness_id(k.source)
                    if (fam, hid) in tested:
                        out[fam].setdefault(k.name, {"score_J": None, "test_scores": tested[(fam, hid)]})
    return out


def fixed_rules(rows: list[dict[str, Any]], parent: str = "seed") -> dict[str, Any]:
    """Each known source's fixed rule against the parent (``seed``: the minimal seed; ``zoo``: the zoo pick), per
    family: its test scores, or None where the rows do not hold what it needs. ``rules``: source -> family ->
    scores (complete families only); ``complete``: source -> families it could be computed on."""
    by_fam = source_scores(rows)
    base: dict[str, tuple[float | None, list[float]]] = {}  # family -> the parent's score J and test scores
    for r in rows:
        if parent == "seed":
            base.setdefault(r["family"], (r["seed_score_J"], r["seed_scores"]))
        elif r["arm"] not in FIXED and r.get("parent") == parent:
            base.setdefault(r["family"], (r["parent_score_J"], r["parent_scores"]))
    names = sorted({n for v in by_fam.values() for n in v})
    rules: dict[str, dict[str, list[float]]] = {}
    for name in names:
        per: dict[str, list[float]] = {}
        for fam, (pj, ps) in base.items():
            v = by_fam.get(fam, {}).get(name)
            if v is None or v["score_J"] is None or pj is None:
                continue
            if v["score_J"] > pj:
                if v["test_scores"] is None:
                    continue
                per[fam] = v["test_scores"]
            else:
                per[fam] = ps
        rules[name] = per
    families = sorted(base)
    complete = {n: sorted(p) for n, p in rules.items()}
    # ranked among the complete rules; where none is complete (records without the rules arm), among those that
    # cover the most families, compared on those families only (the tables say how many)
    most = max((len(p) for p in rules.values()), default=0)
    full = {n: p for n, p in rules.items() if most and len(p) == most}
    best = max(full, key=lambda n: mean([mean(s) or 0.0 for s in full[n].values()]) or 0.0) if full else None
    return {"parent": parent, "families": families, "rules": rules, "complete": complete, "best": best,
            "parent_scores": {f: s for f, (_, s) in base.items()}}


def arm_scores(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """arm -> family -> the pick's test scores."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if r["arm"] != "rules":
            out.setdefault(r["arm"], {})[r["family"]] = r["after_scores"]
    return out


def versus_rule(rows: list[dict[str, Any]], fr: dict[str, Any]) -> dict[str, Any]:
    """Each arm's mean test J and its paired difference from the best fixed rule (families resampled)."""
    best = fr["best"]
    if best is None:
        return {}
    rule = fr["rules"][best]
    out = {}
    for arm, per in arm_scores(rows).items():
        common = [f for f in per if f in rule]
        out[arm] = {"families": len(common),
                    "test_J": st.bootstrap_family_mean({f: per[f] for f in common}),
                    "minus_best_rule": st.bootstrap_family_mean_diff({f: rule[f] for f in common},
                                                                      {f: per[f] for f in common},
                                                                      resample_families=True),
                    "same_as_rule_families": sum(abs((mean(per[f]) or 0) - (mean(rule[f]) or 0)) < 1e-9
                                                 for f in common)}
    return out


def taxonomy(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """arm -> failure kind -> count over the picked harnesses' test runs (rows that recorded it)."""
    out: dict[str, Counter[str]] = {}
    for r in rows:
        if "taxonomy" in r:
            out.setdefault(r["arm"], Counter()).update(r["taxonomy"])
    return {a: dict(c) for a, c in out.items()}


def round_one_share(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm, over families whose final pick beats the parent on test: the share of the final test-J gain that
    round 1's pick already had (rows with ``round_trace``)."""
    out: dict[str, Any] = {}
    for arm in dict.fromkeys(r["arm"] for r in rows if r.get("round_trace")):
        shares = []
        for r in rows:
            if r["arm"] != arm or not r.get("round_trace"):
                continue
            base = r["parent_test_J"]
            final = r["round_trace"][-1]["test_J"] - base
            if final > 0:
                shares.append((r["round_trace"][0]["test_J"] - base) / final)
        out[arm] = {"families_gaining": len(shares), "round1_share": mean(shares)}
    return out


def fmt(ci: dict[str, float] | None) -> str:
    if not ci or ci.get("mean") is None or ci["mean"] != ci["mean"]:
        return "n/a"
    return f"{ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}]"


def rules_md(fr: dict[str, Any], vs: dict[str, Any], prov: dict[str, Any], label: str) -> list[str]:
    n = len(fr["families"])
    md = [f"### Fixed rules against the {'minimal seed' if fr['parent'] == 'seed' else 'zoo pick'} ({label})", "",
          "A fixed rule: submit the known source S; keep it if its score-split J beats the parent's. Its test J per "
          "family is S's where it is kept, else the parent's. 'families' is how many of the "
          f"{n} families the records hold what the rule needs; only complete rules are ranked.", "",
          "| rule (known source) | families | mean test J |", "|---|---|---|"]
    for name, per in sorted(fr["rules"].items(), key=lambda x: -(mean([mean(s) or 0 for s in x[1].values()]) or 0)):
        j = mean([mean(s) or 0.0 for s in per.values()])
        md.append(f"| {name}{' (best)' if name == fr['best'] else ''} | {len(per)} of {n} | "
                  f"{'' if j is None else f'{j:.3f}'} |")
    md += ["", f"The best fixed rule: **{fr['best']}** (picked on the table's test J: an upper bound on a single "
           f"rule), on {len(fr['rules'].get(fr['best']) or {})} of {n} families.", "", "| arm | families | mean test J | minus the best fixed rule [families resampled] | "
           "families equal to the rule | valid / proposals | copies of a known source (of valid) | distinct valid "
           "texts | winners (distinct) | winners that are copies |", "|---|---|---|---|---|---|---|---|---|---|"]
    for arm in dict.fromkeys([*vs, *prov]):
        v = vs.get(arm) or {"families": "", "test_J": None, "minus_best_rule": None, "same_as_rule_families": ""}
        p = prov.get(arm, {})
        j = v["test_J"]["mean"] if v["test_J"] else None
        copies = ", ".join(f"{k} {c}" for k, c in p.get("copies_by_source", {}).items())
        md.append(f"| {arm} | {v['families']} | {'' if j is None else f'{j:.3f}'} | {fmt(v['minus_best_rule'])} | "
                  f"{v['same_as_rule_families']} | "
                  + (f"{p['valid']} / {p['proposals']}{' (' + str(p['unknown']) + ' cut)' if p['unknown'] else ''} | "
                     f"{p['copies']} ({copies}) | {p['distinct_valid']} | {p['winners']} ({p['distinct_winners']}) | "
                     f"{p['winner_copies']} |" if p else " | | | | |"))
    return [*md, ""]


def taxonomy_md(tax: dict[str, dict[str, int]]) -> list[str]:
    if not tax:
        return []
    kinds = ["reasoning", "extraction", "communication", "timeout_or_budget", "harness_error"]
    md = ["### Failure taxonomy of the picked harnesses' test runs", "",
          "| arm | " + " | ".join(kinds) + " | failed runs |", "|---|" + "---|" * (len(kinds) + 1)]
    for arm, c in tax.items():
        md.append(f"| {arm} | " + " | ".join(str(c.get(k, 0)) for k in kinds) + f" | {sum(c.values())} |")
    return [*md, ""]


def taxonomy_plot(tax: dict[str, dict[str, int]], out: Path, title: str) -> str | None:
    if not tax:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = ["reasoning", "extraction", "communication", "timeout_or_budget", "harness_error"]
    arms = list(tax)
    fig, ax = plt.subplots(figsize=(7, 4))
    bottom = [0] * len(arms)
    for k in kinds:
        vals = [tax[a].get(k, 0) for a in arms]
        ax.bar(arms, vals, bottom=bottom, label=k)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("failed test runs")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "taxonomy.png", dpi=110)
    plt.close(fig)
    return "taxonomy.png"


def report(rows: list[dict[str, Any]], label: str) -> tuple[list[str], dict[str, Any]]:
    """The sections for every table the rows hold (seed parent, one round; zoo parent, R rounds)."""
    md: list[str] = []
    data: dict[str, Any] = {}
    tables = sorted({(r.get("parent", "seed"), r.get("rounds", 1), r.get("prompt_dir") or "") for r in rows
                     if r["arm"] not in FIXED})
    for (parent, rounds, prompts), fset in ((t, f) for t in tables for f in ("paper-eval", "paper-excluded")):
        sel = select(rows, parent, rounds, fset, prompts or None)
        if not any(r["arm"] not in FIXED for r in sel):
            continue
        fr, prov = fixed_rules(sel, parent), provenance(sel)
        vs = versus_rule([r for r in sel if r["arm"] not in FIXED or parent == "seed"], fr)
        key = f"{parent}-r{rounds}-{fset}" + (f"-{prompts}" if prompts else "")
        data[key] = {"fixed_rules": {k: v for k, v in fr.items() if k != "rules"},
                     "rule_test_J": {n: mean([mean(s) or 0.0 for s in p.values()]) for n, p in fr["rules"].items()},
                     "versus_best_rule": vs, "provenance": prov, "taxonomy": taxonomy(sel),
                     "round_one_share": round_one_share(sel)}
        md += rules_md(fr, vs, prov, f"{label}; {fset} families, parent {parent}, {rounds} round(s)"
                       + (f", prompts {prompts}" if prompts else ""))
        md += taxonomy_md(data[key]["taxonomy"])
    return md, data


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ret", required=True, help="a folder with eval_rows.jsonl")
    p.add_argument("--out", required=True)
    p.add_argument("--label", default="small-model result: Qwen2.5-Coder-1.5B solver and proposer")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = read_jsonl(Path(a.ret) / "eval_rows.jsonl")
    if not rows:
        sys.exit(f"revision.py: no eval_rows.jsonl in {a.ret}")
    md, data = report(rows, a.label)
    plot = taxonomy_plot(next(iter(data.values()))["taxonomy"], out, a.label) if data else None
    (out / "revision.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "revision.md").write_text("\n".join(["# Revise or paste?", "", *md, *([f"![{plot}]({plot})"] if plot
                                                                                   else [])]) + "\n")
    print(f"wrote {out / 'revision.md'}")


if __name__ == "__main__":
    main()
