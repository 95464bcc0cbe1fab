"""Reasoning Gym tasks: bad config raises, same seed same problems, gold scores 1.0, splits
are disjoint; strict mode; scorer failures; the on-disk item cache."""

from __future__ import annotations

import pytest

from harnesslearn.errors import UserError
from harnesslearn.tasks import SPLITS, family_set, load_task
from harnesslearn.tasks.base import Problem
from harnesslearn.tasks.families import FAMILY_SETS, SLOW_FAMILIES
from harnesslearn.tasks.reasoning_gym import RGTask, rg_families

CHECKED = sorted(set(family_set("paper-train")) | set(family_set("paper-eval")))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSLEARN_CACHE_DIR", str(tmp_path / "cache"))


def test_there_are_105_families():
    fams = rg_families()
    assert len(fams) == 105
    assert "composite" not in fams


def test_family_sets_are_valid_and_disjoint():
    fams = set(rg_families())
    train, excluded, ev = (set(family_set(n)) for n in ("paper-train", "paper-excluded", "paper-eval"))
    assert len(ev) == 21 and len(train) == 5 and len(excluded) == 5
    assert train | excluded | ev <= fams
    assert not (train & ev) and not (excluded & ev) and not (train & excluded)
    assert not set(SLOW_FAMILIES) & ev


@pytest.mark.parametrize("family", CHECKED)
def test_gold_scores_one_and_same_seed_same_problems(family):
    a, b = load_task(f"rg:{family}"), load_task(f"rg:{family}")
    pa = a.problems("score", 3, seed=11)
    pb = b.problems("score", 3, seed=11)
    assert len(pa) == 3
    assert [(p.id, p.question, p.answer) for p in pa] == [(p.id, p.question, p.answer) for p in pb]
    for p in pa:
        assert isinstance(p.answer, str)
        assert p.metadata["family"] == family
        assert a.score(p.answer, p).value == 1.0, (p.id, p.answer)
    # a different seed gives (at least partly) different problems
    assert {p.question for p in a.problems("score", 3, seed=12)} != {p.question for p in pa}


@pytest.mark.parametrize("family", ["basic_arithmetic", "maze", "spell_backward"])
def test_splits_are_disjoint(family):
    task = load_task(f"rg:{family}")
    by_split = {s: {task.problem_key(p) for p in task.problems(s, 15, seed=3)} for s in SPLITS}
    assert all(len(v) == 15 for v in by_split.values())
    assert not by_split["feedback"] & by_split["score"]
    assert not by_split["feedback"] & by_split["test"]
    assert not by_split["score"] & by_split["test"]


def test_problem_ids_name_family_seed_index():
    task = load_task("rg:gcd")
    p = task.problems("test", 1, seed=5)[0]
    fam, s, idx = p.id.split("/")
    assert (fam, s) == ("gcd", "s5")
    again = task.problem(5, int(idx))
    assert (again.question, again.answer) == (p.question, p.answer)


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("rg:basic_arithmetc", "did you mean basic_arithmetic"),
        ("rg:basic_arithmetic?min_term=2", "did you mean min_terms"),
        ("rg:basic_arithmetic?min_terms=-3", "bad config"),
        ("rg:basic_arithmetic?min_terms=5&max_terms=2", "bad config"),
        ("rg:basic_arithmetic?seed=3", "--seed"),
        ("rg:basic_arithmetic?strict=maybe", "strict"),
        ("rg:", "needs a family"),
        ("rg:basic_arithmetic?size=50000000", "size must be at most 1,000,000"),  # it grew past 1.5 GB
        ("rg:basic_arithmetic?size=0", "size must be a positive integer"),
    ],
)
def test_bad_config_raises_one_line_user_error(spec, needle):
    with pytest.raises(UserError) as e:
        load_task(spec)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_config_values_reach_the_generator():
    task = load_task("rg:basic_arithmetic?min_terms=4&max_terms=4&max_digits=1&min_digits=1")
    for p in task.problems("feedback", 3, seed=0):
        assert p.metadata["entry"]["metadata"]["num_terms"] == 4


def _gold_six(task: RGTask) -> Problem:
    entry = {"question": "What is 2 * 3?", "answer": "6", "metadata": {}}
    return Problem("x/s0/0", entry["question"], "6", {"family": task.family, "seed": 0, "entry": entry})


def test_strict_mode_refuses_the_padded_answer():
    """STYLE.md: the base scorer gives "60" half credit against gold "6"; strict gives 0."""
    lax, strict = load_task("rg:basic_arithmetic"), load_task("rg:basic_arithmetic?strict=1")
    p = _gold_six(lax)
    assert lax.score("60", p).value == pytest.approx(0.5)
    assert strict.score("60", p).value == 0.0
    assert strict.score("60", p).details["raw"] == pytest.approx(0.5)
    assert strict.score("6", p).value == 1.0


def test_a_scorer_that_raises_scores_zero_with_a_flag():
    task = load_task("rg:prime_factorization")
    p = task.problems("feedback", 1, seed=0)[0]
    s = task.score(p.answer + " x", p)  # its scorer calls int() on each factor
    assert s.value == 0.0 and s.details.get("scorer_error") == 1.0


@pytest.mark.parametrize("answer", [None, 6, ["6"]])
def test_non_string_answers_score_zero(answer):
    task = load_task("rg:basic_arithmetic")
    assert task.score(answer, _gold_six(task)).value == 0.0  # type: ignore[arg-type]


def test_description_names_family_and_shows_an_example():
    d = load_task("rg:gcd").description
    assert "gcd" in d and "Example question" in d


def test_slow_items_are_cached_on_disk_and_reload_identically(tmp_path, monkeypatch):
    import harnesslearn.tasks.reasoning_gym as rgmod

    monkeypatch.setattr(rgmod, "DISK_CACHE_MIN_S", 0.0)  # cache everything for this test
    task = load_task("rg:maze")
    first = [task.problem(1, i) for i in range(3)]
    files = list((tmp_path / "cache").rglob("*.pkl"))
    assert len(files) == 3
    fresh = load_task("rg:maze")
    monkeypatch.setattr(fresh, "_dataset", lambda seed: pytest.fail("regenerated instead of cache"))
    again = [fresh._generate(1, i) for i in range(3)]
    assert [p.metadata["entry"] for p in first] == again


def test_stdout_stays_clean_while_generating(capsys):
    task = load_task("rg:bf")  # the bf compiler prints progress dots
    task.problems("feedback", 2, seed=0)
    assert capsys.readouterr().out == ""


def test_paper_eval_has_21_families_and_is_documented():
    from harnesslearn.tasks import families

    assert len(FAMILY_SETS["paper-eval"]) == 21
    assert all(f in (families.__doc__ or "") for f in FAMILY_SETS["paper-eval"])


_PRINT_PROBLEMS = """
import sys
from harnesslearn.tasks.reasoning_gym import RGTask
for fam in sys.argv[1:]:
    t = RGTask(fam)
    for i in range(3):
        p = t.problem(7, i)
        print(fam, i, repr(p.question), repr(p.answer))
"""


@pytest.mark.slow
def test_same_problems_in_processes_with_different_hash_seeds(tmp_path):
    """Generators that iterate over sets (rg_pinned.HASH_SENSITIVE) or use the global random
    module (list_functions) must still give the same problem for the same id in every process."""
    import os
    import subprocess
    import sys

    from harnesslearn.tasks.rg_pinned import HASH_SENSITIVE

    fams = ["isomorphic_strings", "ransom_note", "list_functions", "basic_arithmetic"]
    assert {"isomorphic_strings", "ransom_note"} <= HASH_SENSITIVE
    outs = []
    for hs in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hs, "HARNESSLEARN_CACHE_DIR": str(tmp_path / f"cache{hs}")}
        r = subprocess.run([sys.executable, "-c", _PRINT_PROBLEMS, *fams], capture_output=True, text=True,
                           env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(r.stdout)
    assert outs[0] == outs[1]
    assert len(outs[0].splitlines()) == 3 * len(fams)


def test_cache_root_ignores_the_response_cache_switch(monkeypatch, tmp_path):
    from harnesslearn.tasks.reasoning_gym import cache_root

    monkeypatch.setenv("HARNESSLEARN_CACHE", "0")  # "no response cache", not a folder named 0
    assert cache_root() == tmp_path / "cache" / "rg"
    monkeypatch.delenv("HARNESSLEARN_CACHE_DIR")
    assert cache_root().is_absolute() and cache_root().parts[-2:] == ("harnesslearn", "rg")


def test_codeio_generation_leaves_the_users_folder_byte_identical(tmp_path, monkeypatch):
    """codeio's generator executes sample programs that write files into the current directory (one
    overwrote a user's simulation_data.txt): its items are made in a private scratch directory."""
    monkeypatch.setenv("HARNESSLEARN_CACHE_DIR", str(tmp_path / "cache"))
    home = tmp_path / "user"
    home.mkdir()
    mine = home / "simulation_data.txt"
    mine.write_bytes(b"the user's own data\n")
    monkeypatch.chdir(home)
    task = load_task("rg:codeio")
    for split in ("feedback", "score"):
        assert len(task.problems(split, 10, seed=2)) == 10
    assert sorted(p.name for p in home.iterdir()) == ["simulation_data.txt"]
    assert mine.read_bytes() == b"the user's own data\n"
