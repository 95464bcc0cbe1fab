"""The BM25 search tool."""

from __future__ import annotations

import json

import pytest

from harnesslearn.errors import UserError
from harnesslearn.tools.search import SearchIndex, index_for_corpus, index_for_documents, read_corpus

DOCS = [
    {"title": "Paris", "text": "Paris is the capital of France."},
    {"title": "Berlin", "text": "Berlin is the capital of Germany."},
    {"title": "Cats", "text": "Cats are small domesticated carnivores."},
]


def test_ranks_the_matching_document_first():
    idx = SearchIndex(DOCS)
    hits = idx.search("capital of Germany", k=2)
    assert hits[0] == {"title": "Berlin", "text": "Berlin is the capital of Germany."}
    assert len(hits) == 2  # "capital" also matches Paris


def test_title_is_indexed():
    assert SearchIndex(DOCS).search("paris", k=1)[0]["title"] == "Paris"


@pytest.mark.parametrize("query, k", [("zebra quagga", 5), ("the of is", 5), ("", 5), ("cats", 0), ("cats", -1)])
def test_nothing_relevant_gives_nothing(query, k):
    assert SearchIndex(DOCS).search(query, k=k) == []


def test_k_larger_than_corpus_and_empty_corpus():
    assert len(SearchIndex(DOCS).search("capital cats", k=50)) == 3
    assert SearchIndex([]).search("anything") == []


def test_results_are_copies():
    idx = SearchIndex(DOCS)
    idx.search("cats")[0]["text"] = "mutated"
    assert idx.search("cats")[0]["text"] == DOCS[2]["text"]


def test_index_cache_reuses_identical_documents():
    a = index_for_documents([dict(d) for d in DOCS])
    assert index_for_documents([dict(d) for d in DOCS]) is a
    assert index_for_documents(DOCS[:2]) is not a


def test_is_quiet(capsys):
    SearchIndex(DOCS * 50).search("capital")
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_corpus_file(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_text("".join(json.dumps({**d, "id": i}) + "\n" for i, d in enumerate(DOCS)), encoding="utf-8")
    assert read_corpus(f) == DOCS
    assert index_for_corpus(f).search("domesticated")[0]["title"] == "Cats"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(DOCS[0]) + "\n{nope\n", encoding="utf-8")
    with pytest.raises(UserError, match="line 2"):
        read_corpus(bad)
    with pytest.raises(UserError, match="not found"):
        read_corpus(tmp_path / "missing.jsonl")
