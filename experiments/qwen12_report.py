"""Issue 12 results -> experiments/results/qwen/{results.md, transfer.json, per_family.png,
reward_curve.png}, from the files qwen12.py brought back (no model is loaded).

    python3 experiments/qwen12_report.py --ret DIR --out experiments/results/qwen [--notes NOTES.md]

Transfer table: for each row (base / sft / rl proposer: one revision of the minimal seed, the best
of K proposals by score-split J, kept only if strictly better than the seed; zoo: the best zoo
harness by score-split J), the mean over families of the test J, with 95 % bootstrap intervals
(problems resampled within each family; and families resampled too), validity rates, and the
paired difference to the seed and to the base proposer on the families both rows finished.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import exp_stats as st

ARMS = ["seed", "base", "sft", "rl", "zoo"]
LABEL = {"seed": "minimal seed (no revision)", "base": "base proposer (untrained 1.5B)", "sft": "SFT proposer",
         "rl": "RL proposer (SFT + GRPO)", "zoo": "best zoo harness (by score split)"}


def read_jsonl(p: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.is_file() else []


def fmt(ci: dict[str, float]) -> str:
    if ci is None or math.isnan(ci.get("mean", math.nan)):
        return "n/a"
    return f"{ci['mean']:.3f} [{ci['lo']:.3f}, {ci['hi']:.3f}]"


def transfer(rows: list[dict[str, Any]]) -> dict[str, Any]:
    per: dict[str, dict[str, list[float]]] = {a: {} for a in ARMS}
    val: dict[str, dict[str, int]] = {a: {"proposals": 0, "parsed": 0, "produced": 0, "valid": 0, "improved": 0,
                                          "families": 0} for a in ARMS}
    for r in rows:
        per[r["arm"]][r["family"]] = r["after_scores"]
        per["seed"].setdefault(r["family"], r["seed_scores"])
        v = val[r["arm"]]
        for k in ("proposals", "parsed", "produced", "valid"):
            v[k] += int(r.get(k, 0))
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
            v = val[a]
            row["validity"] = {**v, "valid_rate": v["valid"] / v["proposals"] if v["proposals"] else None,
                               "parse_rate": v["parsed"] / v["proposals"] if v["proposals"] else None}
        out["rows"][a] = row
    return out


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


def save(fig: Any, ax: Any, out: Path, name: str, title: str) -> str:
    """Title, legend, layout; write ``out/name`` and close the figure."""
    import matplotlib.pyplot as plt

    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ret", required=True, help="the unpacked results.tgz (WORK/ret)")
    p.add_argument("--out", required=True)
    p.add_argument("--notes", default=None)
    a = p.parse_args(argv)
    ret, out = Path(a.ret), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = read_jsonl(ret / "eval_rows.jsonl")
    sd = json.loads((ret / "sftdata.json").read_text()) if (ret / "sftdata.json").is_file() else None
    sft = json.loads((ret / "sft.json").read_text()) if (ret / "sft.json").is_file() else None
    grpo = json.loads((ret / "grpo.json").read_text()) if (ret / "grpo.json").is_file() else None
    status = json.loads((ret / "status.json").read_text()) if (ret / "status.json").is_file() else {}
    tr = transfer(rows)
    (out / "transfer.json").write_text(json.dumps(tr, indent=1))
    made = plots(tr, grpo, out)
    md = ["# Issue 12: Qwen2.5-Coder-1.5B-Instruct solver and proposer on one H200 (small-model result)", ""]
    if a.notes and Path(a.notes).is_file():
        md += [Path(a.notes).read_text().strip(), ""]
    if sd:
        md += ["## SFT data (zoo revisions + best-of-N self samples, paper-train families)", "",
               f"- contexts: {sd['contexts']}, kept: **{sd['kept']}**, interpreter-loop share: "
               f"**{sd['interpreter_loop_share']:.0%}** (paper: 432 kept, 48 %)",
               f"- kinds: {sd['kinds']}", f"- per family: {sd['per_family']}", f"- per source: {sd['per_source']}",
               f"- candidate outcomes: {sd['counts']}", f"- score split n = {sd['n_score']}, {sd['seconds']} s", ""]
    if sft:
        md += ["## SFT", "", f"- examples {sft.get('examples')}, steps {sft.get('steps')}, "
               f"train loss {sft.get('train_loss')}, {sft.get('seconds')} s", ""]
    if grpo:
        md += ["## GRPO (from the SFT adapter; reward J + 0.05 parsed + 0.10 produced + 0.15 completion)", "",
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
    failed = {k: v for k, v in status.items() if isinstance(v, dict) and v.get("state") == "failed"}
    for stage, info in failed.items():
        md += [f"## Stage `{stage}` failed ({info.get('seconds')} s)", "", "```",
               str(info.get("error", ""))[-1200:].strip(), "```", ""]
    md += ["## Transfer table (21 paper-eval families, one revision of the minimal seed)", "",
           "Intervals: 95 % bootstrap; 'problems' resamples the test problems inside each family, 'families' "
           "resamples the families too (the honest one for a claim about unseen families). Differences are "
           "paired by family and problem.", "",
           "| row | families | mean test J [95 % CI, problems] | [95 % CI, families too] | minus seed [problems] | "
           "minus seed [families] | minus base [problems] | minus base [families] | valid / proposals | "
           "picked a revision |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in tr["rows"].values():
        v = r.get("validity") or {}
        md.append(f"| {r['label']} | {r['families']} | {fmt(r['test_J'])} | {fmt(r['test_J_families_resampled'])} | "
                  f"{fmt(r.get('minus_seed'))} | {fmt(r.get('minus_seed_families_resampled'))} | "
                  f"{fmt(r.get('minus_base'))} | {fmt(r.get('minus_base_families_resampled'))} | "
                  f"{v.get('valid', '')} / {v.get('proposals', '')} | {v.get('improved', '')} |")
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
    md += [""] + [f"![{m}]({m})" for m in made]
    (out / "results.md").write_text("\n".join(md) + "\n")
    print(f"wrote {out / 'results.md'}")


if __name__ == "__main__":
    main()
