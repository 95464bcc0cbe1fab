"""`harnesslearn train sft-data`: first-round revisions of the seed harness by a teacher model,
filtered into a chat-format JSONL for SFT.

For each training family and each of ``contexts_per_family`` problem seeds: evaluate the seed on
the feedback split, build the proposer prompt from that feedback (the ``plain-search`` format, the
test-time prompt), sample ``candidates`` teacher revisions (``propose.rounds.revise``), and evaluate
each valid one on the score split. A revision is kept by the keep rule every SFT-data generator
shares (``keep.KeepRule``): it passes the quality screen (``screen.py``: valid edit, compiles, no
literal question->answer table, no file/process/network access, size limits) and its J beats the
seed's J on the same score problems by more than ``min_gain``.
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
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from harnesslearn.errors import InfraError, UserError
from harnesslearn.fsutil import atomic_write_text
from harnesslearn.harness import Harness, load_harness
from harnesslearn.propose.prompt import load_prompt_dir, use_prompts
from harnesslearn.sandbox.protocol import HarnessExecutor
from harnesslearn.seeding import child_seed
from harnesslearn.training.config import SFTDataConfig
from harnesslearn.training.contexts import load_tasks, task_spec
from harnesslearn.training.keep import KeepRule
from harnesslearn.training.screen import KINDS, classify_revision


async def _one_context(cfg: SFTDataConfig, teacher: Any, executor: HarnessExecutor, task: Any, seed_h: Harness, ctx_index: int,
                       store: Any) -> tuple[list[dict[str, Any]], Counter[str]]:
    from harnesslearn.evaluation import evaluate
    from harnesslearn.propose.formats import by_name, continuation
    from harnesslearn.propose.prompt import PromptContext
    from harnesslearn.propose.rounds import ProposalFailed, revise

    budgets, n_score, p = cfg.budgets, cfg.splits.n_score, cfg.proposer
    pseed = child_seed(cfg.seed, ctx_index)
    fb = await evaluate(seed_h, task, "feedback", cfg.splits.n_feedback, pseed, executor, budgets, progress=False)
    before = await evaluate(seed_h, task, "score", n_score, pseed, executor, budgets, progress=False)
    fmt = by_name(p.format)  # plain-search: the teacher continues a prompt ending in an open SEARCH
    prompt = str(fmt.render(PromptContext(task, seed_h, fb, style=p.style, n_traces=p.n_traces, rng_seed=pseed)))
    for ev in (fb, before):  # a solver that is down: not a context with nothing kept
        if ev.problems and ev.infra_failures == len(ev.problems):
            first = (ev.problems[0].error or "no detail").splitlines()[0][:300]
            raise InfraError(f"every run of the seed on {task.spec} ({ev.split} split) hit an infrastructure "
                             f"failure; is the solver {cfg.solver} reachable? first: {first}")
    try:
        cands = await revise(seed_h, prompt, fmt, teacher, cfg.candidates, seed=pseed, round=0,
                             temperature=p.sampling.temperature, max_tokens=p.sampling.max_tokens)
    except ProposalFailed as e:  # the teacher's backend failed: one line, not a traceback
        raise InfraError(f"the teacher {cfg.teacher} failed on {e}") from None
    questions = [p.question for p in fb.problems] + [p.question for p in before.problems]
    counts: Counter[str] = Counter()
    rule = KeepRule(margin=cfg.min_gain, max_source_chars=cfg.max_source_chars, max_source_lines=cfg.max_source_lines)

    async def judge(i: int) -> dict[str, Any] | None:
        ed, text = cands[i].edit, cands[i].proposal
        if store is not None:
            store.save_proposal("sft-data", ctx_index, i, parent_id=seed_h.id, prompt=prompt, raw=text, edit=ed)
        if not (ed.valid and ed.source is not None):
            counts["invalid_edit"] += 1
            return None
        rejected = rule.static(ed.source, questions)
        if rejected:
            counts.update(rejected)
            return None
        child = Harness(ed.source, parent_id=seed_h.id, edit=text)
        after = await evaluate(child, task, "score", n_score, pseed, executor, budgets, progress=False)
        verdict = rule.verdict(after.J, before.J)
        counts[verdict] += 1
        if verdict != "kept":
            return None
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


def _check_out(path: str) -> Path:
    """The output file, checked before any work: not a folder, its folder creatable and writable."""
    out = Path(path)
    if not path.strip():
        raise UserError("out: the output path is empty")
    if out.is_dir():
        raise UserError(f"out: {out} is a folder; name a .jsonl file")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"out: cannot create the folder of {out}: {e.strerror or e}") from None
    if not os.access(out.parent, os.W_OK):
        raise UserError(f"out: the folder {out.parent} is not writable")
    return out


def _open_store(cfg: SFTDataConfig, seed_h: Harness) -> Any:
    """The run store of ``run_dir`` (None without one), locked; a run_dir that already holds an sft-data run
    is refused in one line (its proposals are keyed by context: a second run would collide with them)."""
    if cfg.run_dir is None:
        return None
    from harnesslearn.store import Store

    store = Store.open(cfg.run_dir, lock=True)
    try:
        old = store.run("sft-data")
        if old is not None:
            raise UserError(f"run_dir {cfg.run_dir} already holds an sft-data run ({old.status}); sft-data does not "
                            "resume: name another run_dir (or remove it to start over)")
        store.create_run("sft-data", cfg.record(), strategy="sft-data")
        store.add_harness(seed_h, run_id="sft-data", round=0)
    except BaseException:
        store.close()
        raise
    return store


async def generate(cfg: SFTDataConfig) -> dict[str, Any]:
    """Write the dataset; returns the summary the CLI prints."""
    from harnesslearn.models import load_model
    from harnesslearn.runtime import SolverRuntime

    out = _check_out(cfg.out)  # before anything runs: an output that cannot be written loses no work
    prompts = load_prompt_dir(cfg.proposer.prompt_dir) if cfg.proposer.prompt_dir else {}
    seed_h = load_harness(cfg.seed_harness)
    tasks = load_tasks([task_spec(f) for f in cfg.families])
    store = _open_store(cfg, seed_h)
    teacher = load_model(cfg.teacher, base_url=cfg.teacher_base_url)
    try:
        async with SolverRuntime.of(cfg.solver, cfg.runtime, base_url=cfg.solver_base_url) as rt:
            ex = rt.sandbox
            jobs = [
                _one_context(cfg, teacher, ex, task, seed_h, fi * cfg.contexts_per_family + c, store)
                for fi, task in enumerate(tasks.values()) for c in range(cfg.contexts_per_family)
            ]
            with use_prompts(prompts):  # the user's templates (proposer.prompt_dir), if any
                results = await asyncio.gather(*jobs)
    except BaseException:
        if store is not None:
            store.close()
        raise
    finally:
        await teacher.aclose()
    rows = [r for kept, _ in results for r in kept]
    counts: Counter[str] = Counter()
    for _, c in results:
        counts.update(c)
    try:
        atomic_write_text(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from None
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
