"""Multi-hop QA tasks: the shared data files and the official shapes; SQuAD EM/F1 over aliases;
splits by question id; errors for bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harnesslearn.errors import UserError
from harnesslearn.tasks import SPLITS, load_task
from harnesslearn.tasks.qa import qa_data_dir
from harnesslearn.tasks.textmatch import best_em_f1, normalize_answer, token_f1


def _data_dir() -> Path:
    d = qa_data_dir()
    if d is None:
        pytest.skip("no shared/data/qa found walking up from the repo (set HARNESSLEARN_QA_DATA)")
    return d


SHARED = [
    ("musique", "musique_dev_with_paragraphs.jsonl", 200),
    ("hotpotqa", "hotpotqa_dev_with_paragraphs.jsonl", 868),
    ("2wiki", "2wikimultihopqa_dev_with_paragraphs.jsonl", 510),
]


def test_shared_data_is_found_when_the_repo_sits_beside_it():
    here = Path(__file__).resolve()
    beside = any((d / "shared" / "data" / "qa").is_dir() for d in here.parents)
    if not beside and not os.environ.get("HARNESSLEARN_QA_DATA"):
        pytest.skip("this checkout has no shared/data/qa above it")
    assert qa_data_dir() is not None


@pytest.mark.parametrize("kind, fname, rows", SHARED)
def test_shared_files_load_gold_scores_one_and_seed_is_deterministic(kind, fname, rows):
    path = _data_dir() / fname
    task = load_task(f"{kind}:{path}")
    assert len(task) == rows  # type: ignore[arg-type]
    assert task.tools == ("python", "search")
    a = task.problems("score", 5, seed=1)
    b = load_task(f"{kind}:{path}").problems("score", 5, seed=1)
    assert [p.id for p in a] == [p.id for p in b] and len(a) == 5
    for p in a:
        assert isinstance(p.answer, list) and p.answer
        for alias in p.answer:
            s = task.score(alias, p)
            assert s.value == 1.0 and s.details == {"em": 1.0, "f1": 1.0}
        docs = task.search_documents(p)
        assert docs and all(set(d) == {"title", "text"} for d in docs)
        assert any(par["is_supporting"] for par in p.metadata["paragraphs"])


@pytest.mark.parametrize("kind, fname, rows", SHARED)
def test_splits_are_disjoint_and_cover_the_file(kind, fname, rows):
    task = load_task(f"{kind}:{_data_dir() / fname}")
    ids = {s: {p.id for p in task.problems(s, 10_000, seed=0)} for s in SPLITS}
    assert sum(len(v) for v in ids.values()) == rows
    assert not ids["feedback"] & ids["score"] and not ids["score"] & ids["test"] and not ids["feedback"] & ids["test"]
    # the split of a question does not depend on the seed
    assert {p.id for p in task.problems("test", 10_000, seed=9)} == ids["test"]


def test_relative_path_is_looked_up_in_the_shared_folder():
    _data_dir()
    assert load_task("musique:musique_train_with_paragraphs.jsonl").spec.startswith("musique:")


def test_metric_f1_makes_f1_the_value():
    task = load_task(f"musique:{_data_dir() / 'musique_dev_with_paragraphs.jsonl'}?metric=f1")
    p = task.problems("feedback", 1)[0]
    s = task.score(f"{p.answer[0]} and more words here", p)
    assert s.details["em"] == 0.0 and 0.0 < s.value == s.details["f1"] < 1.0


def test_corpus_option_searches_the_corpus():
    d = _data_dir()
    task = load_task(f"musique:{d / 'musique_dev_with_paragraphs.jsonl'}?corpus={d / 'musique_dev200_corpus.jsonl'}")
    p = task.problems("feedback", 1)[0]
    docs = task.search_documents(p)
    assert docs is not None and len(docs) == 3141


# ---------------------------------------------------------------------- official shapes
def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_official_musique_shape(tmp_path):
    rows = [
        {"id": "2hop__1", "question": "Q one?", "answer": "Paris", "answer_aliases": ["City of Light"],
         "answerable": True, "paragraphs": [{"idx": 0, "title": "P", "paragraph_text": "Paris is...",
                                             "is_supporting": True}]},
        {"id": "2hop__2", "question": "Q two?", "answer": "x", "answer_aliases": [], "answerable": False,
         "paragraphs": []},
    ]
    f = _write(tmp_path, "m.jsonl", "\n".join(json.dumps(r) for r in rows))
    task = load_task(f"musique:{f}")
    assert len(task) == 1  # type: ignore[arg-type]  # the unanswerable row is skipped
    p = next(task.candidates(0))
    assert p.answer == ["Paris", "City of Light"]
    assert task.score("the city of light", p).value == 1.0
    assert task.search_documents(p) == [{"title": "P", "text": "Paris is..."}]


def test_official_hotpotqa_shape_json_list(tmp_path):
    rows = [{"_id": "h1", "question": "Were both American?", "answer": "yes", "type": "comparison",
             "supporting_facts": [["A", 0]], "context": [["A", ["A is American.", " Born 1900."]], ["B", ["B."]]]}]
    f = _write(tmp_path, "h.json", json.dumps(rows, indent=1))
    task = load_task(f"hotpotqa:{f}")
    p = next(task.candidates(0))
    assert p.metadata["paragraphs"][0] == {"title": "A", "text": "A is American. Born 1900.", "is_supporting": True}
    assert p.metadata["type"] == "comparison"
    assert task.score("Yes.", p).value == 1.0
    assert task.score("yes they were", p).details["f1"] == 0.0  # HotpotQA's yes/no rule


@pytest.mark.parametrize(
    "content, needle",
    [
        ('{"id": "a", "question": "q?", "answers": ["x"]}\n{"id": "b", "question": \n', "line 2"),
        ('{"id": "a", "answers": ["x"]}\n', "missing field 'question'"),
        ('{"id": "a", "question": "q?"}\n', "missing field 'answers'"),
        ('{"id": "a", "question": "q?", "answers": [""]}\n', "no non-empty gold"),
        ('{"id": "a", "question": "q?", "answers": ["x"]}\n{"id": "a", "question": "r?", "answers": ["y"]}\n',
         "duplicate id"),
        ("", "no questions"),
    ],
)
def test_bad_files_raise_one_line(tmp_path, content, needle):
    f = _write(tmp_path, "bad.jsonl", content)
    with pytest.raises(UserError) as e:
        load_task(f"2wiki:{f}")
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "spec, needle",
    [("musique:/nonexistent/x.jsonl", "file not found"), ("musique:", "missing file path")],
)
def test_missing_file(spec, needle):
    with pytest.raises(UserError, match=needle):
        load_task(spec)


def test_unknown_option_and_metric(tmp_path):
    f = _write(tmp_path, "ok.jsonl", '{"id": "a", "question": "q?", "answers": ["x"]}\n')
    with pytest.raises(UserError, match="did you mean metric"):
        load_task(f"musique:{f}?metirc=f1")
    with pytest.raises(UserError, match="unknown metric"):
        load_task(f"musique:{f}?metric=bleu")


# ---------------------------------------------------------------------- scoring
def test_squad_normalisation_and_alias_maximum():
    assert normalize_answer("The  Beatles!") == "beatles"
    assert best_em_f1("an apple", ["Apple", "pear"]) == (1.0, 1.0)
    em, f1 = best_em_f1("red apple", ["apple"])
    assert em == 0.0 and f1 == pytest.approx(2 / 3)
    assert token_f1("no", "yes", yes_no_rule=True) == 0.0
    assert token_f1("yes it is", "yes", yes_no_rule=False) > 0.0


@pytest.mark.parametrize("rows, corpus, needle", [
    ([{"id": "a", "question": "q?", "answers": ["x"]}], None, "question 'a' of q.jsonl has no paragraphs"),
    ([{"id": "a", "question": "q?", "answers": ["x"], "paragraphs": [{"title": "", "text": "the of a"}]}], None,
     "no paragraphs to search"),
    ([{"id": "a", "question": "q?", "answers": ["x"]}], "", "has nothing to search"),
    ([{"id": "a", "question": "q?", "answers": ["x"]}], '{"title": "", "text": "a, the; of!"}\n', "has nothing to search"),
])
def test_a_qa_task_with_nothing_to_search_is_refused_at_load(tmp_path, rows, corpus, needle):
    """A question that can only score 0 (no paragraphs and no corpus, an empty corpus, one without a word
    the index keeps) is a user mistake, said at load, not a column of zeros."""
    f = _write(tmp_path, "q.jsonl", "\n".join(json.dumps(r) for r in rows))
    spec = f"2wiki:{f}"
    if corpus is not None:
        spec += f"?corpus={_write(tmp_path, 'c.jsonl', corpus)}"
    with pytest.raises(UserError) as e:
        load_task(spec)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_questions_without_paragraphs_load_with_a_corpus(tmp_path):
    f = _write(tmp_path, "q.jsonl", json.dumps({"id": "a", "question": "q?", "answers": ["x"]}))
    c = _write(tmp_path, "c.jsonl", json.dumps({"title": "Paris", "text": "Paris is the capital."}))
    task = load_task(f"2wiki:{f}?corpus={c}")
    assert task.search_documents(next(task.candidates(0))) == [{"title": "Paris", "text": "Paris is the capital."}]
