"""The GRPO groups' figures per update (training/rollouts.py: group_stats, collapse_alarm; issue 62): no model."""

from __future__ import annotations

from harnesslearn import zoo
from harnesslearn.training.reward import RewardResult
from harnesslearn.training.rollouts import Candidate, collapse_alarm, group_stats

OWN = "def solve(model, question):\n    return model(question + ' Be brief.').strip().split()[-1]\n"


def cand(ctx: str, text: str, source: str | None, J: float | None, parent_J: float | None) -> Candidate:
    res = RewardResult(0.1 if J is None else J + 0.3, J, True, source is not None, 1.0, source is not None, None,
                       f"h{hash(source) % 10**6}" if source else None)
    return Candidate(ctx, "rg:gcd", 1, "p", "prompt", text, text, res, parent_J, source)


def test_group_stats_count_distinct_texts_copies_and_groups_beating_their_parent() -> None:
    loop = zoo.source("interpreter_loop")
    groups = {
        "c1": [cand("c1", "a", loop, 0.5, 0.25), cand("c1", "a", loop, 0.5, 0.25), cand("c1", "b", OWN, 0.0, 0.25),
               cand("c1", "x", None, None, 0.25)],
        "c2": [cand("c2", "a", loop, 0.25, 0.25), cand("c2", "b", OWN, 0.0, 0.25), cand("c2", "c", OWN, 0.0, 0.25),
               cand("c2", "d", None, None, 0.25)],
        "c3": [cand("c3", t, None, None, None) for t in "abcd"],
    }
    s = group_stats(groups)
    assert s["groups"] == 3 and s["valid"] == 6
    assert s["distinct_texts"] == round((3 + 4 + 4) / 3, 4) and s["distinct_harnesses"] == round((2 + 2 + 0) / 3, 4)
    assert s["copy_share"] == 0.5 and (s["top_source"], s["top_source_share"]) == ("zoo:interpreter_loop", 0.5)
    assert s["solver_code_share"] == 0.5
    assert s["beats_parent_share"] == 0.5  # c1's best 0.5 > 0.25; c2's best 0.25 is not more; c3 not scored
    assert s["parents_J"] == [0.25, 0.25, None] and s["parents_J_mean"] == 0.25
    assert collapse_alarm(s, 4) == []
    assert group_stats({}) == {**{k: None for k in s}, "groups": 0, "valid": 0, "parents_J": []}


def test_collapse_alarm_names_what_collapsed() -> None:
    loop = zoo.source("interpreter_loop")
    same = {f"c{i}": [cand(f"c{i}", "a", loop, 0.5, 0.0) for _ in range(8)] for i in range(4)}
    alarm = collapse_alarm(group_stats(same), 8)
    assert alarm == ["1.00 distinct texts per group of 8", "copy share 1.00",
                     "zoo:interpreter_loop copied by 100% of the valid candidates"]
    assert collapse_alarm({"distinct_texts": 2.0}, 8) == ["2.00 distinct texts per group of 8"]
    assert collapse_alarm({"distinct_texts": 2.5, "copy_share": 0.5}, 8) == []
    assert collapse_alarm({"distinct_texts": 1.0}, 1) == []  # a group of one is not a collapse


def test_the_report_shows_the_groups_per_update_and_the_self_sft_figures() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
    import qwen12_report as rep

    groups = {"groups": 8, "distinct_texts": 1.5, "copy_share": 0.9, "top_source": "zoo:interpreter_loop",
              "top_source_share": 0.8, "solver_code_share": 0.85, "beats_parent_share": 0.25, "parents_J_mean": 0.1}
    runs = {"rl": [{"update": 1, "reward_parts": {}}, {"update": 2, "entropy": 0.031, "groups": groups,
                                                      "collapse_alarm": ["copy share 0.90"]}]}
    md = "\n".join(rep.groups_table(runs))
    assert md.count("\n| rl |") == 1  # the update without groups (an older record) has no row
    assert "| rl | 2 | 0.031 | 1.50 | 0.90 | zoo:interpreter_loop (0.80) | 0.85 | 0.25 | 0.100 | copy share 0.90 |" in md
    sd = {"source": "self", "contexts": 4, "kept": 3, "interpreter_loop_share": 0.0, "kinds": {}, "per_family": {},
          "per_source": {"self": 3}, "counts": {}, "n_score": 8, "seconds": 1.0, "margin": 0.1, "parents": ["seed"],
          "per_parent": {"minimal": 3}, "hold_out_loop": True, "yield_per_context": {"mean": 0.75, "with_rows": 2},
          "self_yield": 0.2, "distinct_completions": 3, "distinct_harnesses": 3, "mean_gain": 0.25, "copies": 0,
          "solver_code_share": 0.0}
    text = "\n".join(rep.sft_sections(sd, None))
    assert "own revisions of a pool of parents" in text and "mean gain over the parent 0.25" in text
    assert "held-out loop: True" in text and "per self proposal: 0.2" in text
