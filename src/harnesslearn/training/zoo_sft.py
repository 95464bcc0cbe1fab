"""SFT data without a teacher: zoo harnesses as revisions, and best-of-N samples of the proposer
itself (rejection sampling), for the chat prompt form with the rewrite prefill.

For one context (a family and a problem seed): evaluate the seed harness on the feedback split and
on the score split, build the chat prompt (``proposer.build_messages(prime="rewrite")``) and render
it with the proposer's chat template (``render``: the text an in-process engine sees, the prefill
continued). Candidates:

- ``zoo:NAME``: every reasoning zoo harness built for the task (``zoo.build``), inlined into
  ``solve`` and written as the completion of the rewrite prefill (``zoo_edits.zoo_revision``);
- ``self:i``: ``samples`` completions of the proposer backend on the same prompt
  (``proposer.sample_one``, the test-time sampler).

Each candidate is applied with ``edits.apply_proposal`` and kept when the edit is valid, passes the
quality screen (``screen.screen`` with the context's feedback and score questions) and strictly
improves J on the same score problems (``evaluation.improves``). A kept row is ``{"messages":
[{"role": "user", "content": RENDERED_PROMPT}, {"role": "assistant", "content": COMPLETION}],
"provenance": {...}}``, the shape ``sft.read_sft_jsonl`` reads: SFT then trains the rendered prompt
text -> the completion, which is exactly what the model continues at test time.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harnesslearn.harness import Harness
from harnesslearn.sandbox.records import Budgets
from harnesslearn.training.screen import KINDS, classify_revision, screen

Render = Callable[[Any], str]


@dataclass
class ZooSFTSettings:
    n_feedback: int = 4
    n_score: int = 8
    n_traces: int = 3
    zoo_names: tuple[str, ...] = ("interpreter_loop", "reason_extract", "self_consistency", "verify_retry",
                                  "few_shot")
    samples: int = 0  # best-of-N self samples per context (0: zoo only)
    temperature: float = 0.8
    max_tokens: int = 768
    budgets: Budgets | None = None
    max_source_chars: int = 12000
    max_source_lines: int = 300
    labels: dict[str, str] = field(default_factory=dict)  # extra provenance (solver, proposer)


async def context_rows(task: Any, seed_h: Harness, pseed: int, executor: Any, render: Render,
                       settings: ZooSFTSettings, proposer: Any = None) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The kept rows of one context and the counts of what happened to every candidate."""
    from harnesslearn import zoo
    from harnesslearn.edits import apply_proposal
    from harnesslearn.evaluation import evaluate, improves
    from harnesslearn.proposer import as_proposal, build_messages, candidate_seed, sample_one
    from harnesslearn.training.zoo_edits import EditMismatch, zoo_revision

    s = settings
    fb, before = await asyncio.gather(
        evaluate(seed_h, task, "feedback", s.n_feedback, pseed, executor, s.budgets, progress=False),
        evaluate(seed_h, task, "score", s.n_score, pseed, executor, s.budgets, progress=False))
    msgs = build_messages(task, seed_h, fb, n_traces=s.n_traces, rng_seed=pseed, prime="rewrite")
    prompt = render(msgs)
    tail = msgs[-1]["content"]
    questions = [p.question for p in fb.problems] + [p.question for p in before.problems]
    counts: Counter[str] = Counter()
    cands: list[tuple[str, str]] = []  # (source label, completion)
    for name in s.zoo_names:
        if name not in zoo.names(task):
            continue
        try:
            completion, _ = zoo_revision(seed_h.source, zoo.build(name, task, pseed).source, "rewrite")
        except (EditMismatch, ValueError):
            counts["zoo_not_expressible"] += 1
            continue
        cands.append((f"zoo:{name}", completion))
    if proposer is not None and s.samples:
        outs = await asyncio.gather(*(sample_one(proposer, msgs, temperature=s.temperature, max_tokens=s.max_tokens,
                                                 seed=candidate_seed(pseed, 0, i)) for i in range(s.samples)))
        for i, (text, comp, _) in enumerate(outs):
            # the proposal is the prefill + the completion; keep the completion (what the model wrote)
            cands.append((f"self:{i}", text[len(tail):] if text.startswith(tail) else comp.text))

    async def judge(label: str, completion: str) -> dict[str, Any] | None:
        proposal = as_proposal(completion, tail) if not completion.lstrip().startswith("<<<<<<<") else completion
        ed = apply_proposal(seed_h.source, proposal)
        if not (ed.valid and ed.source is not None):
            counts[f"{label.split(':')[0]}:invalid_edit"] += 1
            return None
        rejected = screen(ed.source, questions=questions, max_chars=s.max_source_chars, max_lines=s.max_source_lines)
        if rejected:
            counts.update(f"{label.split(':')[0]}:screen:{r}" for r in rejected)
            return None
        child = Harness(ed.source, parent_id=seed_h.id, edit=proposal)
        after = await evaluate(child, task, "score", s.n_score, pseed, executor, s.budgets, progress=False)
        if after.J is None or before.J is None:
            counts[f"{label.split(':')[0]}:infra_error"] += 1
            return None
        if not improves(after.J, before.J):
            counts[f"{label.split(':')[0]}:not_improved"] += 1
            return None
        counts[f"{label.split(':')[0]}:kept"] += 1
        return {
            "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}],
            "provenance": {
                "source": label, "family": task.family, "task": task.spec, "seed": pseed,
                "J_before": before.J, "J_after": after.J, "completion_rate": after.completion_rate,
                "kind": classify_revision(seed_h.source, ed.source), "parent_id": seed_h.id,
                "harness_id": child.id, "n_score": s.n_score, "form": "chat", "prime": "rewrite", **s.labels,
            },
        }

    rows = [r for r in await asyncio.gather(*(judge(lb, c) for lb, c in cands)) if r is not None]
    return rows, counts


def summarise_rows(rows: list[dict[str, Any]], counts: Counter[str], contexts: int) -> dict[str, Any]:
    """Kept count, share of each revision kind (and of interpreter-loop revisions), per family and
    per source, and the rejection counts."""
    kinds = Counter(r["provenance"]["kind"] for r in rows)
    n = len(rows)
    return {
        "contexts": contexts,
        "kept": n,
        "kinds": {k: kinds.get(k, 0) for k in KINDS},
        "kind_share": {k: (kinds.get(k, 0) / n if n else 0.0) for k in KINDS},
        "interpreter_loop_share": kinds.get("interpreter_loop", 0) / n if n else 0.0,
        "per_family": dict(Counter(r["provenance"]["family"] for r in rows)),
        "per_source": dict(Counter(r["provenance"]["source"] for r in rows)),
        "counts": dict(sorted(counts.items())),
    }
