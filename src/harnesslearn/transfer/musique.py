"""The musique stage (the paper's MuSiQue result: EM 0.15 -> 0.27 in 10 sequential rounds, above an
oracle best-of-N): for each proposer arm, ``adapt`` with ``strategy="compare"`` and ``oracle=True`` from
the task's default seed (``zoo.default_seed``), ``rounds`` sequential rounds of one proposal against
``rounds`` independent proposals from the seed at the same proposer calls. Each arm's row holds the test
split's EM and F1 (mean and 95 % bootstrap interval over problems) of the seed, the sequential pick, the
independent pick (both picked on the score split) and the oracle (picked on the test split: an upper
bound, not a method), the paired gains over the seed, and the proposals' validity and calls. Beside them, the
best zoo harness for question answering (picked on the score split, as the eval stage's zoo arm) with the
paired difference of the sequential pick from it, and each pick's nearest zoo harness (difflib ratio): does
the proposer go beyond what it was shown? -> ``ret/musique_rows.jsonl``, a line per finished arm (an arm cut by
the deadline runs again next time).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from harnesslearn.errors import InfraError, UserError
from harnesslearn.fsutil import atomic_write_text
from harnesslearn.stats import bootstrap_ci
from harnesslearn.transfer.deadline import run_until
from harnesslearn.transfer.settings import TransferSettings
from harnesslearn.transfer.stages import SharedEvaluations, append_jsonl, arm_runtime, read_jsonl, state_of

FILES = ("musique_dev_with_paragraphs.jsonl", "musique_dev200_corpus.jsonl")


def task_spec(data: str) -> str:
    """The MuSiQue task on the 200 dev questions with the union corpus of their paragraphs."""
    from harnesslearn.tasks.qa import qa_data_dir

    folder = Path(data) if data else qa_data_dir()
    if folder is None or not all((folder / f).is_file() for f in FILES):
        raise UserError(f"musique.data: no folder with {' and '.join(FILES)} "
                        f"({folder or 'set musique.data or $HARNESSLEARN_QA_DATA'})")
    return f"musique:{folder / FILES[0]}?corpus={folder / FILES[1]}"


def missing(s: TransferSettings, ret: Path) -> int:
    """The arms of ``s.musique`` that ``ret/musique_rows.jsonl`` does not hold yet."""
    have = {r["arm"] for r in read_jsonl(ret / "musique_rows.jsonl")}
    return sum(a not in have for a in s.musique.arms)


async def musique(s: TransferSettings, ret: Path, work: Path) -> dict[str, Any]:
    """Every arm of ``s.musique.arms`` not in ``ret/musique_rows.jsonl`` yet, until the stage's deadline."""
    from harnesslearn.tasks import load_task

    t0, m = time.time(), s.musique
    task = load_task(task_spec(m.data))
    rows_path = ret / "musique_rows.jsonl"
    have = {r["arm"] for r in read_jsonl(rows_path)}
    async with arm_runtime(s, ret, work, m.arms, "musique") as (rt, arms):
        shared = SharedEvaluations()
        n = await run_until([a for a in m.arms if a in arms and a not in have], t0 + m.minutes * 60,
                            lambda arm: row(s, rt, task, arm, arms[arm], shared, work / "musique_runs" / arm, ret),
                            lambda arm, r: append_jsonl(rows_path, [r]), label="musique")
    return {"state": state_of(n), **n.as_dict(), "rows": len(read_jsonl(rows_path))}


async def row(s: TransferSettings, rt: Any, task: Any, arm: str, proposer: Any, shared: Any,
              run_dir: Path, ret: Path) -> dict[str, Any]:
    """One arm: the compare run, then EM and F1 on the test split of each pick and of the best zoo harness (the
    evaluations adapt made, shared: nothing is run twice)."""
    from harnesslearn import zoo
    from harnesslearn.adapt import adapt
    from harnesslearn.settings.adapt import AdaptSettings
    from harnesslearn.store import Store

    m, t = s.musique, time.time()
    settings = AdaptSettings(strategy="compare", rounds=m.rounds, candidates=1, seed=m.seed, oracle=True,
                             splits=m.splits, budgets=s.budgets, proposer=s.proposer)
    res = await adapt(task, rt.solver, proposer, settings, run_dir=run_dir, resume=True, progress=False,
                      executor=rt.sandbox, evaluate_fn=shared)
    c = res.compare or {}
    seq, ind = c.get("sequential", {}), c.get("independent", {})
    picks = {"seed": res.seed_harness_id, "sequential": seq.get("best_harness_id"),
             "independent": ind.get("best_harness_id"), "oracle": (ind.get("oracle") or {}).get("harness_id")}
    with Store.open(run_dir, create=False) as st:
        harnesses = {k: st.load_harness(h) for k, h in picks.items() if h}
    zoo_name, zoo_h, zoo_score = await zoo_pick(s, rt, task, shared, ret / "musique_zoo.json")
    harnesses["zoo"] = zoo_h
    per: dict[str, dict[str, list[float]]] = {}
    for name, h in harnesses.items():
        ev = await shared(h, task, "test", m.splits.n_test, m.seed, rt.sandbox, s.budgets)
        per[name] = {k: [float(p.details.get(k, 0.0)) if p.score is not None else 0.0 for p in ev.problems]
                     for k in ("em", "f1")}
    out: dict[str, Any] = {"arm": arm, "proposer": f"{s.model}+{arm}", "rounds": m.rounds, "eval_seed": m.seed,
                           "n_score": m.splits.n_score, "n_test": m.splits.n_test, "picks": picks,
                           "zoo_pick": {"name": zoo_name, "harness_id": zoo_h.id, "score_J": zoo_score},
                           "nearest_zoo": {name: zoo.near(h.source) for name, h in harnesses.items() if name != "zoo"}}
    for name, v in per.items():
        out[name] = {k: bootstrap_ci(v[k]) for k in ("em", "f1")}
    for name, base in (("sequential", "seed"), ("independent", "seed"), ("oracle", "seed"), ("zoo", "seed"),
                       ("sequential", "zoo")):
        if name in per:  # paired over the same test problems
            key = f"{name}_gain" if base == "seed" else f"{name}_minus_{base}"
            out[key] = {k: bootstrap_ci([a - b for a, b in zip(per[name][k], per[base][k], strict=True)])
                        for k in ("em", "f1")}
    for name, r in (("sequential", seq), ("independent", ind)):
        out[f"{name}_calls"] = {"proposer": r.get("proposer_calls"), "solver": r.get("solver_calls"),
                                "proposals": r.get("proposals"), "valid": r.get("valid_proposals"),
                                "invalid_reasons": r.get("invalid_reasons", {})}
    out["wall_s"] = round(time.time() - t, 1)
    return out


async def zoo_pick(s: TransferSettings, rt: Any, task: Any, shared: Any, path: Path) -> tuple[str, Any, float | None]:
    """The zoo harness for question answering with the best J on the stage's score split (the first on ties),
    as (name, harness, score J): what the proposers are set against. Made once and kept in ``path`` (in ret/:
    arms that finish in later stretches are set against the same pick); its evaluations go through ``shared``.
    An evaluation with infrastructure failures makes no pick (InfraError: the arm fails and runs again)."""
    from harnesslearn import zoo

    m = s.musique
    key = {"task": task.spec, "eval_seed": m.seed, "n_score": m.splits.n_score}
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        name = saved.get("name")
        if {k: saved.get(k) for k in key} == key and name in zoo.names(task):
            h = zoo.build(name, task, m.seed)
            if h.id == saved.get("harness_id"):
                return name, h, saved.get("score_J")

    async def score_J(h: Any) -> float | None:
        ev = await shared(h, task, "score", m.splits.n_score, m.seed, rt.sandbox, s.budgets)
        if ev.infra_failures:
            raise InfraError(f"{h.name}: {ev.infra_failures} infrastructure failure(s) on the score split, no pick")
        return ev.J  # type: ignore[no-any-return]

    hs, js, top = await zoo.score_all(task, m.seed, score_J)
    name = top if top is not None else next(iter(hs))
    atomic_write_text(path, json.dumps({**key, "name": name, "harness_id": hs[name].id, "score_J": js[name],
                                        "candidates_score_J": js}, indent=1) + "\n")
    return name, hs[name], js[name]
