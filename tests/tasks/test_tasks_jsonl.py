"""User JSONL tasks: scorers, bad input, determinism, disjoint splits; spec parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnesslearn.errors import UserError
from harnesslearn.tasks import SPLITS, load_task, parse_spec
from harnesslearn.tasks.textmatch import parse_number


def _file(tmp_path: Path, rows: list[dict], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


ROWS = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(60)]


@pytest.mark.parametrize("scorer", ["exact", "f1", "numeric"])
def test_gold_scores_one_same_seed_same_problems_disjoint_splits(tmp_path, scorer):
    f = _file(tmp_path, ROWS)
    task = load_task(f"jsonl:{f}?scorer={scorer}")
    a = task.problems("score", 5, seed=4)
    assert [p.id for p in a] == [p.id for p in load_task(f"jsonl:{f}?scorer={scorer}").problems("score", 5, seed=4)]
    assert all(task.score(p.answer, p).value == 1.0 for p in a)
    ids = {s: {p.id for p in task.problems(s, 100, seed=0)} for s in SPLITS}
    assert sum(map(len, ids.values())) == 60
    assert not ids["feedback"] & ids["score"] and not ids["score"] & ids["test"] and not ids["feedback"] & ids["test"]


def _score(tmp_path, scorer, gold, answer):
    task = load_task(f"jsonl:{_file(tmp_path, [{'id': 1, 'question': 'q', 'answer': gold}])}?scorer={scorer}")
    return task.score(answer, next(task.candidates(0)))


@pytest.mark.parametrize(
    "scorer, gold, answer, value",
    [
        ("exact", "Paris", "  paris ", 1.0),
        ("exact", "New  York", "new york", 1.0),
        ("exact", "Paris", "Paris.", 0.0),
        ("exact", ["NYC", "New York"], "new york", 1.0),
        ("numeric", 1000, "1,000", 1.0),
        ("numeric", "0.75", "3/4", 1.0),
        ("numeric", "5", "$5.00", 1.0),
        ("numeric", "2500", "2.5e3", 1.0),
        ("numeric", 1 / 3, "0.3333333333", 1.0),
        ("numeric", "0.333", "1/3", 0.0),
        ("numeric", "4", "the answer is 4", 0.0),
        ("numeric", "6", "60", 0.0),
        ("numeric", "0", "0.0", 1.0),
        ("f1", "the red apple", "Red apple!", 1.0),
        ("f1", "red apple", "green apple", 0.5),
    ],
)
def test_scorers(tmp_path, scorer, gold, answer, value):
    assert _score(tmp_path, scorer, gold, answer).value == pytest.approx(value)


@pytest.mark.parametrize("text", ["1,00", "12,3456", "abc", "1/0", "", "nan", "inf", "--1"])
def test_parse_number_refuses(text):
    assert parse_number(text) is None


@pytest.mark.parametrize(
    "lines, needle",
    [
        (['{"id": 1, "question": "q", "answer": "a"}', '{"id": 2, "question": "q2" "answer": "b"}'], "line 2"),
        (['{"id": 1, "question": "q"}'], "missing field(s) answer"),
        (['{"id": 1, "question": "q", "answer": "a"}', '{"id": 1, "question": "r", "answer": "b"}'], "duplicate id"),
        (['{"id": 1, "question": "", "answer": "a"}'], "question"),
        (['{"id": 1, "question": "q", "answer": {"x": 1}}'], "'answer' must be"),
        (['[1, 2]'], "expected a JSON object"),
    ],
)
def test_bad_lines_raise_one_line_naming_the_line(tmp_path, lines, needle):
    f = tmp_path / "bad.jsonl"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(UserError) as e:
        load_task(f"jsonl:{f}")
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_numeric_gold_must_parse(tmp_path):
    f = _file(tmp_path, [{"id": 1, "question": "q", "answer": "many"}])
    with pytest.raises(UserError, match="not a number"):
        load_task(f"jsonl:{f}?scorer=numeric")


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("jsonl:/no/such/file.jsonl", "file not found"),
        ("jsonl:{f}?scorer=fuzzy", "unknown scorer"),
        ("jsonl:{f}?scorr=f1", "did you mean scorer"),
        ("jsonl:{f}?scorer=f1&scorer=exact", "given twice"),
        ("jsonl:{f}?scorer", "key=value"),
        ("jsnl:{f}", "did you mean jsonl"),
        ("nocolon", "needs a prefix"),
        ("", "empty task spec"),
    ],
)
def test_bad_specs(tmp_path, spec, needle):
    f = _file(tmp_path, ROWS[:3])
    with pytest.raises(UserError) as e:
        load_task(spec.format(f=f))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_parse_spec_values():
    prefix, rest, opts = parse_spec('rg:fam?a=3&b=0.5&c=true&d=[1,2]&e=word&f=-2&g=1e-3&h={"k":1}')
    assert (prefix, rest) == ("rg", "fam")
    assert opts == {"a": 3, "b": 0.5, "c": True, "d": [1, 2], "e": "word", "f": -2, "g": 1e-3, "h": {"k": 1}}


def _rows(tmp_path, n=12):
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                         for i in range(n)))
    return f


@pytest.mark.parametrize("body, needle", [
    ("return 0.5", None),
    ("raise KeyError('gold')", "the scorer .* raised KeyError"),
    ("return 1.5", "returned 1.5 .* a score is a number in \\[0, 1\\]"),
    ("return True", "returned True"),
    ("return float('nan')", "returned nan"),
    ("return '1'", "returned '1'"),
    ("import numpy; return numpy.float32(0.5)", None),  # issue 65, item 8: refused before
    ("import decimal; return decimal.Decimal('0.5')", None),
    ("import numpy; return numpy.bool_(True)", "returned"),
    ("import decimal; return decimal.Decimal('NaN')", "returned"),
    ("import sys; sys.exit(0)", "the scorer .* raised SystemExit"),  # issue 65, item 6: exit 0, nothing said
    ("raise SystemExit(3)", "the scorer .* raised SystemExit: 3"),  # exit 3 read as "invalid edit"
    ("raise KeyboardInterrupt", "the scorer .* raised KeyboardInterrupt"),
])
def test_a_users_scorer_gives_partial_credit_or_a_clear_error(tmp_path, body, needle):
    """`jsonl:FILE?scorer=FILE.py:FUNCTION`: the user's metric, in [0, 1]; a raise or a value out of range
    is one UserError naming the scorer and the problem, never a silent 0."""
    f = _rows(tmp_path)
    (tmp_path / "metric.py").write_text(f"def grade(answer, problem):\n    {body}\n")
    task = load_task(f"jsonl:{f}?scorer={tmp_path / 'metric.py'}:grade")
    p = next(task.candidates(0))
    if needle is None:
        assert task.score("anything", p).value == 0.5
        return
    with pytest.raises(UserError, match=needle) as e:
        task.score("anything", p)
    assert p.id in str(e.value) and "\n" not in str(e.value)


def test_a_scorer_reference_that_does_not_resolve_is_refused_at_load(tmp_path):
    f = _rows(tmp_path)
    with pytest.raises(UserError, match="scorer file not found"):
        load_task(f"jsonl:{f}?scorer={tmp_path / 'nope.py'}:grade")
    with pytest.raises(UserError, match="has no callable 'missing'"):
        load_task(f"jsonl:{f}?scorer=harnesslearn.stats:missing")


def test_custom_task_from_python(tmp_path):
    from harnesslearn.tasks.custom import custom_task

    task = custom_task("mine", [{"id": 1, "question": "q one?", "answer": "a", "extra": 3},
                                {"id": 2, "question": "q two?", "answer": "b"}], lambda ans, p: float(ans == p.answer))
    p = next(pp for pp in task.candidates(0) if pp.id == "1")
    assert task.score("a", p).value == 1.0 and task.score("b", p).value == 0.0 and p.metadata == {"extra": 3}
    with pytest.raises(UserError, match="duplicate problem id"):
        custom_task("dup", [{"id": 1, "question": "q?"}, {"id": 1, "question": "r?"}], lambda a, p: 0.0)
    with pytest.raises(UserError, match="no problems"):
        custom_task("none", [], lambda a, p: 0.0)


@pytest.mark.parametrize("line, needle", [
    ('{"id": "q1", "question": "x?", "answer": "1", "n": ' + "9" * 5000 + "}", "line 2: Exceeds the limit"),
    ('{"id": "q1\\ud800", "question": "x?", "answer": "1"}', "line 2: field 'id' holds a lone surrogate"),
    ('{"id": "q1", "question": "x\\udfff?", "answer": "1"}', "line 2: field 'question' holds a lone surrogate"),
    ('{"id": "q1", "question": "x?", "answer": ["1", "\\ud800"]}', "line 2: field 'answer\\[1\\]' holds"),
])
def test_hostile_jsonl_rows_are_refused_naming_the_file_and_line(tmp_path, line, needle):
    """Issue 65, item 7: an integer of over 4,300 digits gave a ValueError traceback, a lone surrogate in an id or a
    question a UnicodeEncodeError one (tasks preview, run), exit 1. Now one line naming the file and line."""
    f = tmp_path / "hostile.jsonl"
    f.write_text(json.dumps({"id": "q0", "question": "y?", "answer": "2"}) + "\n" + line + "\n")
    with pytest.raises(UserError, match="hostile.jsonl: " + needle) as e:
        load_task(f"jsonl:{f}")
    assert "\n" not in str(e.value)
    g = tmp_path / "hostile.json"  # the JSON-list form too
    g.write_text("[" + json.dumps({"id": "q0", "question": "y?", "answer": "2"}) + ", " + line + "]")
    with pytest.raises(UserError, match="hostile.json: "):
        load_task(f"jsonl:{g}")


def test_an_option_value_of_over_4300_digits_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="digits"):
        load_task(f"jsonl:{_rows(tmp_path)}?n_score=" + "9" * 5000)


@pytest.mark.parametrize("spec", ["jsonl:{f}?scorer=", "jsonl:{f}?scorer=%20"])
def test_an_empty_option_value_is_refused_not_the_default(tmp_path, spec):
    """Issue 65, item 8: `?scorer=` silently meant exact match (`?adapter=` the untrained proposer)."""
    with pytest.raises(UserError, match="option 'scorer' has no value"):
        load_task(spec.format(f=_rows(tmp_path)))
