"""SFT data without a teacher: zoo harnesses as revisions, and best-of-N samples of the proposer
itself (rejection sampling), in a chat proposer format (``chat-prefill`` unless set otherwise).

For one context (a family and a problem seed): evaluate the seed harness on the feedback split and
on the score split, build the chat prompt (``formats.ChatPrefill``: the rewrite of ``solve`` opened) and render
it with the proposer's chat template (``render``: the text an in-process engine sees, the prefill
continued). Candidates:

- ``zoo:NAME``: every reasoning zoo harness built for the task (``zoo.build``), inlined into
  ``solve`` and written as the completion of the rewrite prefill (the format's ``target``);
- ``self:i``: ``samples`` completions of the proposer backend on the same prompt
  (``rounds.revise``, the test-time round).

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
from harnesslearn.sandbox.protocol import HarnessExecutor
from harnesslearn.sandbox.records import Budgets
from harnesslearn.settings.groups import ProposerSettings, Sampling, TrainSplits
from harnesslearn.training.screen import KINDS, classify_revision, screen

Render = Callable[[Any], str]


@dataclass
class ZooSFTSettings:
    """One context's rows: its splits, the proposer's format, prompt and sampling (a chat format: the rows
    are its rendered prompts), the zoo entries and self samples tried, the quality screen."""

    splits: TrainSplits = field(default_factory=lambda: TrainSplits(n_feedback=4, n_score=8))
    proposer: ProposerSettings = field(default_factory=lambda: ProposerSettings(
        format="chat-prefill", n_traces=3, sampling=Sampling(temperature=0.8, max_tokens=768)))
    zoo_names: tuple[str, ...] = ("interpreter_loop", "reason_extract", "self_consistency", "verify_retry",
                                  "few_shot")
    samples: int = 0  # best-of-N self samples per context (0: zoo only)
    budgets: Budgets | None = None
    max_source_chars: int = 12000
    max_source_lines: int = 300
    labels: dict[str, str] = field(default_factory=dict)  # extra provenance (solver, proposer)
    # the user's prompt templates (propose.prompt.load_prompt_dir of proposer.prompt_dir), read once by the caller
    prompts: dict[str, str] = field(default_factory=dict)


async def context_rows(task: Any, seed_h: Harness, pseed: int, executor: HarnessExecutor, render: Render,
                       settings: ZooSFTSettings, proposer: Any = None) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The kept rows of one context and the counts of what happened to every candidate."""
    from harnesslearn import zoo
    from harnesslearn.evaluation import evaluate, improves
    from harnesslearn.propose.blocks import EditMismatch
    from harnesslearn.propose.formats import by_name, continuation
    from harnesslearn.propose.prompt import PromptContext, use_prompts
    from harnesslearn.propose.rounds import judge, revise

    s = settings
    fmt = by_name(s.proposer.format)  # chat-prefill: the rewrite opened in the turn the in-process engine continues
    if not fmt.chat:
        raise ValueError(f"zoo SFT rows need a chat proposer format (got {fmt.name})")
    fb, before = await asyncio.gather(
        evaluate(seed_h, task, "feedback", s.splits.n_feedback, pseed, executor, s.budgets, progress=False),
        evaluate(seed_h, task, "score", s.splits.n_score, pseed, executor, s.budgets, progress=False))
    with use_prompts(s.prompts):
        msgs = fmt.render(PromptContext(task, seed_h, fb, n_traces=s.proposer.n_traces, style=s.proposer.style,
                                        rng_seed=pseed))
    prompt = render(msgs)
    questions = [p.question for p in fb.problems] + [p.question for p in before.problems]
    counts: Counter[str] = Counter()
    proposals: list[tuple[str, str]] = []  # (source label, proposal text)
    for name in s.zoo_names:
        if name not in zoo.names(task):
            continue
        try:
            completion = fmt.target(seed_h.source, zoo.build(name, task, pseed).source)
        except (EditMismatch, ValueError):
            counts["zoo_not_expressible"] += 1
            continue
        proposals.append((f"zoo:{name}", fmt.decode(completion, msgs)))
    if proposer is not None and s.samples:
        sampled = await revise(seed_h, msgs, fmt, proposer, s.samples, seed=pseed, round=0,
                               temperature=s.proposer.sampling.temperature,
                               max_tokens=s.proposer.sampling.max_tokens)
        proposals += [(f"self:{c.index}", c.proposal) for c in sampled]

    cands = await judge(seed_h, proposals)  # applied; the valid ones that pass the screen are scored, at once
    evs: dict[int, Any] = {}

    async def score(c: Any) -> None:
        evs[c.index] = await evaluate(c.harness, task, "score", s.splits.n_score, pseed, executor, s.budgets,
                                      progress=False)
        c.J = evs[c.index].J

    await asyncio.gather(*(score(c) for c in cands if c.harness is not None and not screen(
        c.harness.source, questions=questions, max_chars=s.max_source_chars, max_lines=s.max_source_lines)))

    rows: list[dict[str, Any]] = []
    for c in cands:
        src = c.label.split(":")[0]
        if c.harness is None:
            counts[f"{src}:invalid_edit"] += 1
            continue
        rejected = screen(c.harness.source, questions=questions, max_chars=s.max_source_chars,
                          max_lines=s.max_source_lines)
        if rejected:
            counts.update(f"{src}:screen:{r}" for r in rejected)
        elif c.J is None or before.J is None:
            counts[f"{src}:infra_error"] += 1
        elif not improves(c.J, before.J):
            counts[f"{src}:not_improved"] += 1
        else:
            counts[f"{src}:kept"] += 1
            rows.append({
                "messages": [{"role": "user", "content": prompt},
                             {"role": "assistant", "content": continuation(c.proposal, msgs)}],
                "provenance": {  # type: ignore[dict-item]
                    "source": c.label, "family": task.family, "task": task.spec, "seed": pseed,
                    "J_before": before.J, "J_after": c.J, "completion_rate": evs[c.index].completion_rate,
                    "kind": classify_revision(seed_h.source, c.harness.source),
                    "parent_id": seed_h.id, "harness_id": c.harness.id, "n_score": s.splits.n_score,
                    "proposer_format": fmt.name, **s.labels,
                },
            })
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
