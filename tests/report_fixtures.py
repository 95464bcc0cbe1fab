"""Run directories for the report tests, written through the store's own write API.

The content is hostile on purpose: questions, answers, proposer text and a harness source carry
HTML/script markup, so the tests can check that nothing of it reaches the page unescaped.
"""

from __future__ import annotations

from pathlib import Path

from harnesslearn.evaluation import Evaluation, ProblemResult
from harnesslearn.harness import Harness, normalise, seed_source
from harnesslearn.propose.edits import EditResult
from harnesslearn.sandbox.records import CallRecord, RunRecord, Status
from harnesslearn.store import Store

EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'

SEED = normalise(seed_source("minimal"))
H1 = SEED.replace("max_tokens=64", "max_tokens=128")
H2 = H1.replace(
    "    return completion.strip()",
    f"    note = {EVIL!r}\n    return completion.strip().split()[-1] if completion.strip() else ''",
)


def _eval(h: Harness, split: str, scores: list[float], *, family: str = "basic_arithmetic") -> Evaluation:
    probs = []
    for i, s in enumerate(scores):
        status = Status.OK if s >= 0 else Status.HARNESS_ERROR
        score = max(s, 0.0)
        rec = RunRecord(
            problem_id=f"{split}-{i}",
            status=status,
            answer=None if status != Status.OK else ("7" if score == 1 else f"<b>{i}</b>"),
            error=None if status == Status.OK else "Traceback: ValueError <oops>",
            calls=[CallRecord(kind="model", request={"prompt": "q"}, response=f"the answer is 7 {EVIL}",
                              prompt_tokens=10, completion_tokens=5, latency_s=0.01)],
            wall_s=0.1,
        )
        probs.append(ProblemResult(
            id=rec.problem_id, question=f"What is 3+4? (#{i}) {EVIL}", gold="7", score=score, details={},
            status=str(status), answer=rec.answer, calls=1, tokens=15, wall_s=0.1, error=rec.error, record=rec,
        ))
    scored = [p.score for p in probs if p.score is not None]
    return Evaluation(
        harness_id=h.id, task=f"rg:{family}", split=split, n=len(probs), seed=0, J=sum(scored) / len(scored),
        completion_rate=sum(p.status == "ok" for p in probs) / len(probs), solver_calls=len(probs),
        tokens=15 * len(probs), wall_s=0.1 * len(probs), problems=probs,
    )


def _taxonomy(ev: Evaluation) -> list[str | None]:
    return [None if p.score == 1 else ("harness_error" if p.status != "ok" else "extraction") for p in ev.problems]


def _save(store: Store, run_id: str, ev: Evaluation, rnd: int, purpose: str) -> None:
    fams = ["basic_arithmetic" if i % 2 else "chain_sum" for i in range(len(ev.problems))]
    store.save_evaluation(run_id, ev, round=rnd, purpose=purpose, taxonomy=_taxonomy(ev), families=fams)


def full_run(run_dir: Path) -> dict[str, str]:
    """A finished sequential run of 2 rounds with an oracle evaluation and training rewards.
    Returns the harness ids by role."""
    seed = Harness(SEED, name="minimal")
    h1 = Harness(H1, parent_id=seed.id, edit="SEARCH/REPLACE 1")
    h2 = Harness(H2, parent_id=h1.id, edit=f"edit with {EVIL}")
    with Store.open(run_dir) as st:
        st.create_run("sequential", {"task": "rg:basic_arithmetic", "rounds": 2, "note": EVIL}, strategy="sequential")
        st.add_harness(seed, run_id="sequential", round=0)
        _save(st, "sequential", _eval(seed, "score", [0, 0, 1, -1]), 0, "score")
        _save(st, "sequential", _eval(seed, "test", [0, 1, 0, -1]), 0, "test")
        # round 1: one valid improvement, one invalid proposal
        st.add_harness(h1, run_id="sequential", round=1)
        st.save_proposal("sequential", 1, 0, parent_id=seed.id, prompt="p", raw="<<<SEARCH ...", edit=EditResult(valid=True, reason=None, detail=None, parsed=True, produced=True, n_blocks=1, source=None, harness_id=h1.id),
                         call=CallRecord("proposer", {"prompt": "p"}, "x", 100, 20, 0.5))
        st.save_proposal("sequential", 1, 1, parent_id=seed.id, prompt="p", raw=f"garbage {EVIL}", edit=EditResult(valid=False, reason="no_blocks", detail=f"detail {EVIL}", parsed=False, produced=False, n_blocks=0, source=None, harness_id=None))
        _save(st, "sequential", _eval(h1, "score", [1, 0, 1, -1]), 1, "score")
        st.save_round("sequential", 1, parent_id=seed.id, best_harness_id=h1.id, best_score_J=0.5, improved=True,
                      n_proposals=2, n_valid=1, solver_calls=12, tokens=180)
        # round 2: a further improvement
        st.add_harness(h2, run_id="sequential", round=2)
        st.save_proposal("sequential", 2, 0, parent_id=h1.id, prompt="p", raw=f"edit {EVIL}", edit=EditResult(valid=True, reason=None, detail=None, parsed=True, produced=True, n_blocks=1, source=None, harness_id=h2.id))
        _save(st, "sequential", _eval(h2, "score", [1, 1, 1, 0]), 2, "score")
        st.save_round("sequential", 2, parent_id=h1.id, best_harness_id=h2.id, best_score_J=0.75, improved=True,
                      n_proposals=1, n_valid=1, solver_calls=16, tokens=240)
        _save(st, "sequential", _eval(h2, "test", [1, 1, 1, 0]), 2, "test")
        _save(st, "sequential", _eval(h1, "test", [1, 1, 1, 1]), 1, "oracle")
        st.finish_run("sequential", {"best_harness_id": h2.id, "score_J": 0.75, "test_J": 0.75})
        for step in range(3):
            for cand in range(2):
                st.add_reward("grpo", step, "ctx0", cand, J=0.2 * step, parsed=True, produced=cand == 0,
                              completion_rate=0.5, reward=0.2 * step + 0.3)
    return {"seed": seed.id, "h1": h1.id, "h2": h2.id}


def partial_run(run_dir: Path) -> str:
    """A run interrupted after the seed's score evaluation and one proposal (status running)."""
    seed = Harness(SEED, name="minimal")
    with Store.open(run_dir) as st:
        st.create_run("sequential", {"task": "rg:chain_sum"}, strategy="sequential")
        st.add_harness(seed, run_id="sequential", round=0)
        _save(st, "sequential", _eval(seed, "score", [0, 1]), 0, "score")
        st.save_proposal("sequential", 1, 0, parent_id=seed.id, prompt="p", raw="nothing", edit=EditResult(valid=False, reason="no_blocks", detail=None, parsed=False, produced=False, n_blocks=0, source=None, harness_id=None))
    return seed.id
