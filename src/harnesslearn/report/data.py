"""What the report shows, read from a run directory through the store's read helpers.

``load_run_dir`` opens the store (never creating one) and ``RunView`` derives, for one run,
the numbers the sections and plots need: the selected harness per round, J per round on the
score and test splits, validity rates per round, the lineage, the seed and best harnesses.

A partial run (interrupted, or still running) has fewer rows; every view here returns what
exists and never assumes a later stage happened. Where the ``rounds`` table (written by the
adaptation loop at the end of each round) is missing rows, the selection is recomputed from the
evaluations the same way the sequential strategy selects: the best score-split J so far, a
later harness replacing an earlier one only when strictly better.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from harnesslearn.evaluation import improves
from harnesslearn.store import (
    EvaluationRow,
    HarnessRow,
    ProposalRow,
    RewardRow,
    RoundRow,
    RunRow,
    Store,
)

Point = tuple[float, float]


def open_store(run_dir: str | Path) -> Store:
    """Open an existing run directory; a missing directory or one without a readable
    ``runs.sqlite`` is a UserError (one line), and nothing is written to it then."""
    return Store.open_readonly(run_dir)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class RunView:
    """One run (a row of ``runs``) and the rows that belong to it."""

    store: Store
    run: RunRow
    evaluations: list[EvaluationRow] = field(default_factory=list)
    proposals: list[ProposalRow] = field(default_factory=list)
    rounds: list[RoundRow] = field(default_factory=list)

    @classmethod
    def load(cls, store: Store, run: RunRow) -> RunView:
        return cls(store, run, store.evaluations(run.id), store.proposals(run.id), store.rounds(run.id))

    @property
    def id(self) -> str:
        return self.run.id

    @property
    def result(self) -> dict[str, Any]:
        r = self.run.result
        return r if isinstance(r, dict) else {}

    @property
    def config(self) -> dict[str, Any]:
        c = self.run.config
        return c if isinstance(c, dict) else {}

    # ------------------------------------------------------------ J per harness
    def j_by_harness(self, split: str) -> dict[str, float]:
        """The J of each harness on ``split`` (the largest evaluation when there are several)."""
        out: dict[str, tuple[int, float]] = {}
        for e in self.evaluations:
            if e.split == split and e.J is not None:
                prev = out.get(e.harness_id)
                if prev is None or e.n > prev[0]:
                    out[e.harness_id] = (e.n, e.J)
        return {h: j for h, (_, j) in out.items()}

    def evaluation_of(self, harness_id: str | None, split: str) -> EvaluationRow | None:
        cands = [e for e in self.evaluations if e.harness_id == harness_id and e.split == split]
        return max(cands, key=lambda e: (e.n, e.id)) if cands else None

    # ------------------------------------------------------------ selection
    @cached_property
    def selected(self) -> list[tuple[int, str]]:
        """(round, harness selected after that round), from ``rounds`` where written, else
        recomputed from score-split evaluations (strict improvement keeps the earlier one)."""
        recorded = {r.round: r.best_harness_id for r in self.rounds}
        score = self.j_by_harness("score")
        by_round: dict[int, list[str]] = defaultdict(list)
        for e in self.evaluations:
            if e.split == "score" and e.J is not None:
                by_round[e.round or 0].append(e.harness_id)
        out: list[tuple[int, str]] = []
        best: str | None = None
        for rnd in sorted(set(by_round) | set(recorded)):
            for h in by_round.get(rnd, []):
                if best is None or improves(score[h], score.get(best)):
                    best = h
            if rnd in recorded:
                best = recorded[rnd]
            if best is not None:
                out.append((rnd, best))
        return out

    @property
    def best_id(self) -> str | None:
        """The run's final harness: the result's ``best_harness_id`` when the run finished,
        else the latest selection."""
        b = self.result.get("best_harness_id")
        if isinstance(b, str):
            return b
        return self.selected[-1][1] if self.selected else None

    @cached_property
    def seed_id(self) -> str | None:
        """The root of the best harness's lineage; without one, the first parentless harness
        this run evaluated or proposed from."""
        if self.best_id is not None:
            chain = self.store.lineage(self.best_id)
            if chain:
                return chain[0].id
        for hid in self.harness_ids:
            row = self.store.harness(hid)
            if row is not None and row.parent_id is None:
                return hid
        return None

    @cached_property
    def harness_ids(self) -> list[str]:
        """Every harness this run touched (evaluated, proposed from, or produced), plus their
        ancestors, in first-seen order."""
        seen: dict[str, None] = {}
        for e in self.evaluations:
            seen.setdefault(e.harness_id)
        for p in self.proposals:
            for h in (p.parent_id, p.harness_id):
                if h:
                    seen.setdefault(h)
        for h in list(seen):
            for row in self.store.lineage(h):
                seen.setdefault(row.id)
        return list(seen)

    def best_path(self) -> list[HarnessRow]:
        """Harness rows from the seed to the best harness (the chain of consecutive bests)."""
        return self.store.lineage(self.best_id) if self.best_id else []

    # ------------------------------------------------------------ per-round series
    def j_series(self) -> tuple[list[Point], list[Point], list[Point]]:
        """(selected harness score J per round, its test J per round where evaluated,
        every candidate's score J as (round, J))."""
        score, test = self.j_by_harness("score"), self.j_by_harness("test")
        best_score: list[Point] = [(r, score[h]) for r, h in self.selected if h in score]
        best_test: list[Point] = [(r, test[h]) for r, h in self.selected if h in test]
        cands: list[Point] = [
            (e.round or 0, e.J) for e in self.evaluations if e.split == "score" and e.J is not None and (e.round or 0) > 0
        ]
        return best_score, best_test, cands

    def oracle_test_j(self) -> float | None:
        """Oracle best-of-N: the run result's ``oracle.test_J``, else the best test-split J over the
        evaluations marked ``oracle``. Selected on the test split: an upper bound only."""
        oracle = self.result.get("oracle")
        if isinstance(oracle, dict) and isinstance(oracle.get("test_J"), int | float):
            return float(oracle["test_J"])
        js = [e.J for e in self.evaluations if e.purpose == "oracle" and e.J is not None]
        return max(js) if js else None

    def zoo_rows(self) -> list[dict[str, Any]]:
        """The zoo baselines the run evaluated (``adapt --zoo-baselines``): name, harness id, score
        and test J, and ``best`` (picked on the score split). Empty when none were evaluated."""
        rows = self.result.get("zoo")
        return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []

    def validity_series(self) -> dict[str, list[Point]]:
        """Per round: shares of proposals parsed, produced, valid; mean completion rate of the
        round's valid candidates on the score split (a candidate identical to an earlier one
        reuses that evaluation)."""
        by_round: dict[int, list[ProposalRow]] = defaultdict(list)
        for p in self.proposals:
            by_round[p.round].append(p)
        out: dict[str, list[Point]] = {"parsed": [], "produced": [], "valid": [], "completion": []}
        completion: dict[str, float] = {}
        for e in sorted(self.evaluations, key=lambda e: e.n):  # the largest evaluation wins
            if e.split == "score" and e.completion_rate is not None:
                completion[e.harness_id] = e.completion_rate
        for rnd in sorted(by_round):
            ps = by_round[rnd]
            out["parsed"].append((rnd, sum(p.parsed for p in ps) / len(ps)))
            out["produced"].append((rnd, sum(p.produced for p in ps) / len(ps)))
            out["valid"].append((rnd, sum(p.valid for p in ps) / len(ps)))
            comp = _mean([completion[p.harness_id] for p in ps if p.valid and p.harness_id in completion])
            if comp is not None:
                out["completion"].append((rnd, comp))
        return out

    # ------------------------------------------------------------ budgets
    def budget_rows(self) -> list[dict[str, Any]]:
        """Solver calls, tokens and wall time summed per split (and purpose), plus the
        proposer's calls and tokens."""
        agg: dict[tuple[str, str], dict[str, Any]] = {}
        for e in self.evaluations:
            k = (e.split, e.purpose or "")
            a = agg.setdefault(k, {"what": f"solver, {k[0]} split" + (f" ({k[1]})" if k[1] else ""),
                                   "evaluations": 0, "calls": 0, "tokens": 0, "wall_s": 0.0})
            a["evaluations"] += 1
            a["calls"] += e.solver_calls
            a["tokens"] += e.tokens
            a["wall_s"] += e.wall_s
        rows = list(agg.values())
        u = self.store.proposer_usage(self.id)
        rows.append({"what": "proposer", "evaluations": len(self.proposals), "calls": u.calls, "tokens": u.tokens,
                     "wall_s": u.latency_s})
        return rows


def taxonomy_groups(view: RunView) -> list[tuple[str, str, list[Any]]]:
    """The problem records the failure taxonomy is counted over, as ``(key, title, records)``: the seed's and the
    best harness's test runs (the best only when it is not the seed), and every evaluation of the run."""
    groups: list[tuple[str, str, list[Any]]] = []
    for who, hid in (("seed", view.seed_id), ("best", view.best_id)):
        ev = view.evaluation_of(hid, "test")
        if ev is not None and not (who == "best" and hid == view.seed_id):
            groups.append((f"{who}_test", f"{who} harness, test split", view.store.problem_records(ev.id)))
    groups.append(("all", "all evaluations of this run (every split)",
                   [r for e in view.evaluations for r in view.store.problem_records(e.id)]))
    return groups


def reward_series(store: Store) -> dict[str, dict[str, list[Point]]]:
    """Training rewards per training run id: each component's mean per step."""
    out: dict[str, dict[str, list[Point]]] = {}
    rows = store.rewards()
    keys = {"J": "J", "parsed": "parse rate", "produced": "produce rate",
            "completion_rate": "completion rate", "reward": "reward"}
    by_run: dict[str, dict[int, list[RewardRow]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by_run[r.run_id][r.step].append(r)
    for rid, steps in by_run.items():
        series: dict[str, list[Point]] = {label: [] for label in keys.values()}
        for step in sorted(steps):
            for col, label in keys.items():
                values = [getattr(r, col) for r in steps[step]]
                m = _mean([float(v) for v in values if v is not None])
                if m is not None:
                    series[label].append((step, m))
        out[rid] = series
    return out
