"""Test-time adaptation: rounds of propose -> evaluate -> select, everything in the store.

Splits (DESIGN.md): the proposer sees feedback-split evaluations only; selection uses the
score split; the final harness is reported on the test split, which neither saw.

Strategies:
- ``sequential``: R rounds x K candidates. Each round revises the current best; a candidate
  replaces it only if its score-split J is strictly higher (ties: the earlier candidate).
- ``independent``: N = R x K proposals from the seed (one prompt, N seeded samples); the best
  by score-split J replaces the seed if strictly better.
- oracle best-of-N (``oracle=True``, independent proposals): the best candidate by *test*
  J. It looks at the test split, so it is an upper bound, labelled as such, never a result.
- ``compare``: both strategies with the same number of proposals, as two runs in one run
  directory; the result is the sequential one plus a ``compare`` table.

Cost accounting: ``solver_calls``/``tokens`` count the adaptation's own evaluations (feedback
and score splits), each distinct evaluation once; test-split evaluations are counted apart
(``test_solver_calls``) since they are reporting, not adaptation.

Settings: one ``AdaptSettings`` (``settings/adapt.py``) says how the job runs; it is stored with each
run and compared on resume: a changed setting that affects results (or another task, solver,
proposer or seed harness) is a UserError naming it.

Resume: every evaluation is looked up by (run, harness, task, split, n, seed) and every
proposal by (run, round, index) before it is computed; candidate i of round r is sampled with
``candidate_seed(seed, r, i)`` and prompts are built from store-loaded evaluations only, so a
resumed run walks the same path as an uninterrupted one (given deterministic models). Before
anything runs, every harness file of the store is checked against its id. The run directory is
locked for the whole job: a second process on it gets a UserError at once.
An evaluation with infrastructure failures is not stored: the run stops with InfraError and
``--resume`` retries it. So does a proposer that fails (an exception from its backend: a server
down, or a ``python:`` function that raises): nothing is recorded for that proposal.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from harnesslearn import spend, tracking
from harnesslearn.errors import InfraError, UserError
from harnesslearn.evaluation import Evaluation, evaluate, improves
from harnesslearn.harness import Harness
from harnesslearn.models.base import Completion, GenerateRequest, Messages, ModelBackend
from harnesslearn.propose.formats import ProposerFormat, resolve
from harnesslearn.propose.prompt import Attempt, PromptContext, load_prompt_dir, use_prompts
from harnesslearn.propose.rounds import (
    Candidate,
    ProposalFailed,
    best_of,
    judge,
    prompt_seed,
    revise,
    select,
    sequential,
)
from harnesslearn.sandbox.records import Budgets, CallRecord
from harnesslearn.settings.adapt import AdaptSettings
from harnesslearn.store import DB_NAME, Store
from harnesslearn.tasks.base import FileTask, Task
from harnesslearn.taxonomy import classify_result
from harnesslearn.tracking import Tracker
from harnesslearn.zoo import default_seed

if TYPE_CHECKING:
    from harnesslearn.memory import Memory
    from harnesslearn.sandbox.protocol import HarnessExecutor as AnyExecutor

ORACLE_LABEL = "oracle best-of-N: selected on the TEST split, an upper bound for comparison only"

EvaluateFn = Callable[["Harness", Task, str, int, int, "AnyExecutor", "Budgets | None", bool], Awaitable[Evaluation]]


class RoundSummary(TypedDict):
    round: int
    best_harness_id: str
    best_score_J: float | None
    improved: bool
    proposals: int
    valid: int


class OracleResult(TypedDict):
    label: str
    harness_id: str
    test_J: float | None
    n: int


@dataclass
class AdaptResult:
    run_dir: str
    strategy: str
    best_harness_id: str
    seed_score_J: float | None
    seed_test_J: float | None
    score_J: float | None
    test_J: float | None
    proposals: int
    valid_proposals: int
    solver_calls: int
    seed_harness_id: str = ""
    tokens: int = 0
    test_solver_calls: int = 0
    proposer_calls: int = 0
    invalid_reasons: dict[str, int] = field(default_factory=dict)
    rounds: list[RoundSummary] = field(default_factory=list)
    lineage: list[str] = field(default_factory=list)
    oracle: OracleResult | None = None
    compare: dict[str, dict[str, Any]] | None = None  # strategy -> its result's JSON (compare only)
    zoo: list[dict[str, Any]] | None = None  # --zoo-baselines: each zoo harness's score and test J
    # the best harness's nearest zoo file by difflib ratio (and the seed's, for reference), when a revision won:
    # a ratio >= zoo.NEAR_COPY means the "improvement" is a zoo harness written back, not a new program
    best_nearest_zoo: dict[str, Any] | None = None
    # every proposal's nearest known source (sources.py: the zoo, the runtime API's patterns, the prompts' example)
    # and how many valid ones are copies (ratio >= sources.COPY): a proposer that revises, or one that pastes
    provenance: dict[str, Any] | None = None
    memory_shown: list[str] = field(default_factory=list)  # ids of the memory entries the proposer saw
    memory_added: str | None = None  # the id of this run's entry, when its best beat the seed
    memory_error: str | None = None  # why adding that entry failed (disk full, ...): the run itself is done
    proposer_format: str = ""  # the format the proposer was asked in (``--proposer-format`` as resolved)
    stopped: str | None = None  # why the run stopped before its last round (a spend cap), else None
    spend: dict[str, Any] = field(default_factory=dict)  # tokens and USD: the totals and per round (spend.py)
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("oracle", "compare", "zoo", "best_nearest_zoo", "provenance", "memory_error", "stopped"):
            if out[key] is None:
                del out[key]
        out["wall_s"] = round(self.wall_s, 3)
        return out


def prompt_record(prompt: str | Messages) -> str:
    """A prompt as stored with its proposal: the text, or the chat messages as JSON."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)


def _log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


@dataclass
class Loop:
    """The shared machinery of one run: cached evaluations, cached proposals, cost counters."""

    store: Store
    run_id: str
    task: Task
    proposer: ModelBackend
    executor: AnyExecutor
    evaluate_fn: EvaluateFn
    settings: AdaptSettings
    progress: bool
    _counted: set[int] = field(default_factory=set)  # evaluations already counted below
    memory: Sequence[Any] = ()  # the harness-memory entries every prompt of the run shows
    solver_calls: int = 0
    tokens: int = 0
    test_solver_calls: int = 0
    proposer_calls: int = 0
    solver_spec: str = ""  # priced by spend.py (the proposer's is its backend's spec)
    tracker: Any = None  # tracking.Tracker: per-round figures to MLflow / W&B (--track)
    stopped: str | None = None  # set when a spend cap stopped the run (CapReached)

    def size(self, split: str) -> int:
        s = self.settings
        return {"feedback": s.splits.n_feedback, "score": s.splits.n_score, "test": s.splits.n_test}[split]

    async def evaluation(self, h: Harness, split: str, *, round: int | None = None, purpose: str | None = None
                         ) -> Evaluation:
        """The evaluation of ``h`` on ``split`` (from the store when already done)."""
        n, seed = self.size(split), self.settings.seed
        row = self.store.find_evaluation(self.run_id, h.id, self.task.spec, split, n, seed)
        if row is None:
            self.store.add_harness(h, run_id=self.run_id, round=round)
            ev = await self.evaluate_fn(h, self.task, split, n, seed, self.executor, self.settings.budgets,
                                        self.progress)
            if ev.infra_failures:
                raise InfraError(
                    f"{ev.infra_failures} problem(s) hit an infrastructure failure evaluating {h.short_id} on "
                    f"{split}; nothing was stored for it: fix the cause and rerun with --resume"
                )
            eid = self.store.save_evaluation(
                self.run_id, ev, n=n, round=round, purpose=purpose or split,
                taxonomy=[classify_result(p) for p in ev.problems],
                families=[self.task.family] * len(ev.problems),
            )
        else:
            eid = row.id
        ev = self.store.load_evaluation(eid)
        if eid not in self._counted:
            self._counted.add(eid)
            if split == "test":
                self.test_solver_calls += ev.solver_calls
            else:
                self.solver_calls += ev.solver_calls
                self.tokens += ev.tokens
        return ev

    @cached_property
    def fmt(self) -> ProposerFormat:
        """The proposer format, decided once from ``--proposer-format`` and the
        backend (``formats.resolve``)."""
        return resolve(self.proposer, self.settings.proposer.format, memory=bool(self.memory))

    def recall(self, round: int, idx: int) -> str | None:
        """Proposal ``idx`` of ``round`` as recorded by an earlier (interrupted) invocation."""
        row = self.store.find_proposal(self.run_id, round, idx)
        return None if row is None else row.raw or ""

    def record(self, round: int, parent: Harness, prompt: str | Messages, c: Candidate, comp: Completion,
               req: GenerateRequest) -> None:
        """Store a new proposal (and its child harness when the edit is valid)."""
        if c.harness is not None:
            self.store.add_harness(c.harness, run_id=self.run_id, round=round)
        call = CallRecord("proposer", {"seed": req.seed, "temperature": req.temperature, "max_tokens": req.max_tokens},
                          comp.text, comp.prompt_tokens, comp.completion_tokens, comp.latency_s)
        self.store.save_proposal(self.run_id, round, c.index, parent_id=parent.id, prompt=prompt_record(prompt),
                                 raw=c.proposal, edit=c.edit, call=call, memory=[e.id for e in self.memory])

    def check_caps(self, where: str, before_round: int | None) -> None:
        """CapReached (``stopped`` set to say ``where``) when what the run spent (in the rounds before
        ``before_round``; None: everything so far) has reached a cap of ``settings.limits``."""
        limits = self.settings.limits
        if limits.proposer_tokens is None and limits.solver_tokens is None and limits.usd is None:
            return
        rows = spend.per_round(self.store, self.run_id, self.solver_spec, self.proposer.spec)
        reason = spend.cap_reason(limits, spend.totals(rows, before_round=before_round))
        if reason is not None:
            self.stopped = f"stopped {where}: {reason}"
            raise spend.CapReached(self.stopped)

    async def candidates(self, round: int, k: int, parent: Harness, parent_J: float | None, prompt: str | Messages,
                         *, check_every: int | None = None) -> list[Candidate]:
        """The round (``rounds.revise``): ``k`` proposals (looked up when already made), applied, and
        the valid ones scored on the score split, in order. CapReached (nothing made) when what the rounds
        before this one spent has reached a cap of ``settings.limits``; with ``check_every`` = K, also before
        each new proposal K, 2K, ... on what the run has spent so far (the independent strategy's R x K
        proposals are one round: its caps hold every K proposals, as a sequential run's every round)."""
        self.check_caps(f"before round {round}", round)

        def recall(i: int) -> str | None:
            old = self.recall(round, i)
            if old is None and check_every and i and i % check_every == 0:
                self.check_caps(f"after {i} of round {round}'s proposals", None)
            return old

        async def score(h: Harness) -> float | None:
            return (await self.evaluation(h, "score", round=round)).J

        try:
            cands = await revise(
                parent, prompt, self.fmt, self.proposer, k, score=score, seed=self.settings.seed, round=round,
                temperature=self.settings.proposer.sampling.temperature,
                max_tokens=self.settings.proposer.sampling.max_tokens, concurrent=False,
                retry_no_change=self.settings.retry_no_change, recall=recall,
                record=lambda c, comp, req: self.record(round, parent, prompt, c, comp, req))
        except ProposalFailed as e:  # the proposer's backend failed: not a proposal, and nothing to score
            raise InfraError(
                f"the proposer {self.proposer.spec} failed on {e}; nothing was stored for it: fix the cause and "
                "rerun with --resume") from e
        self.proposer_calls += len(cands)  # k, and one more for each redrawn no-op (--retry-no-change)
        for c in cands:
            if self.progress:
                state = (f"J={c.J:.3f}" if c.J is not None else
                         "valid" if c.edit.valid else f"invalid: {c.edit.reason}")
                _log(f"[adapt {self.run_id}] round {round} candidate {c.index + 1}/{len(cands)}: {state}")
        return cands

    def prompt(self, harness: Harness, feedback: Evaluation, history: list[Attempt], round: int) -> str | Messages:
        p = self.settings.proposer
        return self.fmt.render(PromptContext(self.task, harness, feedback, history, n_traces=p.n_traces, style=p.style,
                                             rng_seed=prompt_seed(self.settings.seed, round), memory=self.memory))

    def save_round(self, round: int, parent: Harness, best: Harness, best_J: float | None, improved: bool
                   ) -> RoundSummary:
        props = [p for p in self.store.proposals(self.run_id) if p.round == round]
        n_valid = sum(p.valid for p in props)
        self.store.save_round(
            self.run_id, round, parent_id=parent.id, best_harness_id=best.id, best_score_J=best_J,
            improved=improved, n_proposals=len(props), n_valid=n_valid,
            solver_calls=self.solver_calls, tokens=self.tokens,
        )
        if self.tracker is not None:
            rows = spend.per_round(self.store, self.run_id, self.solver_spec, self.proposer.spec)
            spent = spend.totals(rows, before_round=round + 1)
            self.tracker.log({"best_score_J": best_J, "improved": int(improved), "proposals": len(props),
                              "valid": n_valid, "validity": n_valid / len(props) if props else None,
                              "solver_tokens": spent["solver_tokens"], "proposer_tokens": spent["proposer_tokens"],
                              "usd": spent["usd"]}, step=round)
        return {"round": round, "best_harness_id": best.id, "best_score_J": best_J, "improved": improved,
                "proposals": len(props), "valid": n_valid}


async def run_sequential(loop: Loop, seed_h: Harness) -> tuple[Harness, list[RoundSummary]]:
    rounds = loop.settings.rounds
    summary: list[RoundSummary] = []

    def on_round(r: int, parent: Harness, best: Harness, best_J: float | None, improved: bool) -> None:
        summary.append(loop.save_round(r, parent, best, best_J, improved))
        if loop.progress:
            _log(f"[adapt {loop.run_id}] round {r}/{rounds}: best score J={best_J} ({'improved' if improved else 'kept'})")

    best_so_far = [seed_h]

    def on_round_kept(r: int, parent: Harness, best: Harness, best_J: float | None, improved: bool) -> None:
        best_so_far[0] = best
        on_round(r, parent, best, best_J, improved)

    try:
        best, _, _ = await sequential(
            seed_h, (await loop.evaluation(seed_h, "score", round=0)).J, rounds,
            feedback=lambda h, r: loop.evaluation(h, "feedback", round=r), prompt=loop.prompt,
            propose=lambda r, parent, parent_J, prompt: loop.candidates(r, loop.settings.candidates, parent,
                                                                        parent_J, prompt),
            on_round=on_round_kept)
    except spend.CapReached as e:  # the best after the last whole round
        _log(f"[adapt {loop.run_id}] {e}")
        best = best_so_far[0]
    return best, summary


async def run_independent(loop: Loop, seed_h: Harness, oracle: bool
                          ) -> tuple[Harness, list[RoundSummary], OracleResult | None]:
    n = loop.settings.rounds * loop.settings.candidates
    seed_J = (await loop.evaluation(seed_h, "score", round=0)).J
    fb = await loop.evaluation(seed_h, "feedback", round=0)
    prompt = loop.prompt(seed_h, fb, [], 1)
    try:
        cands = await loop.candidates(1, n, seed_h, seed_J, prompt, check_every=loop.settings.candidates)
    except spend.CapReached as e:  # the proposals made before the cap (none: the seed's evaluations reached it)
        _log(f"[adapt {loop.run_id}] {e}")
        made = sorted((p for p in loop.store.proposals(loop.run_id) if p.round == 1), key=lambda p: p.idx)
        if not made:
            return seed_h, [], None

        async def score(h: Harness) -> float | None:
            return (await loop.evaluation(h, "score", round=1)).J

        cands = await judge(seed_h, [p.raw or "" for p in made], score, concurrent=False)
        for c, p in zip(cands, made, strict=True):
            c.index = p.idx
        n = len(cands)
    best, best_J = seed_h, seed_J
    top = select(cands, best_J)
    if top is not None and top.harness is not None:
        best_J, best = top.J, top.harness
    summary = [loop.save_round(1, seed_h, best, best_J, best.id != seed_h.id)]
    oracle_out: OracleResult | None = None
    if oracle:
        pool = [seed_h] + [c.harness for c in cands if c.harness is not None]
        scored = [(await loop.evaluation(h, "test", round=1, purpose="oracle")).J for h in pool]
        pick = best_of(list(zip(scored, pool, strict=True)))  # the same tie rule, on the TEST split
        h_best, J_best = (pick[1], pick[0]) if pick is not None else (seed_h, None)
        oracle_out = OracleResult(label=ORACLE_LABEL, harness_id=h_best.id, test_J=J_best, n=n)
    return best, summary, oracle_out


def _checked(task: Task, s: AdaptSettings, solver: ModelBackend, proposer: ModelBackend) -> AdaptSettings:
    """The settings for this task, after every check that can fail before anything runs: the feedback and
    score splits hold problems (their sizes cut to a finite task's), a money cap has prices, a tracking
    client is installed."""
    for split in ("feedback", "score"):  # selection and feedback are impossible without them
        if not task.problems(split, 1, s.seed):
            raise UserError(f"the {split} split of {task.spec} has no problems (too few in the task for its "
                            f"split fractions feedback/score/test = {task.split_sizes.feedback:g}/"
                            f"{task.split_sizes.score:g}/{task.split_sizes.test:g})")
    s = _fit_splits(task, s)
    spend.check_priced(s.limits, solver.spec, proposer.spec)
    tracking.check(s.tracking.to)
    return s


async def _strategy(loop: Loop, seed_h: Harness, mem: Memory | None, shown: Sequence[Any], *, zoo: bool,
                    t0: float) -> AdaptResult:
    """One strategy's run, its result stored; the memory offered its best harness, the zoo baselines added."""
    s = loop.settings
    if loop.run_id == "sequential":
        best, summary = await run_sequential(loop, seed_h)
        orc = None
    else:
        best, summary, orc = await run_independent(loop, seed_h, s.oracle or s.strategy == "compare")
    result = await _finish(loop, seed_h, best, summary, orc, t0)
    result.memory_shown = [e.id for e in shown]
    if mem is not None:
        try:
            result.memory_added = await _remember(mem, loop, seed_h, best, loop.solver_spec)
        except (sqlite3.Error, OSError, UserError) as e:  # the run is finished and stored: only warn
            result.memory_error = f"{type(e).__name__}: {e}"
        loop.store.finish_run(loop.run_id, result.to_json(), status="stopped" if loop.stopped else "done")
    if zoo:
        result.zoo = await zoo_baselines(loop)  # after _finish: not in the run's counts
        loop.store.finish_run(loop.run_id, result.to_json(), status="stopped" if loop.stopped else "done")
    return result


def _compared(results: dict[str, AdaptResult]) -> AdaptResult:
    """``compare``: the sequential result, with each strategy's figures under ``compare``, and the spend of the
    whole job (both strategies: their totals summed, their rounds each tagged with its strategy) at the top."""
    main = results["sequential"]
    main.strategy = "compare"
    main.compare = {name: {k: v for k, v in r.to_json().items() if k not in ("rounds", "lineage", "zoo")}
                    for name, r in results.items()}
    rows = [{**row, "strategy": name} for name, r in results.items() for row in r.spend.get("per_round", [])]
    main.spend = {**spend.totals(rows), "per_round": rows}
    return main


def _run_dir(run_dir: str | Path | None, resume: bool) -> Path:
    """The run directory to use; UserError for an empty name, ``resume`` without a directory, or
    (without ``resume``) a directory that exists and is not empty."""
    if run_dir is None:
        if resume:
            raise UserError("--resume needs --run-dir (the run directory to continue)")
        return Path("runs") / time.strftime("adapt-%Y%m%d-%H%M%S")
    if not str(run_dir).strip():
        raise UserError("--run-dir must not be empty")
    rd = Path(run_dir)
    if rd.exists() and not rd.is_dir():
        raise UserError(f"--run-dir {rd} is a file, not a directory; name a new or existing run directory")
    if not resume and rd.exists() and any(rd.iterdir()):
        raise UserError(f"run directory already exists: {rd} (use --resume to continue it, or another --run-dir)")
    return rd


def _open_run(store: Store, run_id: str, identity: dict[str, str], settings: AdaptSettings) -> None:
    """Create run ``run_id``, or check that the recorded one has the same inputs and settings."""
    existing = store.run(run_id)
    config = {**settings.record(), **identity}
    if existing is None:
        store.create_run(run_id, config, strategy=run_id)
        return
    old = existing.config
    diff = []
    for k, v in identity.items():
        if old.get(k) == v or (k in ("memory_shown", "scorer") and k not in old):  # runs made before it was recorded
            continue
        diff.append("the harness memory would show other entries than the run saw (an entry added, removed or "
                    "changed, or another memory file); resume with the memory it had, or start a new run"
                    if k == "memory_shown" else
                    "the scorer's source changed since the run was recorded (its J would not compare with the "
                    "recorded rounds'); resume with the scorer it had, or start a new run"
                    if k == "scorer" else f"{k} (recorded {old.get(k)!r}, now {v!r})")
    diff += settings.changes(old)
    if diff:
        raise UserError(f"cannot resume {store.run_dir}: settings differ from the recorded run: {'; '.join(diff)}")


async def _finish(loop: Loop, seed_h: Harness, best: Harness, summary: list[RoundSummary],
                  oracle: OracleResult | None, t0: float) -> AdaptResult:
    seed_score = (await loop.evaluation(seed_h, "score")).J
    seed_test = (await loop.evaluation(seed_h, "test", purpose="test")).J
    score_J = (await loop.evaluation(best, "score")).J
    test_J = (await loop.evaluation(best, "test", purpose="test")).J
    props = loop.store.proposals(loop.run_id)
    reasons: dict[str, int] = {}
    for p in props:
        if not p.valid:
            reasons[str(p.reason)] = reasons.get(str(p.reason), 0) + 1
    result = AdaptResult(
        run_dir=str(loop.store.run_dir), strategy=loop.run_id, best_harness_id=best.id, seed_score_J=seed_score,
        seed_test_J=seed_test, score_J=score_J, test_J=test_J, proposals=len(props),
        valid_proposals=sum(p.valid for p in props), solver_calls=loop.solver_calls,
        seed_harness_id=seed_h.id, tokens=loop.tokens, test_solver_calls=loop.test_solver_calls,
        proposer_calls=loop.proposer_calls, invalid_reasons=reasons, rounds=summary,
        lineage=[h.id for h in loop.store.lineage(best.id)], oracle=oracle, wall_s=time.perf_counter() - t0,
        proposer_format=loop.fmt.name, stopped=loop.stopped, best_nearest_zoo=nearest_zoo(best, seed_h),
        provenance=provenance_of(loop.store, props, best, seed_h, loop.settings.proposer.prompt_dir),
    )
    rows = spend.per_round(loop.store, loop.run_id, loop.solver_spec, loop.proposer.spec)
    result.spend = {**spend.totals(rows), "per_round": rows}
    if loop.tracker is not None:
        loop.tracker.log({"seed_score_J": seed_score, "seed_test_J": seed_test, "score_J": score_J, "test_J": test_J,
                          "valid_proposals": result.valid_proposals, "proposals": result.proposals,
                          "total_solver_tokens": result.spend["solver_tokens"],
                          "total_proposer_tokens": result.spend["proposer_tokens"], "total_usd": result.spend["usd"]},
                         step=len(summary) + 1)
    # a run stopped at a cap is not done: --resume with a larger cap continues it
    loop.store.finish_run(loop.run_id, result.to_json(), status="stopped" if loop.stopped else "done")
    return result


def nearest_zoo(best: Harness, seed_h: Harness) -> dict[str, Any] | None:
    """``{name, ratio, near_copy, seed_ratio}`` for a best harness that is not the seed, else None."""
    from harnesslearn import zoo

    if best.id == seed_h.id:
        return None
    rec = zoo.near(best.source)
    return {**rec, "near_copy": rec["ratio"] >= zoo.NEAR_COPY, "seed_ratio": zoo.near(seed_h.source)["ratio"]}


def provenance_of(store: Store, props: Sequence[Any], best: Harness, seed_h: Harness,
                  prompt_dir: str | None = None) -> dict[str, Any]:
    """Each proposal's nearest known source (``sources.provenance`` of its candidate harness; an invalid proposal
    has none), the counts of valid proposals, of those that are copies and of distinct valid harnesses, and the
    best harness's provenance (None when the seed was kept). ``prompt_dir``: the run's ``--prompt-dir``."""
    from harnesslearn import sources

    pool = sources.known_sources(prompt_dir)
    rows: list[dict[str, Any]] = []
    for p in props:
        rec: dict[str, Any] = {"nearest": None, "ratio": None, "contained": None, "copy": False}
        if p.valid and p.harness_id is not None:
            rec = sources.provenance(store.harness_source(p.harness_id), sources=pool)
        rows.append({"round": p.round, "index": p.idx, "valid": bool(p.valid), **rec})
    valid = [p for p in props if p.valid and p.harness_id is not None]
    return {"copy_ratio": sources.COPY, "proposals": rows, "valid": len(valid),
            "copies": sum(r["copy"] for r in rows if r["valid"]), "distinct_valid": len({p.harness_id for p in valid}),
            "winner": None if best.id == seed_h.id else sources.provenance(best.source, sources=pool)}


async def zoo_baselines(loop: Loop) -> list[dict[str, Any]]:
    """Every zoo harness that applies to the task, evaluated on the score split of this run, and
    the best of them (picked on the score split, never on test) also on the test split (stored
    with purpose ``zoo``; not counted in the adaptation's solver calls). ``harnesslearn zoo
    --test all`` evaluates every one on test."""
    from harnesslearn import zoo

    rows: list[dict[str, Any]] = []
    for name in zoo.names(loop.task):
        h = zoo.build(name, loop.task, loop.settings.seed)
        score = await loop.evaluation(h, "score", purpose="zoo")
        rows.append({"name": name, "harness_id": h.id, "score_J": score.J, "test_J": None,
                     "score": zoo.summarise(score), "test": {}, "best": False})
    pick = best_of([(r["score_J"], r) for r in rows])  # the one tie rule: the first on ties
    if pick is not None:
        top = pick[1]
        test = await loop.evaluation(loop.store.load_harness(top["harness_id"]), "test", purpose="zoo")
        top.update(best=True, test_J=test.J, test=zoo.summarise(test))
    return rows


def _fit_splits(task: Task, s: AdaptSettings) -> AdaptSettings:
    """``s`` with each split size cut to what a finite task holds (one stderr line when cut): the run
    records, and is resumed with, the number of problems that actually ran."""
    if not isinstance(task, FileTask):
        return s
    asked = {"feedback": s.splits.n_feedback, "score": s.splits.n_score, "test": s.splits.n_test}
    have = {split: len(task.problems(split, n, s.seed)) for split, n in asked.items()}
    cut = {split: n for split, n in have.items() if 0 < n < asked[split]}  # an empty test split: J is null
    if not cut:
        return s
    _log("[adapt] " + task.spec + " has fewer problems than asked: "
         + ", ".join(f"{split} {n} (asked {asked[split]})" for split, n in cut.items())
         + "; running and recording those")
    return s.with_(**{f"splits.n_{split}": n for split, n in cut.items()})


async def _remember(mem: Memory, loop: Loop, seed_h: Harness, best: Harness, solver: str) -> str | None:
    """Add the run's best harness to the memory when the memory admits it (``memory.candidate``); its id."""
    from harnesslearn.memory import candidate, note_of

    if best.id == seed_h.id:
        return None
    seed_J, best_J = (await loop.evaluation(seed_h, "score")).J, (await loop.evaluation(best, "score")).J
    questions = [p.question for p in (await loop.evaluation(seed_h, "feedback")).problems]
    entry, rejected = candidate(loop.task, best.source, seed_J=seed_J, J=best_J, questions=questions, solver=solver,
                                note=note_of(best.source, "a revision of the minimal seed made by adapt"),
                                origin="adapt")
    if entry is None:
        if rejected and improves(best_J, seed_J):
            _log(f"[adapt] memory: best harness not stored ({', '.join(rejected)})")
        return None
    added = mem.add(entry)[0]
    _log(f"[adapt] memory: stored {entry.id} (score J {seed_J} -> {best_J}) in {mem.path}")  # after the write
    return added


async def adapt(
    task: Task,
    solver: ModelBackend,
    proposer: ModelBackend,
    settings: AdaptSettings | None = None,
    *,
    run_dir: str | Path | None = None,
    resume: bool = False,
    seed_harness: Harness | None = None,
    progress: bool = True,
    executor: AnyExecutor | None = None,
    evaluate_fn: EvaluateFn | None = None,
) -> AdaptResult:
    """Adapt a harness to ``task`` with ``settings`` (defaults when None); see the module
    docstring. ``executor``/``evaluate_fn`` may be injected (tests, experiments sharing one
    executor); otherwise an Executor is built from ``solver`` and closed at the end. Raises
    UserError for bad input, a run dir that exists without ``resume``, one locked by another
    process, a damaged store or changed settings on resume (nothing is written then);
    InfraError when the solver or proposer fails (resume later)."""
    s = _checked(task, settings or AdaptSettings(), solver, proposer)
    t0 = time.perf_counter()
    rd = _run_dir(run_dir, resume)
    if resume and not (rd / DB_NAME).exists():
        _log(f"[adapt] nothing to resume in {rd}: starting a new run")
    seed_h = seed_harness or default_seed(task)
    identity = {"task": task.spec, "solver": solver.spec, "proposer": proposer.spec,
                "seed_harness": seed_h.id}
    if task.scorer_digest is not None:  # the metric's source, not only its name, is an input of the run
        identity["scorer"] = task.scorer_digest
    from harnesslearn.memory import default_path, fingerprint, open_for

    prompts = load_prompt_dir(s.proposer.prompt_dir) if s.proposer.prompt_dir else {}  # checked before anything runs
    if prompts:  # the templates' text, not only the folder's name, is an input of the run
        identity["prompts"] = hashlib.sha256(json.dumps(prompts, sort_keys=True).encode()).hexdigest()

    if s.memory.enabled and s.memory.path is None and default_path() is None:  # HARNESSLEARN_MEMORY=0
        s = s.with_(**{"memory.enabled": False})  # the one place this is decided: open_for trusts ``enabled``
    mem, shown = open_for(task, enabled=s.memory.enabled, path=s.memory.path, seed=s.seed,
                          sizes=(s.splits.n_feedback, s.splits.n_score, s.splits.n_test), k=s.memory.k)
    # the entries every prompt shows are part of the run's inputs: a resumed run must be shown the same
    identity["memory_shown"] = fingerprint(shown)
    if shown:
        _log(f"[adapt] memory: showing {len(shown)} harness(es) from {', '.join(e.task for e in shown)}")
    store = Store.open(rd, lock=True)
    runtime = None
    trackers: list[Tracker | None] = []
    with use_prompts(prompts):
        try:
            if resume:
                store.verify_harnesses()
            names = ("sequential", "independent") if s.strategy == "compare" else (s.strategy,)
            for name in names:
                _open_run(store, name, identity, s)
            if executor is None:  # our own, through the one runtime; the caller keeps and closes the solver
                from harnesslearn.runtime import SolverRuntime

                runtime = await SolverRuntime.of(solver, s.runtime, own_solver=False).__aenter__()
                executor = runtime.executor
                assert executor is not None
            results: dict[str, AdaptResult] = {}
            for name in names:
                store.add_harness(seed_h, run_id=name, round=0)
                tracker = Tracker(s.tracking.to, s.tracking.project, f"{task.spec} {name}",
                                  {**s.record(), **identity, "run_dir": str(rd)}) if s.tracking.to else None
                trackers.append(tracker)
                loop = Loop(store, name, task, proposer, executor, evaluate_fn or evaluate, s, progress,
                            memory=shown, solver_spec=solver.spec, tracker=tracker)
                results[name] = await _strategy(loop, seed_h, mem, shown, zoo=s.zoo_baselines and name == names[0],
                                                t0=t0)
            return results[s.strategy] if s.strategy != "compare" else _compared(results)
        finally:
            for t in trackers:
                if t is not None:
                    t.close()
            store.close()
            if mem is not None:
                mem.close()
            if runtime is not None:
                await runtime.aclose()
