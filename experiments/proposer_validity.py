"""Single revisions of a seed harness by an untrained proposer: how many are valid edits?

For each family: the seed harness runs on the feedback split (the solver's real answers are the
feedback), the proposer prompt is built from that (chat form for instruction-tuned proposers,
plain for base ones, as ``adapt`` does), and ``--samples`` proposals are sampled with the seeds
``adapt`` would use. Each is applied with the strict edit rules. Reported per family and
overall: valid share, the invalid reasons, proposals that call ``model.python``, and proposals
that copy the prompt's worked example (the chat form has none; for the plain form: the REPLACE lines of ``prompts/few_shot.txt``). Optionally
(``--score N``) each valid candidate is also scored on N score-split problems.

    .venv/bin/python experiments/proposer_validity.py --proposer local:qwen2.5-coder-1.5b-instruct \\
        --solver local:qwen2.5-coder-1.5b-instruct --families basic_arithmetic,gcd,... --samples 8 \\
        --out experiments/results/proposer_validity.json

Uses only the public API of harnesslearn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import typing
from collections import Counter
from pathlib import Path
from typing import Any

from harnesslearn.evaluation import evaluate
from harnesslearn.harness import Harness, load_harness
from harnesslearn.models import load_model
from harnesslearn.propose.edits import apply_proposal, parse_blocks
from harnesslearn.propose.formats import FormatChoice, ProposerFormat, resolve
from harnesslearn.propose.prompt import PromptContext, template
from harnesslearn.propose.rounds import candidate_seed, sample
from harnesslearn.runtime import SolverRuntime
from harnesslearn.sandbox import Budgets
from harnesslearn.tasks import load_task

DEFAULT_FAMILIES = "basic_arithmetic,gcd,word_sorting,letter_counting,rotten_oranges,maze"


def example_replacements() -> set[str]:
    """The replacement texts a proposal would hold if it copied a worked example verbatim (the
    plain form's ``prompts/few_shot.txt``; the chat form shows no example at all)."""
    return {b.replace.strip() for b in parse_blocks(template("few_shot")).blocks}


async def one_family(family: str, args: argparse.Namespace, solver: Any, proposer: Any,
                     fmt: ProposerFormat) -> dict[str, Any]:
    task = load_task(f"rg:{family}")
    seed_h: Harness = load_harness(args.harness)
    budgets = Budgets(timeout_s=120.0)
    copies = example_replacements()
    async with SolverRuntime(solver, concurrency=2, own_solver=False, warm=False) as rt:
        ex = rt.executor
        assert ex is not None
        fb = await evaluate(seed_h, task, "feedback", args.n_feedback, args.seed, ex, budgets=budgets, progress=False)
        prompt = fmt.render(PromptContext(task, seed_h, fb, rng_seed=candidate_seed(args.seed, 1, 0)))
        rows = []
        for i in range(args.samples):
            t0 = time.perf_counter()
            text, comp, _ = await sample(proposer, fmt, prompt, temperature=args.temperature,
                                         max_tokens=args.max_tokens, seed=candidate_seed(args.seed, 1, i),
                                         source=seed_h.source)
            r = apply_proposal(seed_h.source, text)
            blocks = parse_blocks(text).blocks
            row: dict[str, Any] = {
                "i": i, "valid": r.valid, "reason": None if r.reason is None else str(r.reason),
                "n_blocks": r.n_blocks, "copies_example": any(b.replace.strip() in copies for b in blocks),
                "uses_python": r.valid and "model.python" in (r.source or ""),
                "changed": r.valid and r.source is not None and r.source.strip() != seed_h.source.strip(),
                "completion_tokens": comp.completion_tokens, "wall_s": round(time.perf_counter() - t0, 1),
                "text": text,
            }
            if args.score and r.valid and r.source is not None:
                ev = await evaluate(Harness(r.source), task, "score", args.score, args.seed, ex, budgets=budgets,
                                    progress=False)
                row["score_J"] = ev.J
            rows.append(row)
            sys.stderr.write(f"[{family}] {i + 1}/{args.samples}: {'valid' if r.valid else r.reason} "
                             f"({row['wall_s']} s)\n")
        seed_score = None
        if args.score:
            seed_score = (await evaluate(seed_h, task, "score", args.score, args.seed, ex, budgets=budgets,
                                         progress=False)).J
    return {"family": family, "feedback_J": fb.J, "seed_score_J": seed_score, "proposals": rows}


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [r for f in results for r in f["proposals"]]
    n = len(rows)
    return {
        "proposals": n,
        "valid": sum(r["valid"] for r in rows),
        "valid_share": sum(r["valid"] for r in rows) / n if n else None,
        "changed": sum(r["changed"] for r in rows),
        "uses_python": sum(r["uses_python"] for r in rows),
        "copies_example": sum(r["copies_example"] for r in rows),
        "reasons": dict(Counter(r["reason"] for r in rows if not r["valid"])),
        "per_family": {f["family"]: f"{sum(r['valid'] for r in f['proposals'])}/{len(f['proposals'])}" for f in results},
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proposer", default="local:qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--solver", default="local:qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--families", default=DEFAULT_FAMILIES)
    ap.add_argument("--harness", default="minimal")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--n-feedback", type=int, default=4)
    ap.add_argument("--score", type=int, default=0, help="score each valid candidate on N score-split problems")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-tokens", type=int, default=768)
    ap.add_argument("--proposer-format", default="auto", choices=typing.get_args(FormatChoice),
                    help="as adapt's --proposer-format (auto: decided from the proposer backend)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    solver = load_model(args.solver)
    proposer = solver if args.proposer == args.solver else load_model(args.proposer)
    fmt = resolve(proposer, args.proposer_format)
    t0 = time.perf_counter()
    results: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    try:
        for fam in args.families.split(","):
            results.append(await one_family(fam.strip(), args, solver, proposer, fmt))
            out = {"proposer": args.proposer, "solver": args.solver, "format": fmt.name,
                   "harness": args.harness, "samples": args.samples, "temperature": args.temperature,
                   "max_tokens": args.max_tokens, "wall_s": round(time.perf_counter() - t0, 1),
                   "summary": summary(results), "families": results}
            if args.out:  # after every family, so that an interrupted run keeps what it measured
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(out, indent=1))
    finally:
        await solver.aclose()
        if proposer is not solver:
            await proposer.aclose()
    print(json.dumps(out.get("summary"), indent=1))


if __name__ == "__main__":
    asyncio.run(main())
