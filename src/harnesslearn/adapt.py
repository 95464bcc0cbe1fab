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

Resume: every evaluation is looked up by (run, harness, task, split, n, seed) and every
proposal by (run, round, index) before it is computed; candidate i of round r is sampled with
``candidate_seed(seed, r, i)`` and prompts are built from store-loaded evaluations only, so a
resumed run walks the same path as an uninterrupted one (given deterministic models).
An evaluation with infrastructure failures is not stored: the run stops with InfraError and
``--resume`` retries it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harnesslearn.edits import apply_proposal
from harnesslearn.errors import InfraError, UserError
from harnesslearn.evaluation import Evaluation, ProblemResult, evaluate
from harnesslearn.harness import Harness, load_harness
from harnesslearn.models.base import ModelBackend
from harnesslearn.proposer import Attempt, build_prompt, candidate_seed, sample_one
from harnesslearn.sandbox.records import Budgets, CallRecord, RunRecord, Status
from harnesslearn.store import DB_NAME, Store
from harnesslearn.tasks.base import Task
from harnesslearn.taxonomy import classify_result

STRATEGIES = ("sequential", "independent", "compare")
ORACLE_LABEL = "oracle best-of-N: selected on the TEST split, an upper bound for comparison only"

EvaluateFn = Callable[..., Awaitable[Evaluation]]


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
    rounds: list[dict[str, Any]] = field(default_factory=list)
    lineage: list[str] = field(default_factory=list)
    oracle: dict[str, Any] | None = None
    compare: dict[str, Any] | None = None
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if out["oracle"] is None:
            del out["oracle"]
        if out["compare"] is None:
            del out["compare"]
        out["wall_s"] = round(self.wall_s, 3)
        return out


def _log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def load_evaluation(store: Store, evaluation_id: int) -> Evaluation:
    """Rebuild an Evaluation (with run records and calls) from the store. Prompts are built from
    these, never from the live object, so that a resumed run sees byte-identical feedback."""
    row = store.evaluation(evaluation_id)
    if row is None:
        raise KeyError(evaluation_id)
    calls_by_problem: dict[str, list[CallRecord]] = {}
    for c in store.model_calls(evaluation_id=evaluation_id):
        calls_by_problem.setdefault(c["problem_id"], []).append(
            CallRecord(
                kind=c["kind"], request=c["request"], response=c["response"], prompt_tokens=c["prompt_tokens"],
                completion_tokens=c["completion_tokens"], latency_s=c["latency_s"], error=c["error"],
            )
        )
    problems = []
    for r in store.problem_records(evaluation_id):
        rec = RunRecord(
            problem_id=r["problem_id"], status=Status(r["status"]), answer=r["answer"], error=r["error"],
            calls=calls_by_problem.get(r["problem_id"], []), wall_s=r["wall_s"],
        )
        problems.append(
            ProblemResult(
                id=r["problem_id"], question=r["question"], gold=r["gold"], score=r["score"],
                details=r["details"] or {}, status=r["status"], answer=r["answer"], calls=r["calls"],
                tokens=r["tokens"], wall_s=r["wall_s"], error=r["error"], record=rec,
            )
        )
    return Evaluation(
        harness_id=row["harness_id"], task=row["task"], split=row["split"], n=row["n"], seed=row["seed"],
        J=row["J"], completion_rate=row["completion_rate"], solver_calls=row["solver_calls"],
        tokens=row["tokens"], wall_s=row["wall_s"], problems=problems,
    )


def _better(a: float | None, b: float | None) -> bool:
    """a strictly better than b (None = could not score, worse than anything)."""
    return a is not None and (b is None or a > b)


def _pick(cands: list[tuple[float | None, int, Harness]]) -> tuple[float | None, Harness] | None:
    """The candidate with the highest J (the earliest on ties), or None if there is none."""
    scored = [c for c in cands if c[0] is not None]
    if not scored:
        return None
    J, _, h = min(scored, key=lambda c: (-(c[0] or 0.0), c[1]))
    return J, h


@dataclass
class Loop:
    """The shared machinery of one run: cached evaluations, cached proposals, cost counters."""

    store: Store
    run_id: str
    task: Task
    proposer: ModelBackend
    executor: Any
    evaluate_fn: EvaluateFn
    sizes: dict[str, int]
    seed: int
    budgets: Budgets | None
    temperature: float
    max_tokens: int
    n_traces: int
    progress: bool
    prime: str = "search"
    solver_calls: int = 0
    tokens: int = 0
    test_solver_calls: int = 0
    proposer_calls: int = 0
    _counted: set[int] = field(default_factory=set)

    async def evaluation(self, h: Harness, split: str, *, round: int | None = None, purpose: str | None = None
                         ) -> Evaluation:
        """The evaluation of ``h`` on ``split`` (from the store when already done)."""
        n = self.sizes[split]
        row = self.store.find_evaluation(self.run_id, h.id, self.task.spec, split, n, self.seed)
        if row is None:
            self.store.add_harness(h, run_id=self.run_id, round=round)
            ev = await self.evaluate_fn(h, self.task, split, n, self.seed, self.executor, self.budgets, self.progress)
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
            eid = row["id"]
        ev = load_evaluation(self.store, eid)
        if eid not in self._counted:
            self._counted.add(eid)
            if split == "test":
                self.test_solver_calls += ev.solver_calls
            else:
                self.solver_calls += ev.solver_calls
                self.tokens += ev.tokens
        return ev

    async def proposal(self, round: int, idx: int, parent: Harness, prompt: str) -> dict[str, Any]:
        """Proposal ``idx`` of ``round`` revising ``parent`` (from the store when already made)."""
        row = self.store.find_proposal(self.run_id, round, idx)
        if row is not None:
            self.proposer_calls += 1
            return row
        s = candidate_seed(self.seed, round, idx)
        text, comp, req = await sample_one(
            self.proposer, prompt, temperature=self.temperature, max_tokens=self.max_tokens, seed=s,
            rewrite=self.prime == "rewrite",
        )
        self.proposer_calls += 1
        r = apply_proposal(parent.source, text)
        if r.valid and r.source is not None:
            self.store.add_harness(Harness(r.source, parent_id=parent.id, edit=text), run_id=self.run_id, round=round)
        self.store.save_proposal(
            self.run_id, round, idx, parent_id=parent.id, prompt=prompt, raw=text, parsed=r.parsed,
            produced=r.produced, valid=r.valid, reason=None if r.reason is None else str(r.reason),
            detail=r.detail, n_blocks=r.n_blocks, harness_id=r.harness_id,
            call={
                "request": {"seed": s, "temperature": req.temperature, "max_tokens": req.max_tokens},
                "response": comp.text, "prompt_tokens": comp.prompt_tokens,
                "completion_tokens": comp.completion_tokens, "latency_s": comp.latency_s,
            },
        )
        found = self.store.find_proposal(self.run_id, round, idx)
        assert found is not None
        return found

    async def candidates(self, round: int, k: int, parent: Harness, parent_J: float | None, prompt: str,
                         history: list[Attempt]) -> list[tuple[float | None, int, Harness]]:
        """Make (or look up) ``k`` proposals and score the valid ones on the score split."""
        out = []
        for i in range(k):
            row = await self.proposal(round, i, parent, prompt)
            J = None
            if row["valid"]:
                child = self.store.load_harness(row["harness_id"])
                J = (await self.evaluation(child, "score", round=round)).J
                out.append((J, i, child))
            history.append(Attempt(round, i, bool(row["valid"]), row["reason"], parent_J, J, row["raw"] or ""))
            if self.progress:
                state = f"J={J:.3f}" if J is not None else ("valid" if row["valid"] else f"invalid: {row['reason']}")
                _log(f"[adapt {self.run_id}] round {round} candidate {i + 1}/{k}: {state}")
        return out

    def save_round(self, round: int, parent: Harness, best: Harness, best_J: float | None, improved: bool,
                   k: int) -> dict[str, Any]:
        props = [p for p in self.store.proposals(self.run_id) if p["round"] == round]
        self.store.save_round(
            self.run_id, round, parent_id=parent.id, best_harness_id=best.id, best_score_J=best_J,
            improved=improved, n_proposals=len(props), n_valid=sum(p["valid"] for p in props),
            solver_calls=self.solver_calls, tokens=self.tokens,
        )
        return {"round": round, "best_harness_id": best.id, "best_score_J": best_J, "improved": improved,
                "proposals": len(props), "valid": sum(p["valid"] for p in props)}


async def run_sequential(loop: Loop, seed_h: Harness, rounds: int, k: int) -> tuple[Harness, list[dict[str, Any]]]:
    best = seed_h
    best_J = (await loop.evaluation(best, "score", round=0)).J
    history: list[Attempt] = []
    summary = []
    for r in range(1, rounds + 1):
        fb = await loop.evaluation(best, "feedback", round=r - 1)
        prompt = build_prompt(loop.task, best, fb, history, rng_seed=candidate_seed(loop.seed, r, 0),
                              n_traces=loop.n_traces, prime=loop.prime)  # type: ignore[arg-type]
        parent = best
        cands = await loop.candidates(r, k, parent, best_J, prompt, history)
        top, improved = _pick(cands), False
        if top is not None and _better(top[0], best_J):
            (best_J, best), improved = top, True
        summary.append(loop.save_round(r, parent, best, best_J, improved, k))
        if loop.progress:
            _log(f"[adapt {loop.run_id}] round {r}/{rounds}: best score J={best_J} ({'improved' if improved else 'kept'})")
    return best, summary


async def run_independent(loop: Loop, seed_h: Harness, n: int, oracle: bool
                          ) -> tuple[Harness, list[dict[str, Any]], dict[str, Any] | None]:
    seed_J = (await loop.evaluation(seed_h, "score", round=0)).J
    fb = await loop.evaluation(seed_h, "feedback", round=0)
    prompt = build_prompt(loop.task, seed_h, fb, (), rng_seed=candidate_seed(loop.seed, 1, 0),
                          n_traces=loop.n_traces, prime=loop.prime)  # type: ignore[arg-type]
    cands = await loop.candidates(1, n, seed_h, seed_J, prompt, [])
    best, best_J = seed_h, seed_J
    top = _pick(cands)
    if top is not None and _better(top[0], best_J):
        best_J, best = top
    summary = [loop.save_round(1, seed_h, best, best_J, best.id != seed_h.id, n)]
    oracle_out = None
    if oracle:
        pool = [seed_h] + [c for _, _, c in cands]
        scored = [(await loop.evaluation(h, "test", round=1, purpose="oracle")).J for h in pool]
        i_best = max(range(len(pool)), key=lambda i: (scored[i] if scored[i] is not None else -1.0, -i))
        oracle_out = {"label": ORACLE_LABEL, "harness_id": pool[i_best].id, "test_J": scored[i_best], "n": n}
    return best, summary, oracle_out


def _check_run_dir(run_dir: Path, resume: bool) -> None:
    if resume:
        return
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise UserError(f"run directory already exists: {run_dir} (use --resume to continue it, or another --run-dir)")


def _open_run(store: Store, run_id: str, config: dict[str, Any], resume: bool) -> None:
    existing = store.run(run_id)
    if existing is None:
        store.create_run(run_id, config, strategy=run_id)
        return
    old = existing["config"]
    diff = sorted(k for k in config if old.get(k) != config[k])
    if diff:
        raise UserError(f"cannot resume {store.run_dir}: settings differ from the recorded run ({', '.join(diff)})")


async def _one_strategy(loop: Loop, strategy: str, seed_h: Harness, rounds: int, k: int, oracle: bool
                        ) -> tuple[Harness, list[dict[str, Any]], dict[str, Any] | None]:
    if strategy == "sequential":
        best, summary = await run_sequential(loop, seed_h, rounds, k)
        return best, summary, None
    return await run_independent(loop, seed_h, rounds * k, oracle)


async def _finish(loop: Loop, strategy: str, seed_h: Harness, best: Harness, summary: list[dict[str, Any]],
                  oracle: dict[str, Any] | None, run_dir: Path, t0: float) -> AdaptResult:
    seed_score = (await loop.evaluation(seed_h, "score")).J
    seed_test = (await loop.evaluation(seed_h, "test", purpose="test")).J
    score_J = (await loop.evaluation(best, "score")).J
    test_J = (await loop.evaluation(best, "test", purpose="test")).J
    props = loop.store.proposals(loop.run_id)
    reasons: dict[str, int] = {}
    for p in props:
        if not p["valid"]:
            reasons[p["reason"]] = reasons.get(p["reason"], 0) + 1
    result = AdaptResult(
        run_dir=str(run_dir), strategy=strategy, best_harness_id=best.id, seed_score_J=seed_score,
        seed_test_J=seed_test, score_J=score_J, test_J=test_J, proposals=len(props),
        valid_proposals=sum(p["valid"] for p in props), solver_calls=loop.solver_calls,
        seed_harness_id=seed_h.id, tokens=loop.tokens, test_solver_calls=loop.test_solver_calls,
        proposer_calls=loop.proposer_calls, invalid_reasons=reasons, rounds=summary,
        lineage=[h["id"] for h in loop.store.lineage(best.id)], oracle=oracle, wall_s=time.perf_counter() - t0,
    )
    loop.store.finish_run(loop.run_id, result.to_json())
    return result


def default_seed_harness(task: Task) -> Harness:
    return load_harness("qa_minimal" if "search" in task.tools else "minimal")


async def adapt(
    task: Task,
    solver: ModelBackend,
    proposer: ModelBackend,
    *,
    strategy: str = "sequential",
    rounds: int = 3,
    candidates: int = 4,
    run_dir: str | Path | None = None,
    resume: bool = False,
    seed: int = 0,
    n_feedback: int = 8,
    n_score: int = 16,
    n_test: int = 32,
    budgets: Budgets | None = None,
    executor_config: Any = None,
    seed_harness: Harness | None = None,
    oracle: bool = False,
    temperature: float = 0.8,
    max_tokens: int = 1024,
    n_traces: int = 4,
    prime: str = "search",
    progress: bool = True,
    executor: Any = None,
    evaluate_fn: EvaluateFn | None = None,
) -> AdaptResult:
    """Adapt a harness to ``task``; see the module docstring. ``executor``/``evaluate_fn`` may be
    injected (tests); otherwise an Executor is built from ``solver`` and ``executor_config`` and
    closed at the end. Raises UserError for bad settings or a run dir that exists without
    ``resume``; InfraError when the solver or proposer cannot be reached (resume later)."""
    if strategy not in STRATEGIES:
        raise UserError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if prime not in ("search", "rewrite"):
        raise UserError(f"unknown proposer prime {prime!r}; choose search or rewrite")
    if rounds < 1 or candidates < 1 or min(n_feedback, n_score, n_test) < 1:
        raise UserError("rounds, candidates and the split sizes must be at least 1")
    for split in ("feedback", "score"):  # selection and feedback are impossible without them
        if not task.problems(split, 1, seed):
            raise UserError(f"the {split} split of {task.spec} has no problems (too few in the task for its "
                            f"split fractions feedback/score/test = {task.split_sizes.feedback:g}/"
                            f"{task.split_sizes.score:g}/{task.split_sizes.test:g})")
    t0 = time.perf_counter()
    rd = Path(run_dir) if run_dir is not None else Path("runs") / time.strftime("adapt-%Y%m%d-%H%M%S")
    _check_run_dir(rd, resume)
    if resume and not (rd / DB_NAME).exists():
        _log(f"[adapt] nothing to resume in {rd}: starting a new run")
    seed_h = seed_harness or default_seed_harness(task)
    config = {
        "task": task.spec, "solver": getattr(solver, "spec", ""), "proposer": getattr(proposer, "spec", ""),
        "rounds": rounds, "candidates": candidates, "seed": seed, "n_feedback": n_feedback, "n_score": n_score,
        "n_test": n_test, "budgets": asdict(budgets) if budgets is not None else None,
        "seed_harness": seed_h.id, "temperature": temperature, "max_tokens": max_tokens, "n_traces": n_traces,
        "oracle": oracle, "prime": prime,
    }
    own_executor = executor is None
    if own_executor:
        from harnesslearn.sandbox.executor import Executor, ExecutorConfig

        executor = Executor(solver, executor_config or ExecutorConfig())
    store = Store.open(rd)
    try:
        sizes = {"feedback": n_feedback, "score": n_score, "test": n_test}
        results: dict[str, AdaptResult] = {}
        for name in (("sequential", "independent") if strategy == "compare" else (strategy,)):
            _open_run(store, name, {**config, "strategy": name}, resume)
            store.add_harness(seed_h, run_id=name, round=0)
            loop = Loop(store, name, task, proposer, executor, evaluate_fn or evaluate, sizes, seed, budgets,
                        temperature, max_tokens, n_traces, progress, prime=prime)
            best, summary, orc = await _one_strategy(loop, name, seed_h, rounds, candidates,
                                                     oracle or strategy == "compare")
            results[name] = await _finish(loop, name, seed_h, best, summary, orc, rd, t0)
        if strategy != "compare":
            return results[strategy]
        main = results["sequential"]
        main.strategy = "compare"
        main.compare = {name: {k: v for k, v in r.to_json().items() if k not in ("rounds", "lineage")}
                        for name, r in results.items()}
        return main
    finally:
        store.close()
        if own_executor:
            await executor.aclose()
