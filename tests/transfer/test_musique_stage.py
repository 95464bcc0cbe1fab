"""The transfer experiment's musique stage (``harnesslearn.transfer.musique``) on the CPU: the stage as the paper
sets it (a multi-hop retrieval seed, selection on F1, feedback and score from the train questions, the 200 dev
questions as test), run on the real MuSiQue files with scripted ``python:`` models and tiny splits: sequential
rounds, the best of as many independent proposals on the score split, the oracle picked on the test split."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from harnesslearn.errors import UserError
from harnesslearn.settings.groups import RuntimeSettings, Splits
from harnesslearn.transfer.settings import MusiqueStage, TransferSettings

QA = Path(os.environ.get("HARNESSLEARN_QA_DATA", Path(__file__).resolve().parents[3] / "shared" / "data" / "qa"))
needs_data = pytest.mark.skipif(not (QA / "musique_train_with_paragraphs.jsonl").is_file(),
                                reason="no shared MuSiQue data (HARNESSLEARN_QA_DATA)")

# The solver answers a passages prompt with every word of the passages it was shown, on one line (token F1 above
# 0 where the gold answer is among them, the lower the more passages; exact match 0), anything else with "1". The
# proposer cuts iterative_search's context to its first passages or adds more (by its sampling seed), so the
# candidates differ and score differently on F1; on the minimal seed it appends a digit to the answer.
MODELS = r'''
def _text(prompt):
    return prompt if isinstance(prompt, str) else "\n".join(m.get("content", "") for m in prompt)


def solver(prompt, **kw):
    text = _text(prompt)
    if "Passages:" not in text:
        return "1"
    context = text.split("Passages:", 1)[1].split("\n\nQuestion:", 1)[0]
    return "Answer: " + (" ".join(context.split()) or "unknown")


ANCHOR = '        context = "\\n\\n".join(passages[-12:])\n'


def proposer(prompt, seed=0, **kw):
    if "passages[-12:]" in _text(prompt):
        if seed % 2:
            line = "        passages += [d['title'] + ': ' + d['text'] for d in model.search(question, k=%d)][4:]\n"
        else:
            line = "        passages = passages[:%d]\n"
        return "<<<<<<< SEARCH\n" + ANCHOR + "=======\n" + line % (1 + seed % 5) + ANCHOR + ">>>>>>> REPLACE\n"
    return ("<<<<<<< SEARCH\n    return completion.strip()\n=======\n    return completion.strip() + '%d'\n"
            ">>>>>>> REPLACE\n" % (seed % 7))
'''


def stage_settings(tmp_path: Path, **musique: Any) -> TransferSettings:
    models = tmp_path / "models.py"
    models.write_text(MODELS)
    m = MusiqueStage(data=str(QA), arms=("base",), rounds=2, oracle_n=4, minutes=20.0,
                     splits=Splits(n_feedback=2, n_score=4, n_test=6), **musique)
    return TransferSettings(model="tiny", work=str(tmp_path / "w"), engine="hf", solver=f"python:{models}:solver",
                            runtime=RuntimeSettings(concurrency=4, spare_slots=1), musique=m)


def run_stage(s: TransferSettings, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The stage through ``musique.musique``, the base arm's proposer the scripted one (the real stage builds it
    from the model on the engine)."""
    from harnesslearn.models import load_model
    from harnesslearn.transfer import musique, stages

    @asynccontextmanager
    async def python_arms(s: TransferSettings, ret: Path, work: Path, names: tuple[str, ...], stage: str
                          ) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
        async with stages.runtime(s, stages.solver_backend(s)) as rt:
            yield rt, {"base": load_model(f"python:{Path(s.work).parent / 'models.py'}:proposer")}

    monkeypatch.setattr(musique, "arm_runtime", python_arms)
    work = Path(s.work)
    (work / "ret").mkdir(parents=True, exist_ok=True)
    return asyncio.run(musique.musique(s, work / "ret", work))


@needs_data
def test_the_select_file_gives_feedback_and_score_and_the_dev_file_the_whole_test_split() -> None:
    from harnesslearn.transfer.musique import load_musique

    task = load_musique(str(QA), "f1")
    assert task.metric == "f1" and "select=" in task.spec and "metric=f1" in task.spec
    dev = {json.loads(line)["id"] for line in (QA / "musique_dev_with_paragraphs.jsonl").read_text().splitlines()}
    train = {json.loads(line)["id"] for line in (QA / "musique_train_with_paragraphs.jsonl").read_text().splitlines()}
    split = {k: task.problems(k, 1000, 1234) for k in ("feedback", "score", "test")}
    ids = {k: {p.id for p in v} for k, v in split.items()}
    assert ids["test"] == dev and ids["feedback"] | ids["score"] == train and not ids["feedback"] & ids["score"]
    assert (len(ids["feedback"]), len(ids["score"]), len(ids["test"])) == (16, 134, 200)
    assert [p.id for p in task.problems("score", 5, 1234)] == [p.id for p in split["score"][:5]]  # deterministic
    assert [p.id for p in task.problems("score", 5, 7)] != [p.id for p in split["score"][:5]]  # shuffled by seed
    # each question searches its own file's union corpus: the dev200 file for test, the train paragraphs else
    dev_docs, train_docs = task.search_documents(split["test"][0]), task.search_documents(split["score"][0])
    assert len(dev_docs) == 3141 and train_docs is task.search_documents(split["feedback"][0])
    assert len(train_docs) == len({(d["title"], d["text"]) for p in split["score"] + split["feedback"]
                                   for d in p.metadata["paragraphs"]})
    assert task.score("Stanley", split["test"][0]).details.keys() == {"em", "f1"}


def test_the_oracle_needs_at_least_the_rounds_proposals_and_rows_are_keyed_by_arm_task_and_settings(
        tmp_path: Path) -> None:
    from harnesslearn.transfer.musique import key_fields, missing

    with pytest.raises(UserError, match="oracle_n"):
        MusiqueStage(rounds=10, oracle_n=9)
    m = MusiqueStage()
    assert (m.rounds, m.oracle_n, m.seed_harness, m.metric, m.rg_families) == (10, 80, "zoo:iterative_search",
                                                                                "f1", ())
    assert (m.splits.n_feedback, m.splits.n_score, m.splits.n_test) == (8, 128, 200)
    s = TransferSettings(musique=MusiqueStage(arms=("base", "rl"), rg_families=("gcd",)))
    ret = tmp_path / "ret"
    ret.mkdir()
    assert missing(s, ret) == 4
    rows = [key_fields(s, "base", "musique"), key_fields(s, "rl", "rg:gcd"),
            {"arm": "rl", "rounds": 10, "eval_seed": 1234, "n_score": 128, "n_test": 200}]  # an older row
    (ret / "musique_rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert missing(s, ret) == 2
    assert rows[1]["seed_harness"] == "minimal" and rows[1]["metric"] == "score"
    other = s.model_copy(update={"musique": s.musique.with_(rounds=3)})
    assert missing(other, ret) == 4  # rows of other settings are not taken for these


@needs_data
def test_the_stage_compares_sequential_rounds_with_best_of_n_and_the_test_split_oracle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harnesslearn.adapt import ORACLE_LABEL
    from harnesslearn.store import Store
    from harnesslearn.transfer.musique import missing, run_tag

    s = stage_settings(tmp_path, seed=2)  # a problem seed where the best of all 4 proposals is not of the first 2
    ret = Path(s.work) / "ret"
    status = run_stage(s, monkeypatch)
    assert status["state"] == "done" and status["rows"] == 1, status
    (r,) = [json.loads(line) for line in (ret / "musique_rows.jsonl").read_text().splitlines()]
    assert (r["arm"], r["task"], r["seed_harness"], r["metric"], r["rounds"], r["oracle_n"]) == (
        "base", "musique", "zoo:iterative_search", "f1", 2, 4)
    assert r["sizes"] == {"feedback": 2, "score": 4, "test": 6} and r["splits_from"]["test"] != r["splits_from"]["score"]
    assert all(r["picks"][k] for k in ("seed", "sequential", "independent", "oracle"))
    assert r["oracle_pick"]["label"] == ORACLE_LABEL and "TEST split" in r["oracle_pick"]["label"]
    assert r["oracle_pick"]["split"] == "test" and r["oracle_pick"]["n"] == 4
    for k in ("seed", "sequential", "independent", "oracle", "zoo"):
        assert r[k].keys() == {"em", "f1"} and r[k]["f1"]["lo"] <= r[k]["f1"]["mean"] <= r[k]["f1"]["hi"]
    # the oracle's pool holds the seed and the best-of-rounds pick: on test F1 it is at least both
    assert r["oracle"]["f1"]["mean"] >= max(r["independent"]["f1"]["mean"], r["seed"]["f1"]["mean"])
    for a, b in (("sequential", "independent"), ("sequential", "oracle"), ("independent", "seed")):
        key = f"{a}_minus_{b}" if b != "seed" else f"{a}_gain"
        assert abs(r[key]["f1"]["mean"] - (r[a]["f1"]["mean"] - r[b]["f1"]["mean"])) < 1e-9

    run = Path(s.work) / "musique_runs" / run_tag(s, "musique") / "base"
    with Store.open(run / "independent", create=False) as st:
        props = st.proposals("independent")
        spec = st.run("independent").config["task"]

        def score(hid: str) -> Any:
            ev = st.find_evaluation("independent", hid, spec, "score", 4, s.musique.seed)
            return st.load_evaluation(ev.id)

        seed_ev = score(r["picks"]["seed"])
        # J is F1: the mean of each problem's F1, not of its EM
        assert seed_ev.J == pytest.approx(sum(p.details["f1"] for p in seed_ev.problems) / 4)
        firsts = {p.harness_id: score(p.harness_id).J for p in props if p.idx < 2 and p.valid}
        assert firsts, "no valid proposal among the first two: nothing was compared"
        best = max([seed_ev.J, *firsts.values()])
        assert r["pick_score_J"]["independent"] == pytest.approx(best)
        assert score(r["picks"]["independent"]).J == pytest.approx(best)
        alls = [score(p.harness_id).J for p in props if p.valid]
        assert r["pick_score_J"]["independent_n"] == pytest.approx(max([seed_ev.J, *alls]))
        assert max(alls) > best
        assert r["independent_n"]["harness_id"] != r["picks"]["independent"]  # only the first 2 are matched calls
    assert len(props) == 4 and r["oracle_calls"]["proposer"] == 4
    assert r["sequential_calls"]["proposer"] == r["independent_calls"]["proposer"] == 2  # matched proposer calls
    assert r["independent_calls"]["proposals"] == 2
    for c in ("sequential_calls", "independent_calls", "oracle_calls"):
        assert r[c]["valid"] + sum(r[c]["invalid_reasons"].values()) == r[c]["proposals"]
    # the sequential run's trace: one entry per round, the best so far never worse on the score split
    trace = r["sequential_trace"]
    assert [t["round"] for t in trace] == [1, 2]
    assert trace[0]["best_score_J"] <= trace[1]["best_score_J"] and trace[1]["best_harness_id"] == r["picks"]["sequential"]
    assert trace[1]["test"]["f1"] == pytest.approx(r["sequential"]["f1"]["mean"])
    for t in (*trace, *r["independent_trace"]):  # each point of the rounds plot has its interval over problems
        assert t["test_ci"]["f1"]["lo"] <= t["test"]["f1"] <= t["test_ci"]["f1"]["hi"]
    assert [t["k"] for t in r["independent_trace"]] == [1, 2]
    assert r["independent_trace"][-1]["harness_id"] == r["picks"]["independent"]
    assert missing(s, ret) == 0
    status = run_stage(s, monkeypatch)  # resumed by rows: nothing left to do
    assert status["rows"] == 1 and status["jobs"] == 0


@needs_data
def test_reasoning_gym_families_get_rows_of_their_own_from_the_minimal_seed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = stage_settings(tmp_path, rg_families=("gcd",), rg_splits=Splits(n_feedback=2, n_score=3, n_test=4))
    s = s.model_copy(update={"musique": s.musique.with_(splits=Splits(n_feedback=1, n_score=2, n_test=2))})
    status = run_stage(s, monkeypatch)
    assert status["state"] == "done", status
    rows = {r["task"]: r for r in map(json.loads, (Path(s.work) / "ret" / "musique_rows.jsonl").read_text().splitlines())}
    assert sorted(rows) == ["musique", "rg:gcd"]
    g = rows["rg:gcd"]
    assert (g["seed_harness"], g["metric"], g["metrics"], g["sizes"]["test"]) == ("minimal", "score", ["score"], 4)
    assert g["seed"].keys() == {"score"} and len(g["sequential_trace"]) == 2
    assert g["zoo_pick"]["name"] != rows["musique"]["zoo_pick"]["name"]  # a reasoning zoo harness, not a QA one
    assert (Path(s.work) / "ret" / "musique_zoo_rg_gcd.json").is_file()
