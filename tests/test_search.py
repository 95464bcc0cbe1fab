"""The BM25 search tool."""

from __future__ import annotations

import json
import os
from pathlib import Path

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


JAX_STUB = {
    "jax/__init__.py": "import os\nwith open(os.environ['JAX_SEEN'], 'a') as f:\n"
                       "    f.write(os.environ.get('JAX_PLATFORMS', '<unset>') + '\\n')\n",
    "jax/lax.py": "import numpy as np\n\ndef top_k(x, k):\n    x = np.asarray(x)\n"
                  "    i = np.argsort(-x, axis=-1, kind='stable')[..., :k]\n"
                  "    return np.take_along_axis(x, i, axis=-1), i\n",
    "jax/numpy.py": "from numpy import *  # noqa\n",
}


@pytest.mark.parametrize("preset", [None, "cuda"])
def test_bm25s_imports_jax_only_with_jax_kept_on_the_cpu_unless_the_user_said_otherwise(
        tmp_path: Path, preset: str | None) -> None:
    """Where JAX is installed (the GPU images), bm25s runs a JAX top-k when it is imported, and JAX reserves 75 % of
    the GPU's memory in that process by default (stretch 11: a 59 GiB request beside vLLM). The search index, the
    memory's retrieval and the QA task's passage filter import bm25s with ``JAX_PLATFORMS=cpu``; a value the user
    set stays. A stub ``jax`` package records what it saw, and the search still ranks through it."""
    import subprocess
    import sys

    for name, text in JAX_STUB.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    seen = tmp_path / "seen.txt"
    code = ("from harnesslearn.tools.search import SearchIndex\n"
            "ix = SearchIndex([{'title': 'Paris', 'text': 'Paris is the capital of France'},"
            " {'title': 'Rome', 'text': 'Rome is the capital of Italy'}])\n"
            "print(ix.search('capital of Italy', 1)[0]['title'])\n")
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env.update(PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]), JAX_SEEN=str(seen),
               **({"JAX_PLATFORMS": preset} if preset else {}))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "Rome"
    assert seen.read_text().split() == [preset or "cpu"]
