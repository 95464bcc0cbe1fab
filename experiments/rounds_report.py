"""Does revision compound? The musique stage's rows (``ret/musique_rows.jsonl``: per proposer arm and task, R
sequential rounds against the best of R independent proposals, at the same proposer calls, and an oracle best of N
picked on the test split) as a table and a plot of test J per round with 95 % intervals:

    python3 experiments/rounds_report.py --ret experiments/results/qwen/state --out experiments/results/qwen/rounds

Only rows with per-round traces (``sequential_trace``) are read; older rows (one pick each) are left out.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from harnesslearn.transfer.stages import read_jsonl  # the stages' own reader of their row files


def fmt(ci: dict[str, float] | None, sign: bool = False) -> str:
    if not ci or ci.get("mean") is None or (isinstance(ci["mean"], float) and math.isnan(ci["mean"])):
        return "n/a"
    f = "+.3f" if sign else ".3f"
    return f"{ci['mean']:{f}} [{ci['lo']:{f}}, {ci['hi']:{f}}]"


def metric_of(r: dict[str, Any]) -> str:
    return "score" if r.get("metric") == "score" or "score" in (r.get("seed") or {}) else str(r.get("metric", "f1"))


def table(rows: list[dict[str, Any]]) -> list[str]:
    """One line per (task, arm): the test J of the seed, the sequential pick, the best of R, the oracle best of N, the
    paired differences, the share of the final gain that round 1 brings, and the proposals' validity."""
    md = ["| task | arm | metric | seed | R sequential rounds | best of R independent | oracle best of N (test) | "
          "sequential minus independent | sequential minus oracle | round 1's share of the gain | valid proposals "
          "(sequential / oracle's N) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m = metric_of(r)
        sc, oc = r.get("sequential_calls") or {}, r.get("oracle_calls") or {}
        share = r.get("round1_share")
        md.append(f"| {r['task']} | {r['arm']} | {m} | {fmt(r['seed'].get(m))} | {fmt(r['sequential'].get(m))} | "
                  f"{fmt(r['independent'].get(m))} | {fmt(r['oracle'].get(m))} (N={r.get('oracle_n')}) | "
                  f"{fmt((r.get('sequential_minus_independent') or {}).get(m), True)} | "
                  f"{fmt((r.get('sequential_minus_oracle') or {}).get(m), True)} | "
                  f"{'' if share is None else f'{share:.2f}'} | {sc.get('valid')}/{sc.get('proposals')} / "
                  f"{oc.get('valid')}/{oc.get('proposals')} |")
    return [*md, ""]


def plot(rows: list[dict[str, Any]], out: Path, label: str) -> str | None:
    """Test J per round: the sequential run's best after round k and the best of the first k independent proposals
    (each with its 95 % interval over problems), the seed at 0, the oracle best of N as a band; a panel per row."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(rows)
    cols = min(n, 3)
    fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(4.2 * cols, 3.2 * ((n + cols - 1) // cols)),
                             squeeze=False)
    for ax, r in zip(axes.flat, rows, strict=False):
        m = metric_of(r)
        seed = r["seed"][m]
        for key, x_of, name in (("sequential_trace", "round", "sequential"), ("independent_trace", "k", "best of k")):
            tr = r.get(key) or []
            xs = [0] + [t[x_of] for t in tr]
            ci = [seed] + [(t.get("test_ci") or {}).get(m) or {"mean": t["test"][m], "lo": t["test"][m],
                                                                  "hi": t["test"][m]} for t in tr]
            ys = [c["mean"] for c in ci]
            ax.plot(xs, ys, marker="o", ms=3, label=name)
            ax.fill_between(xs, [c["lo"] for c in ci], [c["hi"] for c in ci], alpha=0.15)
        o = r["oracle"][m]
        ax.axhspan(o["lo"], o["hi"], color="grey", alpha=0.15)
        ax.axhline(o["mean"], color="grey", ls="--", lw=1, label=f"oracle best of {r.get('oracle_n')} (test)")
        ax.set_title(f"{r['task']} · {r['arm']}", fontsize=9)
        ax.set_xlabel("proposer calls (rounds)")
        ax.set_ylabel(f"test {m}")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(label, fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "rounds.png", dpi=110)
    plt.close(fig)
    return "rounds.png"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ret", required=True, help="a folder with musique_rows.jsonl")
    p.add_argument("--out", required=True)
    p.add_argument("--label", default="small-model result: Qwen2.5-Coder-1.5B solver and proposer")
    a = p.parse_args(argv)
    rows = [r for r in read_jsonl(Path(a.ret) / "musique_rows.jsonl") if r.get("sequential_trace")]
    if not rows:
        sys.exit(f"rounds_report.py: no musique rows with per-round traces in {a.ret}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    made = plot(rows, out, a.label)
    md = ["# Does revision compound?", "", f"{a.label}.", "", *table(rows), *([f"![{made}]({made})"] if made else [])]
    (out / "rounds.md").write_text("\n".join(md) + "\n")
    print(f"wrote {out / 'rounds.md'}")


if __name__ == "__main__":
    main()
