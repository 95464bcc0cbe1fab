"""One round of revision, written once: propose -> apply -> evaluate -> select.

    candidates = await revise(parent, prompt, fmt, proposer, k, score=..., seed=...)
    best = select(candidates, parent_J)          # the one tie rule

- ``sample`` draws one proposal in a format (its stop strings, its decoding).
- ``judge`` applies proposal texts to the parent (``edits.apply_proposal``, strict) and scores the
  valid children on the score split; ``revise`` is ``sample`` k times + ``judge``.
- ``best_of`` is the tie rule (highest J, the earliest on ties) and ``select`` adds the improvement
  rule (``evaluation.improves``: strictly better than the parent). Adaptation (sequential,
  independent), the zoo's pick, the multistep training contexts, both SFT-data generators, the
  transfer experiment and the peers driver all choose through these two.
- ``candidate_seed`` is the one seed rule: candidate i of round r of a run seeded s.

Resume and recording stay with the caller: ``recall(i)`` may return a proposal already made (then it is
not sampled again) and ``record(candidate, completion, request)`` is called for each new one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from harnesslearn.errors import InfraError
from harnesslearn.evaluation import improves
from harnesslearn.harness import Harness
from harnesslearn.models.base import Completion, GenerateRequest, Messages, ModelBackend
from harnesslearn.propose.edits import EditResult, Reason, apply_proposal
from harnesslearn.propose.formats import ProposerFormat
from harnesslearn.propose.prompt import Attempt
from harnesslearn.seeding import child_seed

T = TypeVar("T")
Score = Callable[[Harness], Awaitable["float | None"]]
Prompt = str | Messages


def candidate_seed(seed: int, round: int, index: int) -> int:
    """The sampling seed of candidate ``index`` in ``round``: fixed per (seed, round, index), so
    a resumed run re-samples exactly the proposals it had not recorded."""
    return child_seed(seed, round * 10_007 + index) % (2**31 - 1)


def prompt_seed(seed: int, round: int) -> int:
    """The seed of round ``round``'s prompt (which feedback traces it shows): the one rule of adaptation and
    of the training contexts, so a single-step context is exactly round 1's prompt at test time."""
    return candidate_seed(seed, round, 0)


class ProposalFailed(Exception):
    """The proposer's backend raised (not an infrastructure fault it reported) while making candidate
    ``index`` of ``round``: nothing was recorded for it."""

    def __init__(self, round: int, index: int, cause: BaseException) -> None:
        super().__init__(f"round {round} candidate {index}: {type(cause).__name__}: {cause}")
        self.round, self.index, self.cause = round, index, cause


@dataclass
class Candidate:
    """One proposal and what became of it."""

    index: int
    proposal: str  # the proposal text (what edits.apply_proposal judged)
    edit: EditResult
    harness: Harness | None  # the child, when the edit is valid
    J: float | None = None  # the child's score-split J (None: invalid, or not scored)
    label: str = ""  # where it came from (e.g. "zoo:interpreter_loop", "self:0")


async def sample(proposer: ModelBackend, fmt: ProposerFormat, prompt: str | Messages, *, temperature: float = 0.8,
                 max_tokens: int = 1024, seed: int = 0, source: str | None = None
                 ) -> tuple[str, Completion, GenerateRequest]:
    """One proposal of ``proposer`` for ``prompt`` in ``fmt``: (proposal text, completion, request).
    ``source``: the harness being revised (a ``chat-function`` reply becomes a block on its ``solve``).
    A completion cut by ``max_tokens`` inside a rewritten body gets no REPLACE marker: invalid."""
    req = GenerateRequest(prompt=prompt, n=1, temperature=temperature, max_tokens=max_tokens, seed=seed,
                          stop=fmt.stop)
    completion = await proposer.generate(req)
    text = fmt.decode(completion.text, prompt, hit_max_tokens=completion.completion_tokens >= max_tokens,
                      source=source)
    return text, completion, req


async def judge(parent: Harness, proposals: Sequence[str | tuple[str, str]], score: Score | None = None, *,
                concurrent: bool = True) -> list[Candidate]:
    """Each proposal applied to ``parent``; valid children scored with ``score`` (all at once, or in
    order when ``concurrent`` is False). A proposal may be given as ``(label, text)``."""
    cands = []
    for i, p in enumerate(proposals):
        label, text = p if isinstance(p, tuple) else ("", p)
        ed = apply_proposal(parent.source, text)
        child = Harness(ed.source, parent_id=parent.id, edit=text) if ed.valid and ed.source is not None else None
        cands.append(Candidate(i, text, ed, child, None, label))
    if score is not None:
        async def one(c: Candidate) -> None:
            if c.harness is not None:
                c.J = await score(c.harness)

        if concurrent:
            await asyncio.gather(*(one(c) for c in cands))
        else:
            for c in cands:
                await one(c)
    return cands


async def revise(parent: Harness, prompt: str | Messages, fmt: ProposerFormat, proposer: ModelBackend, k: int, *,
                 score: Score | None = None, seed: int = 0, round: int = 1, temperature: float = 0.8,
                 max_tokens: int = 1024, concurrent: bool = True, retry_no_change: int = 0,
                 recall: Callable[[int], str | None] | None = None,
                 record: Callable[[Candidate, Completion, GenerateRequest], None] | None = None) -> list[Candidate]:
    """``k`` proposals revising ``parent`` (candidate i sampled with ``candidate_seed(seed, round, i)``),
    applied and scored. See the module docstring for ``recall`` and ``record``.

    With ``retry_no_change`` = n, up to n proposals that left the harness unchanged (``no_change``) are
    each followed by one more draw (candidates k, k+1, ...: their own seeds, recorded and recalled like
    the others, so a resumed round makes the same draws); the no-ops stay in the list, invalid."""
    async def draw(i: int) -> str:
        old = recall(i) if recall is not None else None
        if old is not None:
            return old
        try:
            text, comp, req = await sample(proposer, fmt, prompt, temperature=temperature, max_tokens=max_tokens,
                                           seed=candidate_seed(seed, round, i), source=parent.source)
        except InfraError:
            raise
        except Exception as e:
            raise ProposalFailed(round, i, e) from e
        if record is not None:
            (c,) = await judge(parent, [text])
            c.index = i
            record(c, comp, req)
        return text

    if concurrent:
        texts = list(await asyncio.gather(*(draw(i) for i in range(k))))
    else:
        texts = [await draw(i) for i in range(k)]
    cands = await judge(parent, texts, score, concurrent=concurrent)
    pending = sum(_no_change(c) for c in cands)
    while pending and len(cands) < k + retry_no_change:
        pending -= 1
        i = len(cands)
        (c,) = await judge(parent, [await draw(i)], score)
        c.index = i
        cands.append(c)
        pending += _no_change(c)
    return cands


def _no_change(c: Candidate) -> bool:
    return c.edit.reason == Reason.NO_CHANGE


def best_of(scored: Sequence[tuple[float | None, T]]) -> tuple[float, T] | None:
    """The tie rule: the item with the highest J, the earliest on ties; None when nothing is scored."""
    out: tuple[float, T] | None = None
    for J, item in scored:
        if J is not None and (out is None or J > out[0]):
            out = (J, item)
    return out


def select(cands: Sequence[Candidate], parent_J: float | None) -> Candidate | None:
    """The candidate that replaces a parent scoring ``parent_J``: the best scored one (``best_of``)
    when it strictly improves on the parent (``evaluation.improves``), else None."""
    top = best_of([(c.J, c) for c in cands])
    return top[1] if top is not None and improves(top[0], parent_J) else None


def attempts(round: int, cands: Sequence[Candidate], parent_J: float | None) -> list[Attempt]:
    """The candidates of a round as the "earlier revisions" a later prompt shows."""
    return [Attempt(round, c.index, c.edit.valid, None if c.edit.reason is None else str(c.edit.reason), parent_J,
                    c.J, c.proposal) for c in cands]


async def sequential(parent: Harness, parent_J: float | None, rounds: int, *,
                     feedback: Callable[[Harness, int], Awaitable[Any]],
                     prompt: Callable[[Harness, Any, list[Attempt], int], Prompt],
                     propose: Callable[[int, Harness, float | None, Prompt], Awaitable[list[Candidate]]],
                     on_round: Callable[[int, Harness, Harness, float | None, bool], None] | None = None,
                     ) -> tuple[Harness, float | None, list[Attempt]]:
    """``rounds`` rounds of revision, each of the best harness so far, written once (adaptation's sequential
    strategy and the multistep training contexts): round r evaluates the best on the feedback split
    (``feedback(best, r - 1)``), renders its prompt (``prompt(best, feedback, history, r)``), makes and
    scores its candidates (``propose(r, best, best_J, prompt)``, e.g. :func:`revise`), and keeps the one
    :func:`select` picks; ``on_round(r, parent, best, best_J, improved)`` is told after each. Returns the
    best harness, its score-split J and every attempt (the history the next prompt would show)."""
    best, best_J = parent, parent_J
    history: list[Attempt] = []
    for r in range(1, rounds + 1):
        fb = await feedback(best, r - 1)
        before = best
        cands = await propose(r, before, best_J, prompt(before, fb, history, r))
        history += attempts(r, cands, best_J)
        top = select(cands, best_J)
        if top is not None and top.harness is not None:
            best_J, best = top.J, top.harness
        if on_round is not None:
            on_round(r, before, best, best_J, top is not None)
    return best, best_J, history
