"""SFT data without a teacher: zoo harnesses as revisions, and samples of the proposer itself (best-of-N
rejection sampling, or expert iteration from a pool of parents), in a chat proposer format (``chat-prefill``
unless set otherwise).

For one context (a family, a problem seed and a parent harness): evaluate the parent on the feedback split and
on the score split, build the chat prompt (``formats.ChatPrefill``: the rewrite of ``solve`` opened) and render
it with the proposer's chat template (``render``: the text an in-process engine sees, the prefill continued).
Candidates:

- ``zoo:NAME``: every reasoning zoo harness built for the task (``zoo.build``), inlined into
  ``solve`` and written as the completion of the rewrite prefill (the format's ``target``);
- ``self:i``: ``samples`` completions of the proposer backend on the same prompt
  (``rounds.revise``, the test-time round).

Each candidate is applied with ``edits.apply_proposal`` and kept by the one keep rule (``keep.KeepRule``: the
quality screen with the context's feedback and score questions, and when asked not a copy of a known source and
no solver-written program; then J on the same score problems above the parent's by more than its margin). A
kept row is ``{"messages": [{"role": "user", "content": RENDERED_PROMPT}, {"role": "assistant", "content":
COMPLETION}], "provenance": {...}}``, the shape ``sft.read_sft_jsonl`` reads: SFT then trains the rendered prompt
text -> the completion, which is exactly what the model continues at test time. Its provenance records
``source`` (``zoo`` or ``self``), ``candidate`` (``zoo:NAME`` or ``self:i``), the ``parent`` (``minimal``,
``zoo:NAME`` or ``win:ID``, an earlier winner), J before and after and their ``gain``, the ``kind`` of revision
(``screen.classify_revision``), its nearest ``known`` source (``sources.provenance``), whether it runs
solver-written code (``solver_code``) and the revised harness itself (``harness_source``).

Expert iteration (the transfer recipe's ``sftdata.source`` self): no zoo candidates, copies dropped, and each
context's parent drawn (:func:`draw_parent`) from a pool (:func:`parent_pool`): the minimal seed, the zoo
harnesses built for the task, and the family's earlier winners (kept rows' harnesses).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harnesslearn.harness import Harness
from harnesslearn.sandbox.protocol import HarnessExecutor
from harnesslearn.sandbox.records import Budgets
from harnesslearn.settings.groups import ProposerSettings, Sampling, TrainSplits
from harnesslearn.training.keep import KeepRule
from harnesslearn.training.screen import KINDS, classify_revision

ZOO_NAMES = ("interpreter_loop", "reason_extract", "self_consistency", "verify_retry", "few_shot")

Render = Callable[[Any], str]


@dataclass
class ZooSFTSettings:
    """One context's rows: its splits, the proposer's format, prompt and sampling (a chat format: the rows
    are its rendered prompts), the zoo entries and self samples tried, the keep rule."""

    splits: TrainSplits = field(default_factory=lambda: TrainSplits(n_feedback=4, n_score=8))
    proposer: ProposerSettings = field(default_factory=lambda: ProposerSettings(
        format="chat-prefill", n_traces=3, sampling=Sampling(temperature=0.8, max_tokens=768)))
    zoo_names: tuple[str, ...] = ZOO_NAMES  # () for no zoo candidates (expert iteration)
    samples: int = 0  # best-of-N self samples per context (0: zoo only)
    budgets: Budgets | None = None
    rule: KeepRule = field(default_factory=KeepRule)
    labels: dict[str, str] = field(default_factory=dict)  # extra provenance (solver, proposer)
    # the user's prompt templates (propose.prompt.load_prompt_dir of proposer.prompt_dir), read once by the caller
    prompts: dict[str, str] = field(default_factory=dict)


async def context_rows(task: Any, seed_h: Harness, pseed: int, executor: HarnessExecutor, render: Render,
                       settings: ZooSFTSettings, proposer: Any = None,
                       parent_name: str = "minimal") -> tuple[list[dict[str, Any]], Counter[str]]:
    """The kept rows of one context whose parent is ``seed_h`` (named ``parent_name`` in the rows) and the counts
    of what happened to every candidate (``SRC:proposed``, ``SRC:invalid_edit``, ``SRC:screen:REASON``,
    ``SRC:copy``, ``SRC:loop``, ``SRC:infra_error``, ``SRC:not_improved``, ``SRC:kept``; SRC zoo or self)."""
    from harnesslearn import sources, zoo
    from harnesslearn.evaluation import evaluate
    from harnesslearn.propose.blocks import EditMismatch
    from harnesslearn.propose.formats import by_name, continuation
    from harnesslearn.propose.prompt import PromptContext, use_prompts
    from harnesslearn.propose.rounds import judge, revise
    from harnesslearn.taxonomy import runs_solver_code

    s, rule = settings, settings.rule
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
            counts["zoo:not_expressible"] += 1
            continue
        proposals.append((f"zoo:{name}", fmt.decode(completion, msgs)))
    if proposer is not None and s.samples:
        sampled = await revise(seed_h, msgs, fmt, proposer, s.samples, seed=pseed, round=0,
                               temperature=s.proposer.sampling.temperature,
                               max_tokens=s.proposer.sampling.max_tokens)
        proposals += [(f"self:{c.index}", c.proposal) for c in sampled]

    cands = await judge(seed_h, proposals)  # applied; the valid ones that the rule does not drop are scored, at once
    static = {c.index: rule.static(c.harness.source, questions) for c in cands if c.harness is not None}
    evs: dict[int, Any] = {}

    async def score(c: Any) -> None:
        evs[c.index] = await evaluate(c.harness, task, "score", s.splits.n_score, pseed, executor, s.budgets,
                                      progress=False)
        c.J = evs[c.index].J

    await asyncio.gather(*(score(c) for c in cands if c.harness is not None and not static[c.index]))

    rows: list[dict[str, Any]] = []
    for c in cands:
        src = c.label.split(":")[0]
        counts[f"{src}:proposed"] += 1
        if c.harness is None:
            counts[f"{src}:invalid_edit"] += 1
            continue
        if static[c.index]:
            counts.update(f"{src}:{r}" for r in static[c.index])
            continue
        verdict = rule.verdict(c.J, before.J)
        counts[f"{src}:{verdict}"] += 1
        if verdict != "kept" or c.J is None or before.J is None:
            continue
        rows.append({
            "messages": [{"role": "user", "content": prompt},
                         {"role": "assistant", "content": continuation(c.proposal, msgs)}],
            "provenance": {  # type: ignore[dict-item]
                "source": src, "candidate": c.label, "family": task.family, "task": task.spec, "seed": pseed,
                "parent": parent_name, "J_before": before.J, "J_after": c.J,
                "gain": round(c.J - before.J, 6),
                "margin": rule.margin, "completion_rate": evs[c.index].completion_rate,
                "kind": classify_revision(seed_h.source, c.harness.source),
                "known": sources.provenance(c.harness.source, prompt_dir=rule.prompt_dir),
                "solver_code": runs_solver_code(c.harness.source),
                "parent_id": seed_h.id, "harness_id": c.harness.id, "n_score": s.splits.n_score,
                "proposer_format": fmt.name, "harness_source": c.harness.source, **s.labels,
            },
        })
    return rows, counts


def parent_pool(task: Any, pseed: int, seed_h: Harness, parents: tuple[str, ...],
                winners: Sequence[dict[str, Any]] = (), *, zoo_names: tuple[str, ...] = ZOO_NAMES,
                hold_out_loop: bool = False) -> list[tuple[str, Harness]]:
    """The parents a context of ``task`` may revise, as ``(name, harness)``, in a fixed order: with ``seed`` in
    ``parents`` the minimal seed (``minimal``), with ``zoo`` each of ``zoo_names`` built for the task (problem
    seed ``pseed``), with ``winners`` every earlier winner of the task's family (``winners``: pool records
    ``{"family", "name", "source"}``). With ``hold_out_loop`` no parent that runs solver-written code."""
    from harnesslearn import zoo
    from harnesslearn.taxonomy import runs_solver_code

    pool: list[tuple[str, Harness]] = []
    if "seed" in parents:
        pool.append(("minimal", seed_h))
    if "zoo" in parents:
        pool += [(f"{zoo.PREFIX}{n}", zoo.build(n, task, pseed)) for n in zoo_names if n in zoo.names(task)]
    if "winners" in parents:
        seen: set[str] = set()
        for w in winners:
            h = Harness(w["source"], name=w["name"])
            if w["family"] == task.family and h.id not in seen:
                seen.add(h.id)
                pool.append((w["name"], h))
    return [(n, h) for n, h in pool if not (hold_out_loop and runs_solver_code(h.source))]


def draw_parent(pool: list[tuple[str, Harness]], pseed: int) -> tuple[str, Harness]:
    """One parent of ``pool``, drawn uniformly with the context's problem seed (the same pool gives the same
    draw); ValueError for an empty pool."""
    if not pool:
        raise ValueError("the parent pool is empty")
    return pool[random.Random(pseed).randrange(len(pool))]


def winner_record(row: dict[str, Any]) -> dict[str, Any]:
    """A kept row as a parent of later contexts: ``{"family", "name": "win:ID", "harness_id", "source", "J",
    "parent", "seed"}``."""
    p = row["provenance"]
    return {"family": p["family"], "name": f"win:{p['harness_id'][:12]}", "harness_id": p["harness_id"],
            "source": p["harness_source"], "J": p["J_after"], "parent": p.get("parent"), "seed": p["seed"]}


def loop_row(row: dict[str, Any]) -> bool:
    """Whether an SFT row teaches the held-out pattern: its harness runs solver-written code with ``model.python``
    (``taxonomy.runs_solver_code`` of its ``harness_source``; a row written before that was recorded: its kind is
    ``interpreter_loop``, which such a row revising the seed always is)."""
    from harnesslearn.taxonomy import runs_solver_code

    p = row.get("provenance") or {}
    if p.get("harness_source"):
        return runs_solver_code(p["harness_source"])
    return bool(p.get("solver_code", p.get("kind") == "interpreter_loop"))


def summarise_rows(rows: list[dict[str, Any]], counts: Counter[str], contexts: int,
                   per_context: list[int] | None = None) -> dict[str, Any]:
    """Kept count, share of each revision kind (and of interpreter-loop revisions), per family, per source (zoo
    or self), per candidate and per parent; the distinct completions and harnesses, the rows' mean gain over their
    parents, how many are copies of a known source and run solver-written code; the yield (kept rows per context,
    from ``per_context``: each context's kept rows; and per self proposal) and the rejection counts. Rows written
    before the source/candidate split (``source`` ``zoo:NAME``) are read as such."""
    kinds = Counter(r["provenance"]["kind"] for r in rows)
    prov = [r["provenance"] for r in rows]
    n = len(rows)
    gains = [p["J_after"] - p["J_before"] for p in prov if p.get("J_after") is not None and p.get("J_before") is not None]
    known = [p["known"]["copy"] for p in prov if isinstance(p.get("known"), dict)]
    code = [p["solver_code"] for p in prov if "solver_code" in p]
    proposed = counts.get("self:proposed", 0)
    out: dict[str, Any] = {
        "contexts": contexts,
        "kept": n,
        "kinds": {k: kinds.get(k, 0) for k in KINDS},
        "kind_share": {k: (kinds.get(k, 0) / n if n else 0.0) for k in KINDS},
        "interpreter_loop_share": kinds.get("interpreter_loop", 0) / n if n else 0.0,
        "per_family": dict(Counter(p["family"] for p in prov)),
        "per_source": dict(Counter(p["source"].split(":")[0] for p in prov)),
        "per_candidate": dict(Counter(p.get("candidate", p["source"]) for p in prov)),
        "per_parent": dict(Counter(p.get("parent", "minimal") for p in prov)),
        "distinct_completions": len({r["messages"][-1]["content"] for r in rows}),
        "distinct_harnesses": len({p["harness_id"] for p in prov}),
        "mean_gain": round(sum(gains) / len(gains), 4) if gains else None,
        "copies": sum(known) if known else None,
        "solver_code_share": round(sum(code) / len(code), 4) if code else None,
        "self_proposed": proposed,
        "self_yield": round(counts.get("self:kept", 0) / proposed, 4) if proposed else None,
        "counts": dict(sorted(counts.items())),
    }
    if per_context is not None:
        out["yield_per_context"] = {
            "mean": round(sum(per_context) / len(per_context), 4) if per_context else None,
            "with_rows": sum(k > 0 for k in per_context), "histogram": dict(sorted(Counter(per_context).items()))}
    return out
