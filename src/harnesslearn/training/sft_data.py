"""`harnesslearn train sft-data`: first-round revisions of the seed harness by a teacher model,
filtered into a chat-format JSONL for SFT.

For each training family and each of ``contexts_per_family`` problem seeds: evaluate the seed on
the feedback split, build the proposer prompt from that feedback (the ``plain-search`` format, the
test-time prompt), sample ``candidates`` teacher revisions (``propose.rounds.revise``), and evaluate
each valid one on the score split. A revision is kept when its J beats the seed's J on the same
score problems by more than ``min_gain`` and it passes the quality screen (``screen.py``: valid
edit, compiles, no literal question->answer table, no file/process/network access, size limits).
Candidates whose score could not be computed (infrastructure failure) are dropped and counted.

Each kept line: ``{"messages": [{"role": "user", "content": PROMPT}, {"role": "assistant",
"content": COMPLETION}], "provenance": {...}}`` where COMPLETION is the text that continues the
prompt (the prompt ends with the opening SEARCH marker, so the marker is not repeated) and the
provenance holds teacher, solver, family, task, seed, J before and after, the kind of revision,
and the harness ids.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from harnesslearn.harness import Harness, load_harness
from harnesslearn.sandbox.protocol import HarnessExecutor
from harnesslearn.seeding import child_seed
from harnesslearn.training.config import SFTDataConfig
from harnesslearn.training.contexts import load_tasks, task_spec
from harnesslearn.training.screen import KINDS, classify_revision, screen


async def _one_context(cfg: SFTDataConfig, teacher: Any, executor: HarnessExecutor, task: Any, seed_h: Harness, ctx_index: int,
                       store: Any) -> tuple[list[dict[str, Any]], Counter[str]]:
    from harnesslearn.evaluation import evaluate
    from harnesslearn.propose.formats import by_name, continuation
    from harnesslearn.propose.prompt import PromptContext
    from harnesslearn.propose.rounds import revise

    budgets, n_score, p = cfg.budgets, cfg.splits.n_score, cfg.proposer
    pseed = child_seed(cfg.seed, ctx_index)
    fb = await evaluate(seed_h, task, "feedback", cfg.splits.n_feedback, pseed, executor, budgets, progress=False)
    before = await evaluate(seed_h, task, "score", n_score, pseed, executor, budgets, progress=False)
    fmt = by_name(p.format)  # plain-search: the teacher continues a prompt ending in an open SEARCH
    prompt = str(fmt.render(PromptContext(task, seed_h, fb, style=p.style, n_traces=p.n_traces, rng_seed=pseed)))
    cands = await revise(seed_h, prompt, fmt, teacher, cfg.candidates, seed=pseed, round=0,
                         temperature=p.sampling.temperature, max_tokens=p.sampling.max_tokens)
    questions = [p.question for p in fb.problems] + [p.question for p in before.problems]
    counts: Counter[str] = Counter()

    async def judge(i: int) -> dict[str, Any] | None:
        ed, text = cands[i].edit, cands[i].proposal
        if store is not None:
            store.save_proposal("sft-data", ctx_index, i, parent_id=seed_h.id, prompt=prompt, raw=text, edit=ed)
        if not (ed.valid and ed.source is not None):
            counts["invalid_edit"] += 1
            return None
        rejected = screen(ed.source, questions=questions, max_chars=cfg.max_source_chars,
                          max_lines=cfg.max_source_lines)
        if rejected:
            counts.update(f"screen:{r}" for r in rejected)
            return None
        child = Harness(ed.source, parent_id=seed_h.id, edit=text)
        after = await evaluate(child, task, "score", n_score, pseed, executor, budgets, progress=False)
        if after.J is None or before.J is None:
            counts["infra_error"] += 1
            return None
        if not after.J > before.J + cfg.min_gain:
            counts["not_improved"] += 1
            return None
        counts["kept"] += 1
        return {
            "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": continuation(text, prompt)}],
            "provenance": {
                "teacher": cfg.teacher, "solver": cfg.solver, "family": task.family, "task": task.spec,
                "seed": pseed, "J_before": before.J, "J_after": after.J, "kind": classify_revision(seed_h.source, ed.source),
                "parent_id": seed_h.id, "harness_id": child.id, "n_score": n_score, "style": p.style,
                "proposer_format": fmt.name,
            },
        }

    kept = [r for r in await asyncio.gather(*(judge(i) for i in range(len(cands)))) if r is not None]
    return kept, counts


async def generate(cfg: SFTDataConfig) -> dict[str, Any]:
    """Write the dataset; returns the summary the CLI prints."""
    from harnesslearn.models import load_model
    from harnesslearn.runtime import SolverRuntime

    teacher = load_model(cfg.teacher, base_url=cfg.teacher_base_url)
    seed_h = load_harness(cfg.seed_harness)
    tasks = load_tasks([task_spec(f) for f in cfg.families])
    store = None
    if cfg.run_dir is not None:
        from harnesslearn.store import Store

        store = Store.open(cfg.run_dir)
        if store.run("sft-data") is None:
            store.create_run("sft-data", cfg.record(), strategy="sft-data")
        store.add_harness(seed_h, run_id="sft-data", round=0)
    try:
        async with SolverRuntime.of(cfg.solver, cfg.runtime, base_url=cfg.solver_base_url) as rt:
            ex = rt.sandbox
            jobs = [
                _one_context(cfg, teacher, ex, task, seed_h, fi * cfg.contexts_per_family + c, store)
                for fi, task in enumerate(tasks.values()) for c in range(cfg.contexts_per_family)
            ]
            results = await asyncio.gather(*jobs)
    finally:
        await teacher.aclose()
    rows = [r for kept, _ in results for r in kept]
    counts: Counter[str] = Counter()
    for _, c in results:
        counts.update(c)
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out)
    kinds = Counter(r["provenance"]["kind"] for r in rows)
    summary = {
        "command": "sft-data",
        "out": str(out),
        "teacher": cfg.teacher,
        "contexts": len(jobs),
        "candidates": len(jobs) * cfg.candidates,
        "kept": len(rows),
        "kinds": {k: kinds.get(k, 0) for k in KINDS},
        "kind_share": {k: (kinds.get(k, 0) / len(rows) if rows else 0.0) for k in KINDS},
        "per_family": dict(Counter(r["provenance"]["family"] for r in rows)),
        "rejections": {k: v for k, v in sorted(counts.items()) if k != "kept"},
    }
    if store is not None:
        store.finish_run("sft-data", summary)
        store.close()
    print(f"harnesslearn: kept {len(rows)} of {summary['candidates']} teacher revisions -> {out}", file=sys.stderr)
    return summary
