"""The musique stage (the paper's MuSiQue result: EM 0.15 -> 0.27 in 10 sequential rounds from a multi-hop
retrieval pipeline, above an oracle best-of-80 of independent proposals), per proposer arm and task, at matched
proposer calls:

- sequential: ``rounds`` rounds of one proposal each (``adapt``, strategy sequential), each revising the best so
  far, kept on a strict score-split gain;
- independent: the best of the first ``rounds`` of ``oracle_n`` independent proposals from the seed (``adapt``,
  strategy independent, one prompt; candidate i is sampled with its own seed whatever N is, so these are exactly
  a ``rounds``-proposal independent run), picked on the score split by adapt's rule (the best, the first on ties,
  kept only if strictly above the seed);
- oracle: the best of the seed and all ``oracle_n`` proposals picked on the TEST split (adapt's oracle): an upper
  bound, labelled as such, never a method. Beside it ``independent_n``: the best of all ``oracle_n`` picked on the
  score split (a method, at ``oracle_n`` proposer calls).

The test split is read by nothing but the oracle's pick and the reporting. Tasks: MuSiQue (the seed
``musique.seed_harness``, default ``zoo:iterative_search``; J = ``musique.metric``, default token F1, EM reported
beside it; feedback and score from the 150 train questions, test: the 200 dev questions, ``tasks.qa`` with
``select=``), then each of ``musique.rg_families`` (the minimal seed; J = the family's own score). A row per
(arm, task) -> ``ret/musique_rows.jsonl`` as each finishes (a job cut by the deadline runs again next time; rows
are keyed by ``key_fields``, so rows of other settings are kept but never taken for these). Each row: the test
split's figures (mean and 95 % bootstrap interval over problems) of the seed, each pick and the best zoo harness
for the task (picked on the score split); the paired differences; the sequential run's per-round trace (the best
so far on the score split and its test figures) and the best-of-k trace of the independent proposals; proposer
and solver calls, proposals, valid ones and the invalid reasons of each comparison; each pick's nearest zoo file.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnesslearn.errors import InfraError, UserError
from harnesslearn.fsutil import atomic_write_text
from harnesslearn.settings.groups import Splits
from harnesslearn.stats import bootstrap_ci
from harnesslearn.transfer.deadline import run_until
from harnesslearn.transfer.settings import MusiqueStage, TransferSettings
from harnesslearn.transfer.stages import (
    SOLVER_NAME,
    SharedEvaluations,
    append_jsonl,
    arm_runtime,
    read_jsonl,
    state_of,
)

# the test questions, their corpus, and the questions of the feedback and score splits
FILES = ("musique_dev_with_paragraphs.jsonl", "musique_dev200_corpus.jsonl", "musique_train_with_paragraphs.jsonl")
MUSIQUE = "musique"
RUN_IDS = ("sequential", "independent")  # adapt's run ids, one per run directory here


def data_folder(data: str) -> Path:
    """The folder of ``FILES``: ``data``, else the shared QA data folder (UserError when a file is missing)."""
    from harnesslearn.tasks.qa import qa_data_dir

    folder = Path(data) if data else qa_data_dir()
    if folder is None or not all((folder / f).is_file() for f in FILES):
        raise UserError(f"musique.data: no folder with {', '.join(FILES)} "
                        f"({folder or 'set musique.data or $HARNESSLEARN_QA_DATA'})")
    return folder


def task_spec(data: str, metric: str = "f1") -> str:
    """The stage's MuSiQue task as a spec (its name in stores and rows): the 200 dev questions with their union
    corpus as the test split, the train questions as feedback and score (``select``), J = ``metric``."""
    folder = data_folder(data)
    return (f"musique:{folder / FILES[0]}?metric={metric}&corpus={folder / FILES[1]}"
            f"&select={folder / FILES[2]}")


def load_musique(data: str, metric: str = "f1") -> Any:
    """The task of ``task_spec``."""
    from harnesslearn.tasks import load_task

    return load_task(task_spec(data, metric))


@dataclass(frozen=True)
class Plan:
    """How one task of the stage runs."""

    name: str  # "musique" or "rg:FAMILY"
    splits: Splits
    seed_ref: str  # the seed harness, as zoo.resolve_harness takes it
    select: str  # the J of every pick: f1 | em | score
    metrics: tuple[str, ...]  # the per-problem figures reported: ("em", "f1") or ("score",)
    zoo_file: str  # where the task's zoo pick is kept, in ret/


def task_names(m: MusiqueStage) -> list[str]:
    return [MUSIQUE, *(f"rg:{f}" for f in m.rg_families)]


def plan(m: MusiqueStage, name: str) -> Plan:
    if name == MUSIQUE:
        return Plan(name, m.splits, m.seed_harness, m.metric, ("em", "f1"), "musique_zoo.json")
    family = name.removeprefix("rg:")
    return Plan(name, m.rg_splits, "minimal", "score", ("score",), f"musique_zoo_rg_{family}.json")


def key_fields(s: TransferSettings, arm: str, task: str) -> dict[str, Any]:
    """The fields that make a row the one these settings ask for (rows of other settings are kept, not reused)."""
    m, p = s.musique, plan(s.musique, task)
    return {"arm": arm, "task": task, "seed_harness": p.seed_ref, "metric": p.select, "rounds": m.rounds,
            "oracle_n": m.oracle_n, "eval_seed": m.seed, "n_feedback": p.splits.n_feedback,
            "n_score": p.splits.n_score, "n_test": p.splits.n_test}


KEY = ("arm", "task", "seed_harness", "metric", "rounds", "oracle_n", "eval_seed", "n_feedback", "n_score", "n_test")


def row_key(r: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(r.get(k) for k in KEY)


def missing(s: TransferSettings, ret: Path) -> int:
    """The (arm, task) rows of ``s.musique`` that ``ret/musique_rows.jsonl`` does not hold yet."""
    have = {row_key(r) for r in read_jsonl(ret / "musique_rows.jsonl")}
    return sum(row_key(key_fields(s, a, t)) not in have for t in task_names(s.musique) for a in s.musique.arms)


def load_stage_task(s: TransferSettings, name: str) -> Any:
    from harnesslearn.tasks import load_task

    return load_musique(s.musique.data, s.musique.metric) if name == MUSIQUE else load_task(name)


async def musique(s: TransferSettings, ret: Path, work: Path) -> dict[str, Any]:
    """Every (arm, task) of ``s.musique`` not in ``ret/musique_rows.jsonl`` yet, until the stage's deadline."""
    t0, m = time.time(), s.musique
    rows_path = ret / "musique_rows.jsonl"
    have = {row_key(r) for r in read_jsonl(rows_path)}
    todo = [(a, t) for t in task_names(m) for a in m.arms if row_key(key_fields(s, a, t)) not in have]
    tasks = {t: load_stage_task(s, t) for t in dict.fromkeys(t for _, t in todo)}  # one object per task: shared
    async with arm_runtime(s, ret, work, m.arms, "musique") as (rt, arms):
        job = Job(s, rt, tasks, SharedEvaluations(), work / "musique_runs", ret)
        n = await run_until([j for j in todo if j[0] in arms], t0 + m.minutes * 60,
                            lambda j: job.row(j[0], j[1], arms[j[0]]),
                            lambda j, r: append_jsonl(rows_path, [r]), label="musique")
    return {"state": state_of(n), **n.as_dict(), "rows": len(read_jsonl(rows_path))}


def fitted(task: Any, splits: Splits, seed: int) -> dict[str, int]:
    """Each split's size as adapt runs it (``adapt._fit_splits``: cut to what a finite task holds)."""
    from harnesslearn.tasks.base import FileTask

    asked = {"feedback": splits.n_feedback, "score": splits.n_score, "test": splits.n_test}
    if not isinstance(task, FileTask):
        return asked
    have = {k: len(task.problems(k, n, seed)) for k, n in asked.items()}
    return {k: have[k] if 0 < have[k] < asked[k] else asked[k] for k in asked}


def run_tag(s: TransferSettings, task: str) -> str:
    """The folder (under WORK/musique_runs) of a task's runs for these settings."""
    f = key_fields(s, "", task)
    seed = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(f["seed_harness"]))[-40:]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", task)
    return (f"{name}/{seed}-{f['metric']}-r{f['rounds']}-o{f['oracle_n']}-f{f['n_feedback']}-n{f['n_score']}"
            f"-t{f['n_test']}-s{f['eval_seed']}")


def per_problem(ev: Any, metrics: tuple[str, ...]) -> dict[str, list[float]]:
    """Each reported figure per problem of an evaluation (0 for a problem without a score)."""
    out: dict[str, list[float]] = {}
    for k in metrics:
        if k == "score":
            out[k] = [float(p.score) if p.score is not None else 0.0 for p in ev.problems]
        else:
            out[k] = [float(p.details.get(k, 0.0)) if p.score is not None else 0.0 for p in ev.problems]
    return out


def means(v: dict[str, list[float]]) -> dict[str, float | None]:
    return {k: (sum(x) / len(x) if x else None) for k, x in v.items()}


def calls(proposals: list[Any], evals: list[Any], proposer_calls: int | None = None) -> dict[str, Any]:
    """Proposer and solver calls (each distinct feedback or score evaluation once), proposals, valid ones and the
    invalid reasons of a comparison."""
    reasons: dict[str, int] = {}
    for p in proposals:
        if not p.valid:
            reasons[str(p.reason)] = reasons.get(str(p.reason), 0) + 1
    return {"proposer": len(proposals) if proposer_calls is None else proposer_calls,
            "solver": sum(e.solver_calls for e in evals), "proposals": len(proposals),
            "valid": sum(p.valid for p in proposals), "invalid_reasons": reasons}


class Job:
    """The (arm, task) rows of the stage (see the module docstring)."""

    def __init__(self, s: TransferSettings, rt: Any, tasks: dict[str, Any], shared: Any, runs: Path,
                 ret: Path) -> None:
        self.s, self.rt, self.tasks, self.shared, self.runs, self.ret = s, rt, tasks, shared, runs, ret

    async def row(self, arm: str, name: str, proposer: Any) -> dict[str, Any]:
        from harnesslearn import zoo
        from harnesslearn.adapt import adapt
        from harnesslearn.settings.adapt import AdaptSettings
        from harnesslearn.settings.groups import MemorySettings
        from harnesslearn.store import Store

        s, m, t = self.s, self.s.musique, time.time()
        p, task = plan(m, name), self.tasks[name]
        seed_h = zoo.resolve_harness(p.seed_ref, task, m.seed)
        seq_s = AdaptSettings(strategy="sequential", rounds=m.rounds, candidates=1, seed=m.seed, splits=p.splits,
                              budgets=s.budgets, proposer=s.proposer, memory=MemorySettings(enabled=False))
        ind_s = seq_s.with_(strategy="independent", rounds=m.oracle_n, oracle=True)
        run = self.runs / run_tag(s, name) / arm
        kw: dict[str, Any] = {"resume": True, "seed_harness": seed_h, "progress": False,
                              "executor": self.rt.sandbox, "evaluate_fn": self.shared}
        async with asyncio.TaskGroup() as tg:  # the two runs at once; one failing cancels the other
            seq_t = tg.create_task(adapt(task, self.rt.solver, proposer, seq_s, run_dir=run / "sequential", **kw))
            ind_t = tg.create_task(adapt(task, self.rt.solver, proposer, ind_s, run_dir=run / "independent", **kw))
        seq, ind = seq_t.result(), ind_t.result()
        sizes = fitted(task, p.splits, m.seed)

        with Store.open(run / "sequential", create=False) as sst, Store.open(run / "independent", create=False) as ist:
            stores = {"sequential": sst, "independent": ist}
            harness: dict[str, Any] = {}

            def load(hid: str) -> Any:
                if hid not in harness:
                    harness[hid] = (sst if sst.harness(hid) is not None else ist).load_harness(hid)
                return harness[hid]

            def stored(hid: str, split: str) -> Any:
                """The evaluation adapt made of ``hid`` on ``split`` (None where it made none)."""
                for rid, st in stores.items():
                    e = st.find_evaluation(rid, hid, task.spec, split, sizes[split], m.seed)
                    if e is not None:
                        return st.load_evaluation(e.id)
                return None

            async def evaluation(h: Any, split: str) -> Any:
                ev = stored(h.id, split)
                if ev is None:  # reporting only (a round's best, the zoo pick): through the shared evaluations
                    ev = await self.shared(h, task, split, sizes[split], m.seed, self.rt.sandbox, s.budgets)
                    if ev.infra_failures:
                        raise InfraError(f"{h.name or h.short_id}: {ev.infra_failures} infrastructure failure(s) on "
                                         f"the {split} split")
                return ev

            def score_J(hid: str) -> float | None:
                ev = stored(hid, "score")
                return None if ev is None else ev.J  # type: ignore[no-any-return]

            # the best of the first `rounds` independent proposals on the score split: adapt's rule
            from harnesslearn.evaluation import improves
            from harnesslearn.propose.rounds import best_of

            props = sorted(ist.proposals("independent"), key=lambda r: r.idx)
            first = [r for r in props if r.idx < m.rounds]
            seed_J = score_J(seed_h.id)

            def best_of_k(k: int) -> tuple[str, float | None]:
                top = best_of([(score_J(r.harness_id), r.harness_id) for r in props if r.idx < k and r.valid and r.harness_id])
                return (top[1], top[0]) if top is not None and improves(top[0], seed_J) else (seed_h.id, seed_J)

            ind_id, ind_J = best_of_k(len(first))
            orc: dict[str, Any] = dict(ind.oracle or {})
            picks = {"seed": seed_h.id, "sequential": seq.best_harness_id, "independent": ind_id,
                     "oracle": orc.get("harness_id") or seed_h.id}
            zoo_name, zoo_h, zoo_score = await zoo_pick(s, self.rt, task, self.shared, self.ret / p.zoo_file,
                                                        n_score=sizes["score"], seed=m.seed)
            hs = {k: load(h) for k, h in picks.items()}
            hs["independent_n"] = load(ind.best_harness_id)
            hs["zoo"] = zoo_h
            per = {k: per_problem(await evaluation(h, "test"), p.metrics) for k, h in hs.items()}
            first_ids = {r.harness_id for r in first if r.harness_id} | {seed_h.id}
            ind_evals = [e for e in ist.evaluations("independent") if e.split in ("feedback", "score")]

            out: dict[str, Any] = {
                **key_fields(s, arm, name), "proposer": f"{s.model}+{arm}", "solver": s.solver or SOLVER_NAME,
                "task_spec": task.spec, "seed_harness_id": seed_h.id, "metrics": list(p.metrics), "sizes": sizes,
                "splits_from": ({"feedback": FILES[2], "score": FILES[2], "test": FILES[0]} if name == MUSIQUE
                                else {k: name for k in ("feedback", "score", "test")}),
                "picks": picks,
                "pick_score_J": {"seed": seed_J, "sequential": seq.score_J, "independent": ind_J,
                                 "independent_n": ind.score_J, "oracle": score_J(picks["oracle"]), "zoo": zoo_score},
                "oracle_pick": {"label": orc.get("label"), "split": "test", "n": orc.get("n"),
                                "harness_id": picks["oracle"], "test_J": orc.get("test_J")},
                "independent_n": {"n": m.oracle_n, "harness_id": ind.best_harness_id, "split": "score",
                                  **{k: bootstrap_ci(v) for k, v in per["independent_n"].items()}},
                "zoo_pick": {"name": zoo_name, "harness_id": zoo_h.id, "score_J": zoo_score},
                "nearest_zoo": {k: zoo.near(hs[k].source) for k in picks},
            }
            for k in ("seed", "sequential", "independent", "oracle", "zoo"):
                out[k] = {x: bootstrap_ci(v) for x, v in per[k].items()}
            for a, b in (("sequential", "seed"), ("independent", "seed"), ("independent_n", "seed"), ("oracle", "seed"),
                         ("zoo", "seed"), ("sequential", "independent"), ("sequential", "oracle"),
                         ("sequential", "zoo")):  # paired over the same test problems
                key = f"{a}_gain" if b == "seed" else f"{a}_minus_{b}"
                out[key] = {x: bootstrap_ci([u - w for u, w in zip(per[a][x], per[b][x], strict=True)])
                            for x in p.metrics}
            sel = p.select
            trace: list[dict[str, Any]] = []
            for r in seq.rounds:  # the sequential run's best after each round, on score and on test
                v = per_problem(await evaluation(load(r["best_harness_id"]), "test"), p.metrics)
                trace.append({"round": r["round"], "best_harness_id": r["best_harness_id"],
                              "best_score_J": r["best_score_J"], "improved": r["improved"],
                              "proposals": r["proposals"], "valid": r["valid"], "test": means(v),
                              "test_ci": {k: bootstrap_ci(x) for k, x in v.items()}})
            out["sequential_trace"] = trace
            seed_test, final_test = means(per["seed"])[sel], means(per["sequential"])[sel]
            r1 = trace[0]["test"][sel] if trace else None
            gain = None if seed_test is None or final_test is None else final_test - seed_test
            out["round1_share"] = (None if r1 is None or seed_test is None or not gain
                                   else round((r1 - seed_test) / gain, 4))
            ind_trace = []
            for n_first in range(1, len(first) + 1):  # the best of the first n independent proposals (score)
                hid, J = best_of_k(n_first)
                v = per_problem(await evaluation(load(hid), "test"), p.metrics)
                ind_trace.append({"k": n_first, "harness_id": hid, "score_J": J, "test": means(v),
                                  "test_ci": {k: bootstrap_ci(x) for k, x in v.items()}})
            out["independent_trace"] = ind_trace
            out["sequential_calls"] = {**calls(sst.proposals("sequential"), [
                e for e in sst.evaluations("sequential") if e.split in ("feedback", "score")], seq.proposer_calls),
                "solver": seq.solver_calls}
            out["independent_calls"] = calls(first, [e for e in ind_evals if e.harness_id in first_ids])
            out["oracle_calls"] = {**calls(props, ind_evals, ind.proposer_calls), "solver": ind.solver_calls,
                                   "test_solver": ind.test_solver_calls}
        out["wall_s"] = round(time.time() - t, 1)
        return out


async def zoo_pick(s: TransferSettings, rt: Any, task: Any, shared: Any, path: Path, *, n_score: int | None = None,
                   seed: int | None = None) -> tuple[str, Any, float | None]:
    """The zoo harness for the task with the best J on the stage's score split (``n_score`` problems, default
    ``musique.splits.n_score``; the first on ties), as (name, harness, score J): what the proposers are set against.
    Made once and kept in ``path`` (in ret/: arms that finish in later stretches are set against the same pick); its
    evaluations go through ``shared``. An evaluation with infrastructure failures makes no pick (InfraError: the arm
    fails and runs again)."""
    from harnesslearn import zoo

    m = s.musique
    n = m.splits.n_score if n_score is None else n_score
    seed = m.seed if seed is None else seed
    key = {"task": task.spec, "eval_seed": seed, "n_score": n}
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        name = saved.get("name")
        if {k: saved.get(k) for k in key} == key and name in zoo.names(task):
            h = zoo.build(name, task, seed)
            if h.id == saved.get("harness_id"):
                return name, h, saved.get("score_J")

    async def score_J(h: Any) -> float | None:
        ev = await shared(h, task, "score", n, seed, rt.sandbox, s.budgets)
        if ev.infra_failures:
            raise InfraError(f"{h.name}: {ev.infra_failures} infrastructure failure(s) on the score split, no pick")
        return ev.J  # type: ignore[no-any-return]

    hs, js, top = await zoo.score_all(task, seed, score_J)
    name = top if top is not None else next(iter(hs))
    atomic_write_text(path, json.dumps({**key, "name": name, "harness_id": hs[name].id, "score_J": js[name],
                                        "candidates_score_J": js}, indent=1) + "\n")
    return name, hs[name], js[name]
