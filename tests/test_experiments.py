"""The H200 experiment scripts (experiments/): the pure arithmetic (bootstrap intervals, step-time
breakdown, GPU utilisation per phase), the report writer, and a CPU smoke run of both device
scripts with a tiny randomly initialised model and a ``python:`` solver, so that the scripts work
the first time on the device."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

EXP = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXP))

import exp_stats as st  # noqa: E402


# ---------------------------------------------------------------------- bootstrap
def test_bootstrap_constant_values_give_a_zero_width_interval() -> None:
    c = st.bootstrap_ci([0.25] * 10)
    assert c == {"mean": 0.25, "lo": 0.25, "hi": 0.25}


def test_bootstrap_interval_brackets_the_mean_and_shrinks_with_n() -> None:
    small = st.bootstrap_ci([0.0, 1.0] * 5, seed=1)
    large = st.bootstrap_ci([0.0, 1.0] * 200, seed=1)
    for c in (small, large):
        assert c["lo"] < c["mean"] == 0.5 < c["hi"]
    assert (large["hi"] - large["lo"]) < (small["hi"] - small["lo"]) / 3


def test_paired_difference_sees_a_shift_that_unpaired_noise_would_hide() -> None:
    before = [0.1 * (i % 10) for i in range(40)]  # widely spread scores
    after = [b + 0.05 for b in before]  # every problem a little better
    d = st.bootstrap_paired_diff(before, after)
    assert d["lo"] == pytest.approx(0.05) and d["hi"] == pytest.approx(0.05)
    with pytest.raises(ValueError):
        st.bootstrap_paired_diff([0.0], [0.0, 1.0])


def test_mean_over_families_weights_families_not_problems() -> None:
    per = {"big": [1.0] * 100, "small": [0.0, 0.0]}
    c = st.bootstrap_family_mean(per)
    assert c["mean"] == pytest.approx(0.5) and c["lo"] == c["hi"] == pytest.approx(0.5)
    wide = st.bootstrap_family_mean(per, resample_families=True)
    assert wide["lo"] == 0.0 and wide["hi"] == 1.0  # drawing families can give all-big or all-small


def test_family_mean_difference_uses_common_families_only() -> None:
    before = {"a": [0.0, 0.0], "b": [0.5, 0.5], "only_before": [1.0]}
    after = {"a": [1.0, 1.0], "b": [0.5, 0.5]}
    assert st.bootstrap_family_mean_diff(before, after)["mean"] == pytest.approx(0.5)


def test_experiments_and_benchmarks_are_recipes_over_the_public_api() -> None:
    """Every harnesslearn name that experiments/ and benchmarks/ import exists, is public (no ``_``
    module or name) and is not a sandbox internal; none edits sys.path, imports from tests/ or runs SQL
    on a store itself; none patches a trainer's privates."""
    import ast
    import importlib
    import re

    root = EXP.parent
    files = sorted(f for f in [*EXP.rglob("*.py"), *(root / "benchmarks").rglob("*.py")]
                   if ".venvs" not in f.parts)  # the peers' installed environments (git-ignored) are not ours
    assert len(files) > 15
    for path in files:
        text = path.read_text()
        where = str(path.relative_to(root))
        assert not re.search(r"setattr\(\s*trainer|_generate_single_turn|_calculate_rewards", text), where
        assert "sys.path.insert" not in text and "import sqlite3" not in text, where
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module:
                mods, names = [node.module], [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                mods, names = [a.name for a in node.names], []
            else:
                continue
            for mod in mods:
                assert mod.split(".")[0] != "tests", f"{where} imports from tests/: {mod}"
                if mod.split(".")[0] != "harnesslearn":
                    continue
                assert not any(part.startswith("_") for part in mod.split(".")), f"{where}: private module {mod}"
                assert mod not in ("harnesslearn.sandbox.launcher", "harnesslearn.sandbox.worker"), where
                module = importlib.import_module(mod)
                for name in names:
                    assert not name.startswith("_"), f"{where}: private name {mod}.{name}"
                    assert hasattr(module, name) or importlib.util.find_spec(f"{mod}.{name}"), f"{where}: {mod}.{name}"


# ---------------------------------------------------------------------- GRPO rollouts against the zoo
def test_rollout_copies_tells_zoo_near_copies_from_new_revisions_per_update(tmp_path: Path) -> None:
    import gzip
    import json

    import qwen12_report as rep

    from harnesslearn import zoo
    from harnesslearn.harness import harness_id, load_harness

    seed = load_harness("minimal").source
    solve = seed[seed.index("def solve"):]

    def edit(new_solve: str) -> str:
        return f"<<<<<<< SEARCH\n{solve}=======\n{new_solve}>>>>>>> REPLACE\n"
    loop = zoo.source("interpreter_loop")
    novel = ('def solve(model, question):\n    votes = [model(f"Q: {question}\\nA:", max_tokens=32, temperature=0.9)'
             '.strip() for _ in range(3)]\n    return max(set(votes), key=votes.count)\n')
    back = f"<<<<<<< SEARCH\n{seed}=======\n{loop}>>>>>>> REPLACE\n"  # the whole zoo file written back
    cands = [{"valid": True, "proposal": back, "J": None},  # an infrastructure failure: not scored, skipped
             {"valid": True, "proposal": back, "J": 0.5},
             {"valid": True, "proposal": edit(novel), "J": 0.1},
             {"valid": False, "proposal": "no edit", "J": 0.0}]
    path = tmp_path / "rollouts.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"step": 0, "parent_id": harness_id(seed), "candidates": cands}) + "\n")
        f.write(json.dumps({"step": 1, "parent_id": "another parent", "candidates": cands[1:2]}) + "\n")
    rows = rep.rollout_copies(rep.scored_candidates(rep.read_jsonl(path)))
    assert [r["update"] for r in rows] == [1, 2]
    assert rows[0]["valid"] == 2 and rows[0]["near_copies"] == 1 and rows[0]["near_copy_share"] == 0.5
    assert rows[0]["skipped"] == 1
    assert rows[0]["J_near"] == 0.5 and rows[0]["J_other"] == 0.1 and abs(rows[0]["J_from_copies"] - 0.5 / 0.6) < 1e-9
    assert rows[1]["valid"] == 0 and rows[1]["skipped"] == 1 and rows[1]["near_copy_share"] is None
    md = rep.copies_md(rows, tmp_path)
    assert (tmp_path / "grpo_zoo_copies.png").is_file() and any(line.startswith("| 1 | 2 | 1 |") for line in md)
    cands = rep.scored_candidates(rep.read_jsonl(path))
    assert [c["skipped"] for c in cands] == ["not_scored", None, None, "other_parent"]
    bands = {b["band"]: b for b in rep.zoo_distance(cands)}
    assert bands["0.95-1.00"]["candidates"] == 1 and bands["0.95-1.00"]["J_mean"] == 0.5  # the zoo file back
    assert sum(b["candidates"] for b in bands.values()) == 2 and abs(bands["0.95-1.00"]["J_share"] - 0.5 / 0.6) < 1e-9
    assert sum(b["J_positive"] for b in bands.values()) == 2
    fam = rep.family_copies(cands)  # both scored candidates are of update 1: one half, copies and others apart
    assert [(r["updates"], r["candidates"]) for r in fam] == [("1-1", 2)]
    assert fam[0]["kinds"] == {"interpreter_loop": {"n": 1, "J": 0.5}, "other": {"n": 1, "J": 0.1}}
    assert "| ? | 1-1 | 2 | 1 (0.50) | 1 (0.10) |" in rep.family_md(fam)


def test_family_copies_splits_the_updates_in_halves_and_each_family_by_the_zoo_file_copied(tmp_path: Path) -> None:
    import qwen12_report as rep

    def c(update: int, fam: str, ratio: float | None, name: str, j: float) -> dict:
        return {"update": update, "family": fam, "ratio": ratio, "zoo": name, "J": j}
    cands = [c(1, "maze", 0.93, "interpreter_loop", 0.4), c(2, "maze", 0.3, "few_shot", 0.0),
             c(3, "maze", 0.92, "interpreter_loop", 0.8), c(4, "maze", 0.91, "interpreter_loop", 0.6),
             c(4, "gcd", 0.85, "reason_extract", 0.0), c(4, "gcd", None, "", 0.0)]  # the last one skipped
    rows = rep.family_copies(cands)
    assert [(r["family"], r["updates"], r["candidates"]) for r in rows] == [("gcd", "3-4", 1), ("maze", "1-2", 2),
                                                                            ("maze", "3-4", 2)]
    assert rows[2]["kinds"] == {"interpreter_loop": {"n": 2, "J": 0.7}}
    assert rows[1]["kinds"]["other"] == {"n": 1, "J": 0.0}  # below the near-copy line: not a copy of few_shot
    md = rep.family_md(rows)
    assert "| family | updates | candidates | interpreter_loop | reason_extract | other |" in md
    assert "| maze | 3-4 | 2 | 2 (0.70) |  |  |" in md
    assert rep.family_copies([]) == [] and rep.family_md([]) == []
    assert "![grpo_family_copies.png](grpo_family_copies.png)" in rep.family_md(rows, tmp_path)
    assert (tmp_path / "grpo_family_copies.png").stat().st_size > 1000
    late = [c(u, "maze", 0.3, "", 0.0) for u in (5, 9, 12, 20)]  # halves 5-9 and 12-20: in update order, not text
    assert [r["updates"] for r in rep.family_copies(late)] == ["5-9", "12-20"]


def test_parent_duels_compare_each_groups_best_candidate_with_its_scored_parent() -> None:
    """The rollouts' ``parent_J`` (the parent on the same problems): per parent kind and half of the updates, how
    many groups' best valid candidate beats the parent by one or two of n_score problems, or trails it; groups
    without ``parent_J`` (older rollouts) are left out, and no such group gives no section."""
    import qwen12_report as rep

    from harnesslearn.harness import harness_id, load_harness

    seed_id = harness_id(load_harness("minimal").source)

    def g(step: int, parent: str, parent_j: float | None, js: list[float | None], valid: bool = True) -> dict:
        return {"step": step, "parent_id": parent, "parent_J": parent_j,
                "candidates": [{"valid": valid, "J": j} for j in js]}

    groups = [g(0, "zoo-loop", 0.5, [0.75, 0.25]),    # ahead by one problem of 4
              g(0, "zoo-loop", 0.5, [0.0, None]),     # behind by two
              g(1, "zoo-loop", 0.25, [0.0], valid=False),  # nothing valid: no_valid
              g(1, seed_id, 0.0, [1.0]),              # ahead by four
              g(1, "zoo-loop", None, [1.0])]          # parent not scored: left out
    rows = rep.parent_duels(groups, 4)
    by = {(r["parent"], r["updates"]): r for r in rows}
    first = by[("another harness", "1-1")]
    assert (first["groups"], first["ahead_by_1"], first["ahead_by_2"], first["behind_by_1"], first["behind_by_2"]) \
        == (2, 1, 0, 1, 1)
    assert first["parent_J"] == 0.5 and first["best_J"] == 0.375
    assert by[("another harness", "2-2")]["no_valid"] == 1 and by[("another harness", "2-2")]["best_J"] is None
    assert by[("minimal seed", "2-2")]["ahead_by_2"] == 1
    md = rep.parent_md(rows, 4)
    assert md[-2] == "| all | | 4 | 1 | | | 2 / 1 | 1 / 1 |"
    assert rep.parent_duels([g(0, "p", None, [1.0])], 4) == [] and rep.parent_md([], 4) == []


def test_group_duels_count_margins_in_scoring_problems_within_each_group(tmp_path: Path) -> None:
    """The best non-copy against the best zoo copy of the same group (context), in problems of n_score: a quarter
    of J is one problem at n_score 4; a group without copies counts apart; groups are not mixed across contexts."""
    import qwen12_report as rep

    def c(update: int, ctx: str, ratio: float | None, j: float, fam: str = "maze") -> dict:
        return {"update": update, "family": fam, "context": ctx, "ratio": ratio, "zoo": "interpreter_loop", "J": j}
    cands = [c(1, "a", 0.9, 0.0), c(1, "a", 0.2, 0.5),   # other ahead by 2 problems
             c(1, "b", 0.9, 0.25), c(1, "b", 0.3, 0.5),   # ahead by 1
             c(2, "c", 0.95, 0.75), c(2, "c", 0.1, 0.1),  # copy ahead by 2 (0.65 of J: not 3)
             c(2, "d", 0.1, 0.25), c(2, "d", None, 1.0),  # no copy; the skipped candidate does not count
             c(3, "e", 0.9, 0.5), c(3, "e", 0.4, 0.6),    # a 0.1 margin: a tie at n_score 4
             c(4, "f", 0.9, 1.0), c(4, "f", 0.2, 0.0, "gcd")]  # the same context name in another family: apart
    rows = rep.group_duels(cands, 4)
    first = next(r for r in rows if r["family"] == "maze" and r["updates"] == "1-2")
    assert (first["groups"], first["both"], first["other_by_1"], first["other_by_2"]) == (4, 3, 2, 1)
    assert (first["copy_by_1"], first["copy_by_2"], first["no_copy_J_positive"]) == (1, 1, 1)
    assert first["best_other_J"] == (0.5 + 0.5 + 0.1) / 3 and first["best_copy_J"] == (0.0 + 0.25 + 0.75) / 3
    late = {r["family"]: r for r in rows if r["updates"] == "3-4"}
    assert late["maze"]["both"] == 1 and late["maze"]["other_by_1"] == 0 and late["maze"]["copy_by_1"] == 0
    assert late["maze"]["groups"] == 2 and late["gcd"]["both"] == 0  # "f" split by family: one kind each
    md = rep.duels_md(rows, 4)
    assert "| maze | 1-2 | 4 | 3 | 2 / 1 | 1 / 1 | 0.367 | 0.333 | 1 |" in md
    assert any(line.startswith("| all | | 7 | 4 | 2 / 1 | 1 / 1 |") for line in md)
    assert rep.group_duels([], 4) == [] and rep.duels_md([], 4) == []
    assert "![grpo_group_duels.png](grpo_group_duels.png)" in rep.duels_md(rows, 4, tmp_path)
    assert (tmp_path / "grpo_group_duels.png").stat().st_size > 1000


def test_family_signal_tells_a_family_that_trains_the_harness_from_one_that_trains_the_format() -> None:
    import qwen12_report as rep

    def g(task: str, js: list[float | None], fmt: list[float]) -> dict:
        return {"task": task, "candidates": [{"J": j, "reward": (j or 0.0) + f} for j, f in zip(js, fmt, strict=True)]}
    groups = [g("rg:maze", [0.0, 0.0, 0.0, 0.0], [0.0, 0.3, 0.3, 0.15]),  # J all 0: the format alone ranks them
              g("rg:maze", [0.0, None, 0.0, 0.0], [0.3, 0.0, 0.3, 0.3]),  # an unscored one counts as J 0
              g("rg:simple_geometry", [0.0, 1.0, 0.0, 1.0], [0.3, 0.3, 0.3, 0.3])]  # J alone ranks them
    rows = {r["family"]: r for r in rep.family_signal(groups)}
    maze, geo = rows["maze"], rows["simple_geometry"]
    assert maze["contexts"] == 2 and maze["candidates"] == 8 and maze["J_positive"] == 0.0 and maze["one_J"] == 2
    assert maze["J_share_of_variance"] == 0.0 and maze["reward_std"] > 0
    assert geo["J_share_of_variance"] == 1.0 and geo["J_std"] == 0.5 and geo["J_mean"] == 0.5 and geo["one_J"] == 0
    md = rep.signal_md(list(rows.values()))
    assert any(line.startswith("| simple_geometry | 1 | 4 | 0.50 | 0.500 | 0.500 | 0.500 | 0 | 1.00 |") for line in md)
    assert rep.signal_md([]) == []


def test_group_spread_counts_distinct_candidates_and_groups_without_a_gradient() -> None:
    import qwen12_report as rep

    def c(text: str, valid: bool, reward: float) -> dict:
        return {"completion": text, "proposal": text, "valid": valid, "reward": reward}
    groups = [{"step": 0, "candidates": [c("a", True, 0.3), c("a", True, 0.3), c("b", True, 0.1), c("x", False, 0)]},
              {"step": 0, "candidates": [c("a", True, 0.2), c("a", True, 0.2), c("a", True, 0.2), c("a", True, 0.2)]},
              {"step": 1, "candidates": [c("a", True, 0.2), c("b", False, 0.0)]}]
    rows = rep.group_spread(groups)
    assert [r["update"] for r in rows] == [1, 2]
    assert rows[0]["groups"] == 2 and rows[0]["size"] == 4.0 and rows[0]["one_reward"] == 1
    assert rows[0]["distinct_completions"] == 2.0 and rows[0]["distinct_valid"] == 1.5  # (3, 2) and (2, 1)
    assert rows[1]["one_reward"] == 0 and rows[1]["distinct_valid"] == 1.0
    md = rep.spread_md(rows, [])
    assert "| 1 | 2 | 4 | 2.0 | 1.5 | 1 |" in md


def test_zoo_nearest_prunes_without_changing_the_answer() -> None:
    import difflib

    from harnesslearn import zoo

    zoo.nearest.cache_clear()  # computed here, not remembered from another test
    text = zoo.source("interpreter_loop").replace("ATTEMPTS = 3", "ATTEMPTS = 4") + "\n# a note\n"
    full = max(((n, difflib.SequenceMatcher(None, text, zoo.source(n), autojunk=False).ratio()) for n in zoo.ENTRIES),
               key=lambda x: x[1])
    assert zoo.nearest(text) == full and full[0] == "interpreter_loop"
    # a tie keeps the first of the zoo's order, as the unpruned loop's strict '>' does
    first, second = list(zoo.ENTRIES)[:2]
    twins = {first: "abc def", second: "abc def"}
    orig = zoo.source
    zoo.nearest.cache_clear()  # nearest remembers its answers: the stand-ins' must not leak into other tests
    try:
        zoo.source = lambda name: twins.get(name, "zzzzzzzzzzzzzzzzzzzzzzzz")  # type: ignore[assignment]
        assert zoo.nearest("abc def") == (first, 1.0)
        assert zoo.nearest("abc xyz")[0] == first
    finally:
        zoo.source = orig  # type: ignore[assignment]
        zoo.nearest.cache_clear()


# ---------------------------------------------------------------------- the device's solver server
def _serve_solver() -> Any:
    """experiments/device/serve_solver.py as a module (it is a script beside the device's shell scripts)."""
    sys.path.insert(0, str(EXP / "device"))
    try:
        import serve_solver
    finally:
        sys.path.remove(str(EXP / "device"))
    return serve_solver


def test_serve_solver_modes_and_the_eager_fallback() -> None:
    ss = _serve_solver()
    graphs = ss.argv("/m", 0.3, "graphs")
    cc = json.loads(graphs[graphs.index("--compilation-config") + 1])
    assert cc == {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"} and "--enforce-eager" not in graphs
    assert "--enforce-eager" in ss.argv("/m", 0.3, "eager") and "--compilation-config" not in ss.argv("/m", 0.3, "compile")
    with pytest.raises(SystemExit, match="mode must be one of"):
        ss.argv("/m", 0.3, "fast")
    for rc, fell_back in ((1, True), (-15, False), (0, False)):
        calls: list[list[str]] = []
        execs: list[list[str]] = []
        ss.serve("/m", 0.3, "graphs", call=lambda a, rc=rc, calls=calls: calls.append(list(a)) or rc,
                 execv=lambda p, a, execs=execs: execs.append(list(a)))
        assert calls == [graphs]
        assert execs == ([ss.argv("/m", 0.3, "eager")] if fell_back else [])
    execs = []
    ss.serve("/m", 0.3, "eager", call=lambda a: 1 / 0, execv=lambda p, a: execs.append(list(a)))
    assert execs == [ss.argv("/m", 0.3, "eager")]


def test_serve_solver_full_mode_graphs_every_step_and_falls_back_to_graphs_then_eager() -> None:
    ss = _serve_solver()
    full = ss.argv("/m", 0.3, "full")
    cc = json.loads(full[full.index("--compilation-config") + 1])
    assert cc == {"mode": 0, "cudagraph_mode": "FULL", "max_cudagraph_capture_size": ss.FULL_TOKENS}
    # no step larger than the largest graph: every step replays one
    assert full[full.index("--max-num-batched-tokens") + 1] == str(ss.FULL_TOKENS)
    assert "--max-num-batched-tokens" not in ss.argv("/m", 0.3, "graphs")
    calls: list[list[str]] = []
    execs: list[list[str]] = []
    ss.serve("/m", 0.3, "full", port=8001, call=lambda a: calls.append(list(a)) or 1,
             execv=lambda p, a: execs.append(list(a)))
    assert calls == [ss.argv("/m", 0.3, "full", port=8001), ss.argv("/m", 0.3, "graphs", port=8001)]
    assert execs == [ss.argv("/m", 0.3, "eager", port=8001)]
    calls, execs = [], []
    ss.serve("/m", 0.3, "full", call=lambda a: calls.append(list(a)) or (1 if len(calls) == 1 else 0),
             execv=lambda p, a: execs.append(list(a)))
    assert calls == [full, ss.argv("/m", 0.3, "graphs")] and execs == []  # the graphs server ran and ended


def test_serve_solver_takes_a_port_and_refuses_a_bad_one() -> None:
    ss = _serve_solver()
    a = ss.argv("/m", 0.15, "graphs", port=8001)
    assert a[a.index("--port") + 1] == "8001" and ss.argv("/m", 0.3, "eager")[ss.argv("/m", 0.3, "eager").index("--port") + 1] == "8000"
    execs: list[list[str]] = []
    ss.serve("/m", 0.15, "graphs", port=8001, call=lambda a: 1, execv=lambda p, a: execs.append(list(a)))
    assert execs == [ss.argv("/m", 0.15, "eager", port=8001)]  # the eager fallback keeps the port
    with pytest.raises(SystemExit, match="--port needs a number"):
        ss.main(["/m", "0.3", "graphs", "--port", "x"])
    with pytest.raises(SystemExit, match="usage"):
        ss.main(["/m", "0.3"])


FAKE_PY = """#!/bin/bash
# python3 for solver.sh's test: serve_solver.py becomes a static server of v1/models on its --port
if [[ "$1" == *serve_solver.py ]]; then
  echo "$@" >> "$FAKE_ROOT/served"
  [ -n "${FAKE_EXIT:-}" ] && exit 1  # a server that fails at its start (a bad adapter path, no memory)
  port=8000; args=("$@"); for i in "${!args[@]}"; do [ "${args[$i]}" = --port ] && port=${args[$((i + 1))]}; done
  exec "$REAL_PY" -m http.server "$port" --bind 127.0.0.1 --directory "$FAKE_ROOT/www"
fi
exec "$REAL_PY" "$@"
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_solver_sh_starts_servers_on_several_ports_one_after_another_and_lists_their_urls(tmp_path: Path) -> None:
    """experiments/device/solver.sh with HL_SOLVER_PORTS: each port gets a serve_solver.py of its own (the share
    and mode passed on), `wait` waits for all of them, `urls` gives gpu_eval.py's --solver-base-url flags; a bad
    port is refused; `stop` ends every one of them and the next start begins afresh; an adapter whose folder is
    missing is left out; `wait` gives up at once on a server that exited. A fake python3 stands in for vLLM (a static server of /v1/models)."""
    import socket
    import subprocess
    import time

    from llama_server import free_port

    ports = [free_port(), free_port()]
    while ports[1] == ports[0]:
        ports[1] = free_port()
    bin_dir, dev, model = tmp_path / "bin", tmp_path / "dev", tmp_path / "model"
    (tmp_path / "www" / "v1").mkdir(parents=True)
    (tmp_path / "www" / "v1" / "models").write_text('{"data": []}')
    bin_dir.mkdir()
    model.mkdir()
    (model / "config.json").write_text("{}")
    (bin_dir / "python3").write_text(FAKE_PY)
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "REAL_PY": sys.executable, "FAKE_ROOT": str(tmp_path),
           "HL_DEV_DIR": str(dev), "HL_MODEL": str(model), "HL_SOLVER_PORTS": f"{ports[0]} {ports[1]}"}
    sh = str(EXP / "device" / "solver.sh")

    def run(*args: str, **kw: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", sh, *args], env={**env, **kw}, capture_output=True, text=True, timeout=120)

    try:
        p = run("start", "0.15", "graphs")
        assert p.returncode == 0, p.stderr
        w = run("wait", "60")
        assert w.returncode == 0 and "ready" in w.stdout, w.stdout + w.stderr
        for port in ports:
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
        served = (tmp_path / "served").read_text().splitlines()
        assert [line.split()[1:] for line in served] == [[str(model), "0.15", "graphs", "--port", str(p)] for p in ports]
        urls = run("urls").stdout.split()
        assert urls == [x for p in ports for x in ("--solver-base-url", f"http://127.0.0.1:{p}/v1")]
        one = free_port()  # one more, alone: the server replaces the detached shell (exec), as the usual start
        assert run("start", "0.3", HL_SOLVER_PORTS=str(one)).returncode == 0  # no mode: issue 31's full graphs
        assert run("wait", "60").returncode == 0
        assert (tmp_path / "served").read_text().splitlines()[-1].split()[1:] == [str(model), "0.3", "full", "--port",
                                                                                   str(one)]
        assert len(run("urls").stdout.split()) == 6
        bad = run("start", "0.3", "graphs", HL_SOLVER_PORTS="80a0")
        assert bad.returncode == 2 and "port numbers" in bad.stderr
        assert run("start", "0.3", "graphs", HL_SOLVER_PORTS=" ").returncode == 2
        dead = free_port()  # a server listed that never answered (or died): no new start beside it, urls leave it out
        with open(dev / "solver_ports", "a") as f:
            f.write(f"{dead}\n")
        late = run("start", "0.3", "graphs", HL_SOLVER_PORTS=str(free_port()))
        assert late.returncode == 1 and f"port {dead} has not answered yet" in late.stderr
        u = run("urls")
        assert len(u.stdout.split()) == 6 and f"port {dead} does not answer" in u.stderr
        # stop: every server started here goes, each with its whole process group (the two-port start is one)
        s = run("stop", "30")
        assert s.returncode == 0 and "2 group(s)" in s.stdout, s.stdout + s.stderr
        for port in [*ports, one]:
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
        assert not (dev / "solver_ports").exists() and run("urls").stdout.split() == []
        again = free_port()  # and the next start begins afresh, beside nothing; a missing adapter folder is left out
        st = run("start", "0.3", "graphs", f"sft={tmp_path}/no-sft,rl={model}", HL_SOLVER_PORTS=str(again))
        assert st.returncode == 0 and f"no adapter folder {tmp_path}/no-sft: sft left out" in st.stderr, st.stderr
        assert run("wait", "60").returncode == 0
        assert (tmp_path / "served").read_text().splitlines()[-1].split()[1:] == [
            str(model), "0.3", "graphs", f"rl={model}", "--port", str(again)]
        assert run("urls").stdout.split() == ["--solver-base-url", f"http://127.0.0.1:{again}/v1"]
        assert "1 group(s)" in run("stop").stdout
        assert run("stop").stdout.strip() == "solver server(s) stopped: 0 group(s)"
        quick = free_port()  # a stop right after a start finds the server it started (its group is recorded first)
        assert run("start", "0.3", "graphs", HL_SOLVER_PORTS=str(quick)).returncode == 0
        assert "1 group(s)" in run("stop").stdout
        time.sleep(1)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", quick), timeout=5).close()
        t = time.monotonic()  # a server that exits at its start: `wait` says so at once, not after its time
        assert run("start", "0.3", "graphs", HL_SOLVER_PORTS=str(free_port()), FAKE_EXIT="1").returncode == 0
        w = run("wait", "120")
        assert w.returncode == 1 and "exited before it answered" in w.stdout, w.stdout + w.stderr
        assert time.monotonic() - t < 60
    finally:
        subprocess.run(["pkill", "-f", "--", f"--directory {tmp_path}/www"], check=False)
        time.sleep(0.2)


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_watch_sh_brings_back_a_plain_output_folder_whole_without_its_work(tmp_path: Path) -> None:
    """experiments/device/watch.sh with a folder that is not a qwen12 work folder (the peers benchmark's --out):
    it comes back as NAME.tgz in $OUT, the finished and partial results in, the work/ subfolder (the runs' stores)
    out."""
    import subprocess
    import tarfile

    peers, out = tmp_path / "peers-b16", tmp_path / "out"
    (peers / "partial").mkdir(parents=True)
    (peers / "work").mkdir()
    (peers / "partial" / "results.json").write_text("{}")
    (peers / "results.md").write_text("# table")
    (peers / "work" / "store.sqlite").write_bytes(b"x" * 1000)
    out.mkdir()
    p = subprocess.run(["bash", str(EXP / "device" / "watch.sh"), "1", "1", str(peers)], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "OUT": str(out), "HL_DEV_DIR": str(tmp_path / "dev")})
    assert p.returncode == 0, p.stderr
    with tarfile.open(out / "peers-b16.tgz") as tf:
        names = {n.removeprefix("./") for n in tf.getnames()}
    assert {"partial/results.json", "results.md"} <= names and not any(n.startswith("work") for n in names), names
    assert sorted(x.name for x in out.iterdir() if x.name.endswith(".tgz")) == ["peers-b16.tgz"]  # no temporary left
    assert not (out / "jitcache.tar").exists()  # no solver started on this machine: no kernels to bring back


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_slim_sh_takes_the_tree_down_to_the_device_folder_and_back_and_never_loses_a_change(tmp_path: Path) -> None:
    """experiments/device/slim.sh (the set-up's chunk calls carry the tree beside a chunk, 64 MiB in all): `off`
    leaves only experiments/device/ and the .gitignore files of the tracked files (ignored ones stay), `on` puts
    every one back as committed, and `off` with an uncommitted change refuses in one line and removes nothing."""
    import subprocess

    repo = tmp_path / "repo"
    (repo / "experiments" / "device").mkdir(parents=True)
    shutil.copy(EXP / "device" / "slim.sh", repo / "experiments" / "device" / "slim.sh")
    (repo / "experiments" / "device" / "setup.sh").write_text("echo keep\n")
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "src" / "pkg" / "big.bin").write_bytes(b"x" * 100_000)
    (repo / "README.md").write_text("# r\n")
    (repo / ".gitignore").write_text("/.dev/\n")
    (repo / ".dev").mkdir()
    (repo / ".dev" / "a00").write_bytes(b"chunk")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}

    def sh(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(cmd), cwd=repo, capture_output=True, text=True, timeout=60, env=env)

    assert sh("git", "init", "-q").returncode == 0
    assert sh("git", "add", "-A").returncode == 0 and sh("git", "commit", "-qm", "x").returncode == 0
    slim = str(repo / "experiments" / "device" / "slim.sh")
    whole = int(sh("bash", slim, "size").stdout)
    p = sh("bash", slim, "off")
    assert p.returncode == 0, p.stderr
    present = sorted(str(f.relative_to(repo)) for f in repo.rglob("*") if f.is_file() and ".git" not in f.parts)
    assert present == [".dev/a00", ".gitignore", "experiments/device/setup.sh", "experiments/device/slim.sh"]
    # The .gitignore stays, so the chunks stay ignored: the device tool sends untracked files that are not ignored.
    assert sh("git", "status", "--porcelain").stdout.count("??") == 0
    assert int(sh("bash", slim, "size").stdout) < whole - 100_000
    p = sh("bash", slim, "on")
    assert p.returncode == 0 and "0 tracked files missing" in p.stdout, p.stdout + p.stderr
    assert sh("git", "status", "--porcelain").stdout == "" and int(sh("bash", slim, "size").stdout) == whole
    (repo / "README.md").write_text("# changed, not committed\n")
    p = sh("bash", slim, "off")
    assert p.returncode == 1 and "uncommitted changes" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert (repo / "src" / "pkg" / "big.bin").exists() and (repo / "README.md").read_text().startswith("# changed")


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_watch_sh_brings_the_kernel_cache_back_once_a_machine_before_the_jobs_end(tmp_path: Path) -> None:
    """watch.sh packs the compiled kernels (jitcache.sh) into $OUT at the end of the first watch after the solver
    server started, though the jobs still run (sessions 44 and 45 ended cut, and a cache packed only at jobs.done
    never came back), and not again on the same machine: later calls' $OUT stay small."""
    import subprocess

    home, dev, peers = tmp_path / "home", tmp_path / "dev", tmp_path / "peers-b64"
    (home / ".triton" / "cache").mkdir(parents=True)
    (home / ".triton" / "cache" / "kernel.cubin").write_bytes(b"k" * 2000)
    dev.mkdir()
    (dev / "solver.log").write_text("server up")
    (peers / "partial").mkdir(parents=True)

    def watch(out: Path) -> None:
        out.mkdir()
        p = subprocess.run(["bash", str(EXP / "device" / "watch.sh"), "1", "1", str(peers)], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "OUT": str(out), "HL_DEV_DIR": str(dev),
                                                        "HOME": str(home)})
        assert p.returncode == 0, p.stderr

    watch(tmp_path / "out1")  # no jobs.done: the jobs still run
    assert (tmp_path / "out1" / "jitcache.tar").stat().st_size > 0 and (dev / "jitcache.sent").exists()
    watch(tmp_path / "out2")
    assert not (tmp_path / "out2" / "jitcache.tar").exists()


FAKE_RUN_PY = """#!/bin/bash
# python3 for jobs.sh's test: a qwen12.py run only says what it was given; anything else is the real python
if [ "$1" = experiments/qwen12.py ]; then echo "run $PWD ${*:2}" >> "$FAKE_ROOT/order"; exit 0; fi
exec "$REAL_PY" "$@"
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_jobs_sh_runs_runs_and_shell_steps_in_order_detached_and_goes_on_after_a_failed_step(tmp_path: Path) -> None:
    """experiments/device/jobs.sh: each argument is a qwen12.py run (with the model, the shared solver and issue 31's
    engine setting before the job's own options) or, beginning with '!', a shell command; they run one after another,
    detached, in a copy of the repository (the code on PYTHONPATH too); a failing step, even one that does not
    parse, is logged and the next one runs; jobs.done comes last."""
    import subprocess
    import time

    bin_dir, dev = tmp_path / "bin", tmp_path / "dev"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_RUN_PY)
    (bin_dir / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "HL_RUNTIME"}
    env.update({"PATH": f"{bin_dir}:{os.environ['PATH']}", "REAL_PY": sys.executable, "FAKE_ROOT": str(tmp_path),
                "HL_DEV_DIR": str(dev), "HL_MODEL": "/m"})
    jobs = ["--work /w --stages grpo", "!echo step $PWD $PYTHONPATH >> $FAKE_ROOT/order && exit 3",
            "!echo 'a typo, never closed", "--work /w --stages eval"]
    p = subprocess.run(["bash", str(EXP / "device" / "jobs.sh"), *jobs], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "started 4 job(s)" in p.stdout, p.stdout + p.stderr
    end = time.monotonic() + 60
    while not (dev / "jobs.done").exists() and time.monotonic() < end:
        time.sleep(0.2)
    assert (dev / "jobs.done").exists(), (dev / "jobs.log").read_text()
    src = dev / "jobs-src"
    order = (tmp_path / "order").read_text().splitlines()
    engine = "--runtime.executor shards:4 --runtime.concurrency 256 --runtime.spare-slots 0"
    assert order == [
        f"run {src} run --model /m --solver openai:qwen?base_url=http://127.0.0.1:8000/v1&timeout=300&prefill=true "
        f"{engine} --work /w --stages grpo",
        f"step {src} /tmp/site:{src}/src",  # a step runs against the copy of the code, as the runs do
        f"run {src} run --model /m --solver openai:qwen?base_url=http://127.0.0.1:8000/v1&timeout=300&prefill=true "
        f"{engine} --work /w --stages eval"], order
    log = (dev / "jobs.log").read_text()
    # a failed step, even one that does not parse, is logged and the next one runs
    assert "step 1 of 4" in log and "step 2 failed: exit 3" in log and "step 3 failed: exit 2" in log, log
    assert "step 4 of 4" in log, log
    assert (src / "experiments" / "qwen12.py").exists() and (src / "src" / "harnesslearn").is_dir()
    # the benchmarks come along (a step may be the peers benchmark), the peers' installed environments do not
    assert (src / "benchmarks" / "peers" / "run.py").exists() and not (src / "benchmarks" / "peers" / ".venvs").exists()
    end = time.monotonic() + 30  # the metrics sampler ends once the jobs have ended
    while subprocess.run(["pgrep", "-f", f"{src}/experiments/device/sample.sh"], capture_output=True).returncode == 0:
        assert time.monotonic() < end, "sample.sh outlived the jobs"
        time.sleep(0.5)
    assert (dev / "metrics.log").read_text().startswith("# t running waiting")


def test_reward_anatomy_reads_the_timing_of_newer_rollouts_and_skips_older_ones(tmp_path: Path) -> None:
    import gzip

    import qwen12_report as rep

    def cand(sec: float, slow: float, calls: int, statuses: dict | None) -> dict:
        return {"valid": True, "seconds": sec, "slowest_run_s": slow, "solver_calls": calls, "statuses": statuses}
    path = tmp_path / "rollouts.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"step": 0, "candidates": [{"valid": True, "J": 0.1}]}) + "\n")  # before the fields
        f.write(json.dumps({"step": 1, "candidates": [cand(2.0, 1.5, 4, {"ok": 4}), cand(9.0, 9.0, 12, {"ok": 2,
                                                                                                      "timeout": 2}),
                                                    {"valid": False, "seconds": 0.0, "statuses": None}]}) + "\n")
    rows = rep.reward_anatomy(rep.read_jsonl(path))
    assert [r["update"] for r in rows] == [2]
    r = rows[0]
    assert r["evaluated"] == 2 and r["max_s"] == 9.0 and r["slowest_run_s"] == 9.0 and r["solver_calls"] == 8.0
    assert r["timeout_share"] == 0.25
    assert rep.anatomy_md(rows)[-2].startswith("| 2 | 2 |")


def test_serve_solver_serves_adapters_by_name_and_refuses_a_folder_without_one(tmp_path: Path) -> None:
    ss = _serve_solver()
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "adapter_config.json").write_text("{}")
    lora = ss.loras(f"sft={tmp_path / 'sft'}")
    a = ss.argv("/m", 0.3, "graphs", lora)
    assert "--enable-lora" in a and a[a.index("--lora-modules") + 1] == f"sft={tmp_path / 'sft'}"
    with pytest.raises(SystemExit, match="LORA must be"):
        ss.loras(f"rl={tmp_path / 'nothing'}")
    cwd = os.getcwd()
    try:  # a relative folder is made absolute: the server runs from another folder than the stages
        os.chdir(tmp_path)
        assert ss.loras("sft=sft") == {"sft": str(tmp_path / "sft")}
    finally:
        os.chdir(cwd)
    execs: list[list[str]] = []
    ss.serve("/m", 0.3, "graphs", lora, call=lambda a: 1, execv=lambda p, a: execs.append(list(a)))
    assert execs == [ss.argv("/m", 0.3, "eager", lora)]  # the fallback keeps the adapters


def _jitcache(home: Path, *args: str) -> str:
    import subprocess

    p = subprocess.run(["bash", str(EXP / "device" / "jitcache.sh"), *args], env={**os.environ, "HOME": str(home)},
                       capture_output=True, text=True, check=True)
    return p.stdout


def test_jitcache_brings_the_caches_back_within_one_out_file_and_leaves_out_what_does_not_fit(tmp_path: Path) -> None:
    """experiments/device/jitcache.sh: out packs the caches that fit 15 MiB together (smallest first, the rest left
    out with a line saying so); in restores them under $HOME with their times; a file not carried is one line."""
    old, new = tmp_path / "old", tmp_path / "new"
    fi = old / ".cache/flashinfer/0.6.14/90a/cached_ops/sampling"
    fi.mkdir(parents=True)
    (fi / "sampling.so").write_bytes(os.urandom(1 << 20))
    os.utime(fi / "sampling.so", (1e9, 1e9))
    (old / ".triton/cache/k").mkdir(parents=True)
    (old / ".triton/cache/k/kernel.json").write_text("{}")
    (old / ".cache/vllm").mkdir(parents=True)
    (old / ".cache/vllm/big").write_bytes(os.urandom(16 << 20))  # incompressible, over the limit alone
    out = _jitcache(old, "out", str(tmp_path / "jit.tar"))
    assert ".cache/vllm" in out and "left out" in out and (tmp_path / "jit.tar").stat().st_size < 15 << 20
    assert "unpacked" in _jitcache(new, "in", str(tmp_path / "jit.tar"), str(tmp_path / "no-site"))
    restored = new / ".cache/flashinfer/0.6.14/90a/cached_ops/sampling/sampling.so"
    assert restored.read_bytes() == (fi / "sampling.so").read_bytes() and restored.stat().st_mtime == 1e9
    assert (new / ".triton/cache/k/kernel.json").is_file() and not (new / ".cache/vllm").exists()
    assert "not carried" in _jitcache(new, "in", str(tmp_path / "missing.tar"))
    assert "no cache" in _jitcache(tmp_path / "empty", "out", str(tmp_path / "none.tar"))
    assert not (tmp_path / "none.tar").exists()


@pytest.mark.skipif(not (shutil.which("ninja") and shutil.which("cc")), reason="needs ninja and a C compiler")
def test_jitcache_restores_a_flashinfer_style_ninja_build_that_needs_no_rebuild_after_a_fresh_install(
        tmp_path: Path) -> None:
    """The case that matters: objects built by ninja with gcc deps on one machine, the sources and headers they
    depend on installed anew (newer) on the next: after `in`, ninja has no work to do. Touching the restored
    objects instead (the first version) left every one of them dirty: ninja also checks its recorded times."""
    import subprocess
    import time

    home, site = tmp_path / "home", tmp_path / "site"
    (site / "inc").mkdir(parents=True)
    (site / "inc" / "k.h").write_text("#define K 3\n")
    (site / "k.c").write_text('#include "k.h"\nint k(void) { return K; }\n')
    build = home / ".cache/flashinfer/0.6.14/90a/cached_ops/k"
    build.mkdir(parents=True)
    (build / "build.ninja").write_text(
        f"rule cc\n  command = cc -MD -MF $out.d -I{site / 'inc'} -c $in -o $out\n  deps = gcc\n  depfile = $out.d\n"
        f"build {build / 'k.o'}: cc {site / 'k.c'}\n")

    def dry_run() -> str:
        return subprocess.run(["ninja", "-n", "-d", "explain", "-C", str(build)], capture_output=True, text=True,
                              check=True).stdout
    subprocess.run(["ninja", "-C", str(build)], capture_output=True, check=True)
    assert "no work to do" in dry_run()
    _jitcache(home, "out", str(tmp_path / "jit.tar"))
    import shutil as sh

    sh.rmtree(home / ".cache")  # a fresh machine: no cache, the wheels installed after the last build
    later = time.time() + 100
    for f in (site / "k.c", site / "inc" / "k.h"):
        os.utime(f, (later, later))
    _jitcache(home, "in", str(tmp_path / "jit.tar"), str(site))
    assert "no work to do" in dry_run()


def test_the_transfer_table_counts_distinct_valid_revisions_per_arm() -> None:
    """K proposals that are one revision repeated (a peaked proposer) show as valid (distinct) / proposals."""
    import qwen12_report as rep

    def row(arm: str, fam: str, valid: int, distinct: int | None) -> dict:
        r = {"arm": arm, "family": fam, "after_scores": [0.5, 1.0], "seed_scores": [0.0, 0.5], "proposals": 4,
             "parsed": 4, "produced": 4, "valid": valid, "improved": False}
        return r if distinct is None else {**r, "distinct": distinct}
    tr = rep.transfer([row("sft", "gcd", 4, 1), row("sft", "maze", 3, 2), row("base", "gcd", 2, None)])
    assert tr["rows"]["sft"]["validity"]["distinct"] == 3 and tr["rows"]["sft"]["validity"]["valid"] == 7
    assert tr["rows"]["base"]["validity"]["distinct"] is None  # an older row without the count: unknown
    md = "\n".join(rep.transfer_md(tr))
    assert "| 7 (3) / 8 |" in md and "| 2 (n/a) / 4 |" in md


def test_the_transfer_table_sets_each_proposer_against_the_best_zoo_harness_per_family() -> None:
    """Does a proposer go beyond what it was shown: its paired difference from the best zoo harness (families
    resampled) and how many families it beats it on."""
    import qwen12_report as rep

    def row(arm: str, fam: str, after: list[float]) -> dict:
        return {"arm": arm, "family": fam, "after_scores": after, "seed_scores": [0.0, 0.0], "proposals": 4,
                "valid": 1, "improved": False}
    tr = rep.transfer([row("zoo", "gcd", [1.0, 1.0]), row("zoo", "maze", [0.0, 0.5]),
                       row("rl", "gcd", [1.0, 0.0]), row("rl", "maze", [1.0, 1.0])])
    rl = tr["rows"]["rl"]
    assert rl["minus_zoo_families_resampled"]["mean"] == (-0.5 + 0.75) / 2 and rl["above_zoo_families"] == 1
    assert "minus_zoo_families_resampled" not in tr["rows"]["zoo"] and "minus_zoo_families_resampled" not in \
        tr["rows"]["seed"]
    md = "\n".join(rep.transfer_md(tr))
    assert "| 0.125 [" in md and "] (1) |" in md
    assert "| minimal seed (no revision) | 2 |" in md and " () / " not in md


def test_the_musique_table_sets_the_sequential_pick_against_the_best_zoo_harness() -> None:
    import qwen12_report as rep

    ci = {"mean": 0.25, "lo": 0.1, "hi": 0.4}
    r = {"arm": "rl", "rounds": 10, "n_test": 99, "n_score": 32, **{k: {"em": ci, "f1": ci} for k in rep.PICKS},
         "sequential_calls": {"valid": 9, "proposals": 10}, "independent_calls": {"valid": 8, "proposals": 10},
         "zoo": {"em": ci, "f1": {"mean": 0.4, "lo": 0.3, "hi": 0.5}}, "zoo_pick": {"name": "iterative_search"},
         "sequential_minus_zoo": {"f1": {"mean": -0.15, "lo": -0.3, "hi": 0.0}},
         "nearest_zoo": {"sequential": {"name": "retrieve_read", "ratio": 0.91}}}
    old = {k: v for k, v in r.items() if k not in ("zoo", "zoo_pick", "sequential_minus_zoo", "nearest_zoo")}
    md = rep.musique_sections([r, {**old, "arm": "base"}])
    line = next(x for x in md if x.startswith("| rl |"))
    assert line.endswith("| 0.400 [0.300, 0.500] (iterative_search) | -0.150 [-0.300, 0.000] | retrieve_read (0.91) |")
    assert next(x for x in md if x.startswith("| base |")).endswith("| n/a | n/a | n/a |")  # a row from before



def test_proposer_samples_judges_a_sample_as_the_proposal_it_completes() -> None:
    """experiments/proposer_samples.py: the prompt's started assistant turn + the sample is the proposal; a zoo file
    written back is valid and a near-copy, a broken body is invalid with its reason."""
    import proposer_samples as ps

    from harnesslearn import zoo
    from harnesslearn.harness import load_harness

    seed = load_harness("minimal").source
    prefill = f"<<<<<<< SEARCH\n{seed[seed.index('def solve'):]}=======\n"
    loop = zoo.source("interpreter_loop")
    good = ps.judge(prefill, loop + ">>>>>>> REPLACE\n")
    assert good["valid"] and good["reason"] is None and good["nearest_zoo"]["name"] == "interpreter_loop"
    assert good["nearest_zoo"]["ratio"] >= 0.8
    bad = ps.judge(prefill, "def solve(model, question):\n    return (\n>>>>>>> REPLACE\n")
    assert not bad["valid"] and bad["reason"] == "syntax_error" and bad["nearest_zoo"] is None
    assert good["source"].startswith(seed[:seed.index("def solve")]) and "source" not in bad


def test_proposer_samples_reads_a_reply_asked_for_in_words_as_its_format_reads_it() -> None:
    """--format chat-file: a whole file in a code block is the revision; the same reply cut by the token limit inside
    its block, or a reply with no code, is invalid (no_blocks), as adapt reads them."""
    import proposer_samples as ps

    from harnesslearn import zoo

    loop = zoo.source("interpreter_loop")
    reply = f"Here is the new harness:\n```python\n{loop}```\n"
    good = ps.judge("", reply, fmt="chat-file")
    assert good["valid"] and good["source"].strip() == loop.strip() and good["nearest_zoo"]["ratio"] >= 0.8
    cut = ps.judge("", reply[:len(reply) // 2], fmt="chat-file", hit_max_tokens=True)
    assert not cut["valid"] and cut["reason"] == "no_blocks" and "source" not in cut
    assert ps.judge("", "I would use math.gcd.", fmt="chat-file")["reason"] == "no_blocks"


def test_proposer_samples_families_mode_draws_each_arm_once_per_family_and_resumes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """experiments/proposer_samples.py --families: the eval stage's prompt (the minimal seed run by the solver on the
    feedback split, rendered chat-prefill) is built once per family; each arm's K candidates come through
    ``rounds.sample`` with the eval's candidate seeds and are judged; a rerun resumes from the rows (no new draw);
    ``--compare`` rows are judged the same way; the summary counts valid, near-copies and non-copy families."""
    import proposer_samples as ps

    import harnesslearn.models as models
    from harnesslearn import zoo
    from harnesslearn.models.base import Completion
    from harnesslearn.propose.rounds import candidate_seed

    (tmp_path / "models.py").write_text("def garbage(prompt, **kw):\n    return 'banana'\n")
    seeds: list[int] = []
    prompts: list[object] = []

    head = "def solve(model, question):\n"

    class Fake:
        spec = "fake"

        async def generate(self, req: object) -> Completion:
            seeds.append(req.seed)  # type: ignore[attr-defined]
            prompts.append(req.prompt)  # type: ignore[attr-defined]
            loop = zoo.source("interpreter_loop")  # the prompt ends inside the new solve's def line
            body = loop[loop.index(head) + len(head):] if len(seeds) % 2 else "    return (\n"
            return Completion([body + ">>>>>>> REPLACE\n"], prompt_tokens=100, completion_tokens=50)

        async def aclose(self) -> None:
            pass

    real = models.load_model
    monkeypatch.setattr(models, "load_model",  # the proposer arms are faked, the solver (python:) is real
                        lambda spec, **kw: Fake() if spec.startswith("local:") else real(spec, **kw))
    other = tmp_path / "other" / "eval_rows.jsonl"
    other.parent.mkdir()
    other.write_text(json.dumps({"arm": "base", "family": "gcd", "proposal_texts": [
        "<<<<<<< SEARCH\nno such text\n=======\nx\n>>>>>>> REPLACE\n"]}) + "\n"
        + json.dumps({"arm": "zoo", "family": "gcd", "candidate_score_J": {"interpreter_loop": 0.5, "few_shot": 0.9},
                      "seed_score_J": 0.2, "seed_test_J": 0.1, "picked": "interpreter_loop", "test_J": 0.6}) + "\n")
    args = ["--families", "gcd,basic_arithmetic", "--arm", "fake", "--k", "2", "--n-feedback", "2",
            "--solver", f"python:{tmp_path / 'models.py'}:garbage", "--rows", str(tmp_path / "rows.jsonl"),
            "--compare", str(other), "--implied", str(other), "--plot", str(tmp_path / "copies.png")]
    res = ps.main(args)
    assert seeds == [candidate_seed(1234, 1, 0), candidate_seed(1234, 1, 1)] * 2
    assert prompts[0][-1]["role"] == "assistant" and "<<<<<<< SEARCH" in prompts[0][-1]["content"]  # type: ignore
    assert "banana" in json.dumps(prompts[0])  # the seed's feedback traces are in the prompt
    fake = res["arms"]["fake"]
    assert (fake["families"], fake["samples"], fake["valid"], fake["near_zoo_copies"]) == (2, 4, 2, 2)
    assert fake["copied"] == {"interpreter_loop": 2} and fake["families_with_a_non_copy"] == 0
    assert res["arms"]["base (other)"]["valid"] == 0  # its SEARCH text is not in the seed
    # gcd's only valid sample copies the loop, which beat the seed there (0.5 > 0.2) and was the zoo's pick: its
    # test J is the other run's; basic_arithmetic has no zoo row there
    imp = res["implied"]["fake"]
    assert (imp["all_copy_families"], imp["adopted"], imp["test_J_known"], imp["mean_test_J"]) == (1, 1, 1, 0.6)
    assert imp["families"][0]["copied"] == "interpreter_loop" and imp["mean_best_zoo_test_J"] == 0.6
    assert (tmp_path / "copies.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = ps.read_rows(tmp_path / "rows.jsonl")
    assert [(r["arm"], r["family"]) for r in rows] == [("fake", "gcd"), ("fake", "basic_arithmetic")]
    assert set(json.loads((tmp_path / "rows.prompts.json").read_text())) == {"gcd", "basic_arithmetic"}
    ps.main(args)  # resumed: nothing drawn again
    assert len(seeds) == 4 and len(ps.read_rows(tmp_path / "rows.jsonl")) == 2
    with pytest.raises(SystemExit, match="another seed harness"):  # these prompts revise the minimal seed
        ps.main([*args, "--seed-harness", "zoo:interpreter_loop"])
    # contexts seeded with a zoo harness: the prompt revises the loop, and writing the loop back is no change
    zs = ps.main(["--families", "gcd", "--arm", "fake", "--k", "2", "--n-feedback", "2", "--seed-harness",
                  "zoo:interpreter_loop", "--solver", f"python:{tmp_path / 'models.py'}:garbage",
                  "--rows", str(tmp_path / "zoo" / "rows.jsonl")])
    assert "ATTEMPTS" in json.dumps(prompts[-1]) and zs["seed_harness"] == "zoo:interpreter_loop"
    assert zs["arms"]["fake"]["valid"] == 0 and zs["arms"]["fake"]["invalid"] == {"no_change": 1, "syntax_error": 1}


def test_proposer_samples_implied_follows_adapts_strict_rule_and_knows_only_the_zoo_picks_test_J(
        tmp_path: Path) -> None:
    """implied(): a copy that beats the seed's score J is adopted (its test J known only where it was the zoo pick),
    a copy that only ties the seed is not (the seed's test J); a family with a valid non-copy is left out."""
    import proposer_samples as ps

    def sample(name: str, ratio: float, valid: bool = True) -> dict[str, object]:
        return {"valid": valid, "nearest_zoo": {"name": name, "ratio": ratio} if valid else None}

    zoo_rows = tmp_path / "eval_rows.jsonl"
    zoo_rows.write_text("".join(json.dumps({"arm": "zoo", "family": f, "candidate_score_J": {"loop": lj, "cot": 0.4},
                                            "seed_score_J": 0.3, "seed_test_J": 0.2, "picked": pick, "test_J": 0.7})
                                + "\n" for f, lj, pick in (("a", 0.5, "loop"), ("b", 0.5, "cot"), ("c", 0.3, "loop"),
                                                           ("d", 0.9, "loop"))))
    rows = [{"arm": "x", "family": "a", "samples": [sample("loop", 0.9), sample("", 0, valid=False)]},
            {"arm": "x", "family": "b", "samples": [sample("loop", 0.95)]},
            {"arm": "x", "family": "c", "samples": [sample("loop", 0.85)]},
            {"arm": "x", "family": "d", "samples": [sample("loop", 0.9), sample("loop", 0.5)]}]
    got = ps.implied(rows, zoo_rows)["x"]
    fams = {f["family"]: (f["adopted"], f["test_J"]) for f in got["families"]}
    assert fams == {"a": (True, 0.7), "b": (True, None), "c": (False, 0.2)}  # d has a non-copy: left out
    assert (got["all_copy_families"], got["adopted"], got["test_J_known"]) == (3, 2, 2)
    assert got["mean_test_J"] == 0.45 and got["mean_seed_test_J"] == 0.2 and got["mean_best_zoo_test_J"] == 0.7


def test_proposer_samples_marks_a_revision_that_only_changes_whitespace() -> None:
    """mark_layout_only(): a sample recorded valid whose revision is its parent's program laid out anew (spaces, a
    comment) is flagged (the current rule calls it no_change); one that changes a token is not; an invalid one is
    not."""
    import proposer_samples as ps

    from harnesslearn.harness import load_harness

    seed = load_harness("minimal").source
    body = seed[seed.index("def solve"):]
    spaced = body.replace("prompt = f", "prompt  =  f").replace("    return", "    # the answer\n    return")
    other = body.replace("max_tokens=64", "max_tokens=65")
    rows = [{"family": "gcd", "samples": [
        {"valid": True, "text": f"<<<<<<< SEARCH\n{body}=======\n{spaced}>>>>>>> REPLACE\n"},
        {"valid": True, "text": f"<<<<<<< SEARCH\n{body}=======\n{other}>>>>>>> REPLACE\n"},
        {"valid": False, "text": "nothing"}]}]
    ps.mark_layout_only(rows, {})
    assert [s["layout_only"] for s in rows[0]["samples"]] == [True, False, False]


def test_the_ship_verdict_follows_the_issues_rule_and_beyond_the_zoo_asks_for_the_best_zoo_harness_too() -> None:
    """Item 6, two verdicts: a row that beats the untrained proposer ships (the issue's rule) but goes beyond the zoo
    only when it beats the best zoo harness too (a row that only matches it, as an adapter writing the zoo's
    interpreter loop back does, does not); an interval that touches 0 is not above it; a missing interval (no zoo
    arm) is never beyond the zoo."""
    import qwen12_report as rep

    def ci(lo: float, hi: float) -> dict[str, float]:
        return {"mean": (lo + hi) / 2, "lo": lo, "hi": hi}

    tr = {"rows": {
        "base": {"label": "base"},
        "sft": {"label": "SFT", "minus_base_families_resampled": ci(0.0, 0.2),
                "minus_zoo_families_resampled": ci(0.01, 0.1), "beyond_zoo": {"near_copy_share": 0.0}},
        "rl": {"label": "RL", "minus_base_families_resampled": ci(0.25, 0.45),
               "minus_zoo_families_resampled": ci(-0.03, 0.04), "beyond_zoo": {"near_copy_share": 1.0}}}}
    v = {x["arm"]: x for x in rep.ship_verdict(tr)}
    assert (v["rl"]["beats_base"], v["rl"]["beats_zoo"], v["rl"]["ship"], v["rl"]["beyond_zoo"]) == (
        True, False, True, False)
    assert (v["sft"]["beats_base"], v["sft"]["beats_zoo"], v["sft"]["ship"], v["sft"]["beyond_zoo"]) == (
        False, True, False, False)
    tr["rows"]["rl"]["minus_zoo_families_resampled"] = ci(0.02, 0.09)
    assert [(x["ship"], x["beyond_zoo"]) for x in rep.ship_verdict(tr)] == [(False, False), (True, True)]
    del tr["rows"]["rl"]["minus_zoo_families_resampled"]
    assert [(x["ship"], x["beyond_zoo"]) for x in rep.ship_verdict(tr)] == [(False, False), (True, False)]
    md = rep.verdict_md(rep.ship_verdict(tr))
    assert md[0].startswith("## Ship the adapter?")
    assert md[-2] == "| RL | 0.350 [0.250, 0.450] | yes | n/a | no | 100% | **yes** | **no** |"
    assert rep.verdict_md([]) == []


def test_compute_probe_sorts_revisions_by_what_they_do_with_the_solver(tmp_path: Path) -> None:
    import compute_probe

    def s(text: str, valid: bool = True, reason: str | None = None) -> dict[str, Any]:
        return {"text": text + "\n>>>>>>> REPLACE", "valid": valid, "reason": reason}

    samples = [
        s("    nums = [int(x) for x in re.findall(r'\\d+', question)]\n    return str(math.gcd(*nums))"),
        s("    code = model.generate([{'role': 'user', 'content': question}])[0]\n    return model.python(code)"),
        s("    return model(f'Q: {question}\\nA:', max_tokens=64).strip()"),
        s("    return model(prompt)", valid=False, reason="no_change"),
        s("    return (", valid=False, reason="syntax_error"),
    ]
    assert [compute_probe.kind(x) for x in samples] == [
        "computes", "solver_program", "prompt_level", "no_change", "invalid"]
    f = tmp_path / "out.json"
    f.write_text(json.dumps({"prompt": "p/gcd.json", "arms": {"base": {"samples": samples}}}))
    assert "| gcd.json | chat-prefill | base | 5 | 1 | 1 | 1 | 1 | 1 |" in compute_probe.table([f])
    # a sample that keeps its revised harness (since session 43) is read from it: a helper that gets the model and
    # calls model.python is a solver program, whatever the reply's text says
    whole = {"text": "```python\n...\n```", "valid": True, "reason": None, "source": (
        "def run(m, c):\n    return m.python(c)\n\ndef solve(model, question):\n    return run(model, model(question))\n")}
    assert compute_probe.kind(whole) == "solver_program"


def test_compute_probe_writes_a_prompt_in_the_chat_file_form(tmp_path: Path) -> None:
    """--file-form: the committed gcd prompt with its format section asking for the whole file in words, as
    formats.ChatFile renders it, the system message's last line saying so, and no started assistant turn; the
    rest of both messages unchanged."""
    import compute_probe

    from harnesslearn.propose.prompt import template

    src = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "gcd_proposer_prompt.json"
    out = tmp_path / "file.json"
    assert compute_probe.main(["--file-form", str(src), str(out)]) == 0
    before, after = json.loads(src.read_text()), json.loads(out.read_text())
    assert [m["role"] for m in after] == ["system", "user"]
    blocks, file = template("chat_reply_blocks"), template("chat_reply_file")
    assert before[0]["content"].endswith(blocks) and after[0]["content"] == before[0]["content"][:-len(blocks)] + file
    head = "## How to write your revision\n"
    assert after[1]["content"] == before[1]["content"][:before[1]["content"].index(head) + len(head)] + template("chat_file")
    committed = src.with_name("gcd_proposer_prompt_file.json")
    assert json.loads(committed.read_text()) == after  # the committed file is this form of the committed prompt
    with pytest.raises(SystemExit, match="not a revision prompt"):
        compute_probe.file_form([{"role": "user", "content": "hello"}])


# ---------------------------------------------------------------------- the trained proposer's programs
def test_programs_vs_zoo_loop_counts_the_loops_own_lines_in_programs_that_are_not_zoo_copies(tmp_path: Path) -> None:
    """experiments/programs_vs_zoo_loop.py: its markers are in the zoo's interpreter loop and in no prompt (checked);
    in a run's valid, distinct proposals (the seed, invalid ones and zoo near-copies left out) it counts the
    programs for model.python and those that carry a marker; the table says so per system."""
    import gzip
    import json

    import programs_vs_zoo_loop as pz

    from harnesslearn import zoo

    pz.check_markers()  # today's prompt shows none of them
    program = ('def solve(model, question):\n    reply = model.generate([{{"role": "system", "content": "{role}"}},\n'
               '        {{"role": "user", "content": f"Write a program that prints the answer to {{question}}"}}],'
               ' max_tokens=300)[0]\n    code = reply.split("```python")[-1].split("```")[0]\n'
               '    return model.python(code).strip()\n')
    marked = program.format(role="You are an expert Python programmer. Print the result.")
    plain = program.format(role="Write code.")
    harnesses = [{"id": "seed", "source": "def solve(model, question):\n    return model(question)\n"},
                 {"id": "a", "source": marked}, {"id": "a", "source": marked}, {"id": "b", "source": plain},
                 {"id": "c", "source": zoo.source("interpreter_loop")},
                 {"id": "d", "source": "def solve(", "invalid_reason": "syntax_error"}]
    (tmp_path / "b16" / "harnesses").mkdir(parents=True)
    (tmp_path / "b16" / "results.json").write_text(json.dumps({"meta": {"proposer_calls": 16}, "runs": [
        {"task": "rg:gcd", "seed": 0, "system": "hl-sequential@trained", "test_J": 0.5,
         "score_best_points": [[0, 0.25, "seed"]]}]}))
    (tmp_path / "b16" / "harnesses" / "rg_gcd-s0-hl-sequential@trained.json").write_text(
        json.dumps({"harnesses": harnesses}))
    got = pz.count(pz.grid_sources(tmp_path / "b16")["hl-sequential@trained"])
    assert got == {"valid": 3, "programs": 2, "with_any": 1, "markers": {"system role": 1}}
    with gzip.open(tmp_path / "rollouts.jsonl.gz", "wt") as f:
        f.write(json.dumps({"step": 0, "candidates": [{"valid": False, "proposal": ""}]}) + "\n")
    assert pz.main([str(tmp_path / "b16"), "--rollouts", str(tmp_path / "rollouts.jsonl.gz"),
                    "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| hl-sequential@trained | 3 | 2 | 1 (50%) | 1 | 0 | 0 | 0 | 0 |" in md
    assert "| updates 0-19 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 |" in md
