"""Expert-iteration SFT data (training/zoo_sft.py, the transfer recipe's ``sftdata.source`` self): the proposer's
own revisions of a parent drawn from a pool, kept by the one keep rule (training/keep.py) only when they beat the
parent by the margin and copy no known source; no model: scripted ``python:`` models (tests/revising_models.py)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import revising_models as rm

from harnesslearn.harness import Harness, load_harness
from harnesslearn.propose.rounds import candidate_seed
from harnesslearn.training.keep import KeepRule

TESTS = Path(__file__).resolve().parents[1]
MODEL = f"python:{TESTS / 'revising_models.py'}"


def six_task(tmp_path: Path) -> Any:
    from harnesslearn.tasks import load_task

    p = tmp_path / "six.jsonl"
    p.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} * 0 + 6?", "answer": "6"}) + "\n"
                         for i in range(60)))
    return load_task(f"jsonl:{p}?scorer=exact")


def self_rows(tmp_path: Path, rule: KeepRule, samples: int = 8, parent: Harness | None = None,
              parent_name: str = "minimal") -> tuple[list[dict], Counter[str]]:
    from harnesslearn.models import load_model
    from harnesslearn.models.common import render_messages
    from harnesslearn.sandbox import Executor, ExecutorConfig
    from harnesslearn.sandbox.records import Budgets
    from harnesslearn.settings.groups import TrainSplits
    from harnesslearn.training.zoo_sft import ZooSFTSettings, context_rows

    model = load_model(f"{MODEL}:six_and_revise")
    settings = ZooSFTSettings(splits=TrainSplits(n_feedback=2, n_score=3), budgets=Budgets(timeout_s=30),
                              zoo_names=(), samples=samples, rule=rule)

    async def go() -> tuple[list[dict], Counter[str]]:
        async with Executor(model, ExecutorConfig(concurrency=2)) as ex:
            return await context_rows(task, parent or load_harness("minimal"), 5, ex, render_messages, settings,
                                      proposer=model, parent_name=parent_name)

    task = six_task(tmp_path)
    return asyncio.run(go())


def expected_kinds(samples: int) -> Counter[str]:
    return Counter(rm.kind_of(candidate_seed(5, 0, i)) for i in range(samples))


def test_self_rows_keep_own_gains_and_drop_copies_of_known_sources(tmp_path: Path) -> None:
    """Of the proposer's samples: its own revision that scores (own; and its own program loop, not a known
    source's) is kept with source self, its parent and its gain; the zoo file it pasted is dropped as a copy; the
    one that does not beat the parent is counted as not improved. No zoo candidate is tried."""
    kinds = expected_kinds(8)
    assert set(kinds) == set(rm.KINDS)  # the seeds cover every kind
    rows, counts = self_rows(tmp_path, KeepRule(drop_copies=True))
    assert counts["self:proposed"] == 8 and not any(k.startswith("zoo:") for k in counts)
    assert counts["self:copy"] == kinds["copy"] and counts["self:not_improved"] == kinds["zero"]
    assert counts["self:kept"] == len(rows) == kinds["own"] + kinds["loop"], counts
    for r in rows:
        p = r["provenance"]
        assert (p["source"], p["parent"], p["J_before"], p["J_after"], p["gain"]) == ("self", "minimal", 0.0, 1.0, 1.0)
        assert p["candidate"].startswith("self:") and not p["known"]["copy"]
        assert p["solver_code"] == ("model.python(body)" in p["harness_source"])  # the loop; else the own regex
        assert p["solver_code"] or "re.findall" in p["harness_source"]
        assert p["kind"] == ("interpreter_loop" if p["solver_code"] else "answer_extraction")


def test_self_rows_hold_out_the_loop_and_keep_the_margin(tmp_path: Path) -> None:
    """The held-out-pattern control drops the solver-program revision ("loop"); a margin of 1.0 keeps nothing
    (a gain of 1.0 is not more than it) and counts the rest as not improved."""
    kinds = expected_kinds(8)
    rows, counts = self_rows(tmp_path, KeepRule(drop_copies=True, hold_out_loop=True))
    assert counts["self:loop"] == kinds["loop"] and counts["self:kept"] == len(rows) == kinds["own"]
    assert all(not r["provenance"]["solver_code"] for r in rows)
    rows, counts = self_rows(tmp_path, KeepRule(drop_copies=True, margin=1.0))
    assert not rows and counts["self:not_improved"] == kinds["zero"] + kinds["own"] + kinds["loop"]


def test_keep_rule_is_the_one_rule_of_every_generator() -> None:
    """verdict: more than the margin above the parent's J; a J that could not be computed is an infrastructure
    failure, not a loss; static: the screen first, then loop and copy only when asked."""
    from harnesslearn import zoo

    rule = KeepRule(margin=0.1)
    assert rule.verdict(0.5, 0.3) == "kept" and rule.verdict(0.4, 0.3) == "not_improved"
    assert rule.verdict(None, 0.3) == rule.verdict(0.9, None) == "infra_error"
    assert KeepRule().verdict(0.3, 0.3) == "not_improved"  # margin 0: strictly better (evaluation.improves)
    loop = zoo.source("interpreter_loop")
    assert KeepRule().static(loop) == [] and KeepRule(drop_copies=True).static(loop) == ["copy"]
    assert KeepRule(drop_copies=True, hold_out_loop=True).static(loop) == ["loop", "copy"]
    assert KeepRule(hold_out_loop=True).static(rm.OWN) == []
    assert KeepRule(drop_copies=True).static("import os\n" + rm.OWN) == ["screen:forbidden_import"]


def test_parent_pool_and_draw() -> None:
    """The pool: the seed, the zoo harnesses built for the task, the family's winners (each once); the held-out
    control leaves out every parent that runs solver-written code; the draw is fixed by the context's seed."""
    from harnesslearn.tasks import load_task
    from harnesslearn.training.zoo_sft import draw_parent, parent_pool

    task, seed_h = load_task("rg:gcd"), load_harness("minimal")
    win = {"family": "gcd", "name": "win:abc", "source": rm.GCD}
    other = {"family": "maze", "name": "win:def", "source": rm.OWN}
    pool = parent_pool(task, 3, seed_h, ("seed", "zoo", "winners"), [win, win, other])
    names = [n for n, _ in pool]
    assert names[0] == "minimal" and names[-1] == "win:abc" and "zoo:interpreter_loop" in names
    assert names.count("win:abc") == 1 and "win:def" not in names
    held = [n for n, _ in parent_pool(task, 3, seed_h, ("seed", "zoo", "winners"), [win], hold_out_loop=True)]
    assert held == [n for n in names if n != "zoo:interpreter_loop"]
    assert [n for n, _ in parent_pool(task, 3, seed_h, ("winners",), [])] == []
    assert draw_parent(pool, 7) == draw_parent(pool, 7)
    assert len({draw_parent(pool, s)[0] for s in range(40)}) == len(pool)  # every parent can be drawn
    with pytest.raises(ValueError, match="empty"):
        draw_parent([], 1)


def test_summary_reports_yield_kinds_distinct_texts_and_gain() -> None:
    from harnesslearn.training.zoo_sft import summarise_rows

    def row(cand: str, completion: str, gain: float, parent: str = "minimal") -> dict:
        return {"messages": [{"role": "user", "content": "p"}, {"role": "assistant", "content": completion}],
                "provenance": {"source": cand.split(":")[0], "candidate": cand, "family": "gcd", "parent": parent,
                               "J_before": 0.25, "J_after": 0.25 + gain, "kind": "other", "harness_id": completion,
                               "known": {"copy": False}, "solver_code": cand == "self:1"}}

    rows = [row("self:0", "a", 0.5), row("self:1", "b", 0.25, "zoo:few_shot"), row("self:2", "a", 0.75)]
    s = summarise_rows(rows, Counter({"self:proposed": 12, "self:kept": 3}), 4, per_context=[2, 1, 0, 0])
    assert (s["kept"], s["distinct_completions"], s["distinct_harnesses"], s["mean_gain"]) == (3, 2, 2, 0.5)
    assert s["per_source"] == {"self": 3} and s["per_parent"] == {"minimal": 2, "zoo:few_shot": 1}
    assert s["self_yield"] == 0.25 and s["copies"] == 0 and s["solver_code_share"] == round(1 / 3, 4)
    assert s["yield_per_context"] == {"mean": 0.75, "with_rows": 2, "histogram": {0: 2, 1: 1, 2: 1}}
    old = {"messages": rows[0]["messages"], "provenance": {"source": "zoo:interpreter_loop", "family": "gcd",
                                                           "kind": "interpreter_loop", "harness_id": "h"}}
    s = summarise_rows([old], Counter(), 1)  # a row written before source/candidate were split
    assert s["per_source"] == {"zoo": 1} and s["per_candidate"] == {"zoo:interpreter_loop": 1}


def test_the_sftdata_stage_of_source_self_draws_parents_from_the_pool_and_records_winners(tmp_path: Path) -> None:
    """The transfer recipe's sftdata stage with ``source self`` and a pool of winners only, on rg:gcd (one
    context at a time): the first context finds the pool empty and revises the seed, its kept revision (the gcd
    computed in Python) becomes a winner in ret/sftdata_pool.jsonl, the later contexts draw that winner (which
    the same program cannot beat: nothing kept); every row and context records its source and parent, the
    summary reports yield, gain and distinct texts; the same ret is refused to the zoo arm (two arms' rows would
    mix)."""
    pytest.importorskip("transformers")
    from harnesslearn.errors import UserError
    from harnesslearn.sandbox.records import Budgets
    from harnesslearn.settings.groups import ProposerSettings, RuntimeSettings, Sampling, TrainSplits
    from harnesslearn.transfer.settings import SFTDataStage, TransferSettings
    from harnesslearn.transfer.smoke import tiny_qwen2
    from harnesslearn.transfer.stages import read_jsonl, sftdata

    model = tiny_qwen2(tmp_path / "model")  # only its tokenizer is used: the chat template of the rows
    s = TransferSettings(
        model=str(model), work=str(tmp_path), engine="hf", solver=f"{MODEL}:gcd_and_revise", cpu=True,
        families=("gcd",), runtime=RuntimeSettings(concurrency=4, spare_slots=1), budgets=Budgets(timeout_s=20.0),
        proposer=ProposerSettings(n_traces=1, sampling=Sampling(temperature=0.8, max_tokens=400)),
        sftdata=SFTDataStage(source="self", contexts=3, splits=TrainSplits(n_feedback=2, n_score=4),
                             self_samples=2, in_flight=1, parents=("winners",)))
    ret = tmp_path / "ret"
    status = asyncio.run(sftdata(s, ret))
    assert status["state"] == "done" and status["kept"] >= 1, status
    jobs = read_jsonl(ret / "sftdata_jobs.jsonl")
    assert [j["source"] for j in jobs] == ["self"] * 3 and jobs[0]["parent"] == "minimal"
    assert all(j["parent"].startswith("win:") and j["kept"] == 0 for j in jobs[1:]), jobs
    rows = read_jsonl(ret / "sft.jsonl")
    assert rows and all(r["provenance"]["source"] == "self" for r in rows) and jobs[0]["kept"] == len(rows)
    assert rows[0]["provenance"]["parent"] == "minimal" and rows[0]["provenance"]["gain"] > 0
    pool = read_jsonl(ret / "sftdata_pool.jsonl")
    assert [w["harness_id"] for w in pool] == [r["provenance"]["harness_id"] for r in rows]
    assert all(w["name"] == f"win:{w['harness_id'][:12]}" and "math.gcd" in w["source"] for w in pool)
    summary = json.loads((ret / "sftdata.json").read_text())
    assert summary["source"] == "self" and summary["parents"] == ["winners"] and summary["margin"] == 0.0
    assert summary["yield_per_context"]["mean"] == round(len(rows) / 3, 4) and summary["mean_gain"] > 0
    assert summary["distinct_harnesses"] >= 1 and summary["per_source"] == {"self": len(rows)}
    assert summary["self_proposed"] == 6 and not any(k.startswith("zoo:") for k in summary["counts"])
    assert summary["yield_per_parent"] == {"minimal": {"contexts": 1, "kept": len(rows)}, "win": {"contexts": 2, "kept": 0}}
    with pytest.raises(UserError, match="holds contexts of source self, not zoo"):
        asyncio.run(sftdata(s.with_(**{"sftdata.source": "zoo"}), ret))


def test_loop_rows_are_those_that_run_solver_written_code(tmp_path: Path) -> None:
    """zoo_sft.loop_row: by the row's harness where it is recorded, else (rows of stretch 4, all revising the seed)
    by its kind; the sft stage of the control trains without them (all held out here: skipped, and said why)."""
    from harnesslearn import zoo
    from harnesslearn.training.zoo_sft import loop_row
    from harnesslearn.transfer.settings import TransferSettings
    from harnesslearn.transfer.stages import sft, write_jsonl

    def row(**prov: Any) -> dict:
        return {"messages": [{"role": "user", "content": "p"}, {"role": "assistant", "content": "c"}],
                "provenance": prov}

    assert loop_row(row(harness_source=zoo.source("interpreter_loop"), kind="other"))
    assert not loop_row(row(harness_source=rm.OWN, kind="interpreter_loop"))
    assert loop_row(row(kind="interpreter_loop")) and not loop_row(row(kind="sampling_voting"))
    ret = tmp_path / "ret"
    write_jsonl(ret / "sft.jsonl", [row(harness_source=rm.LOOP), row(kind="interpreter_loop")])
    s = TransferSettings(model="m").with_(**{"sft.hold_out_loop": True})
    assert sft(s, ret, tmp_path / "work") == {
        "state": "skipped", "reason": "the sftdata stage kept no rows (2 held out: they run solver-written code)"}
