"""BM25 search over a small set of passages: the ``model.search(query, k)`` tool for QA tasks.

Runs in the trusted process: the executor's broker calls ``SearchIndex.search`` when a harness
calls ``model.search``. Built on ``bm25s`` (a core dependency; no other backend). Tokenisation is
bm25s's default: lower-case, words of two or more word characters, English stop words removed,
no stemming. Progress bars are switched off so nothing is printed.

What it does not do: no dense retrieval, no query expansion, no de-duplication of passages that
repeat in the corpus (a repeated passage can come back twice).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError

Document = dict[str, str]


def bm25s() -> Any:
    """The ``bm25s`` module, imported with JAX kept on the CPU: where JAX is installed (the GPU machines' images)
    bm25s runs a JAX top-k at import, and JAX's default is to reserve 75 % of the GPU's memory in the importing
    process (stretch 11's MuSiQue stage asked for 59 GiB beside vLLM). ``JAX_PLATFORMS`` set by the user wins."""
    import os

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import bm25s as module

    return module


class SearchIndex:
    """A BM25 index over ``{"title", "text"}`` documents (the title is indexed with the text)."""

    def __init__(self, documents: Sequence[dict[str, Any]]) -> None:
        self.documents: list[Document] = [
            {"title": str(d.get("title") or ""), "text": str(d.get("text") or "")} for d in documents
        ]
        self._retriever: Any = None
        self._lock = threading.Lock()  # bm25s retrieval is not documented as thread-safe
        texts = [f"{d['title']}\n{d['text']}" for d in self.documents]
        if not texts:
            return
        bm = bm25s()
        tokens = bm.tokenize(texts, stopwords="en", show_progress=False)
        retriever = bm.BM25()
        retriever.index(tokens, show_progress=False)
        self._retriever = retriever

    def __len__(self) -> int:
        return len(self.documents)

    def search(self, query: str, k: int = 5) -> list[Document]:
        """Up to ``k`` documents ranked by BM25 score, best first. Documents that share no
        (non-stop-word) token with the query score 0 and are never returned, so the list can be
        shorter than ``k`` or empty. Returns fresh dicts: callers may mutate them."""
        if self._retriever is None or not isinstance(query, str) or k <= 0:
            return []
        k = min(int(k), len(self.documents))
        q = bm25s().tokenize([query], stopwords="en", show_progress=False, return_ids=False)
        with self._lock:
            ids, scores = self._retriever.retrieve(q, k=k, show_progress=False, n_threads=1)
        return [dict(self.documents[int(i)]) for i, s in zip(ids[0], scores[0], strict=True) if s > 0]


def _fingerprint(documents: Sequence[dict[str, Any]]) -> str:
    h = hashlib.sha256()
    for d in documents:
        h.update(str(d.get("title") or "").encode())
        h.update(b"\0")
        h.update(str(d.get("text") or "").encode())
        h.update(b"\1")
    return h.hexdigest()


_INDEX_CACHE: OrderedDict[str, SearchIndex] = OrderedDict()
_INDEX_CACHE_SIZE = 256
_INDEX_CACHE_LOCK = threading.Lock()


def index_for_documents(documents: Sequence[dict[str, Any]]) -> SearchIndex:
    """A ``SearchIndex`` for ``documents``, reused when the same documents (by content) come
    again: a problem's paragraphs are indexed once however many harnesses search them.
    Keeps the last 256 indexes."""
    key = _fingerprint(documents)
    with _INDEX_CACHE_LOCK:
        hit = _INDEX_CACHE.get(key)
        if hit is not None:
            _INDEX_CACHE.move_to_end(key)
            return hit
    index = SearchIndex(documents)
    with _INDEX_CACHE_LOCK:
        _INDEX_CACHE[key] = index
        while len(_INDEX_CACHE) > _INDEX_CACHE_SIZE:
            _INDEX_CACHE.popitem(last=False)
    return index


class DocumentSearch:
    """The ``search`` tool of one task (trusted side): BM25 over the documents ``documents_of``
    gives for a problem, one index per problem, built on first use and kept (the last 256;
    identical document sets share one index through ``index_for_documents``)."""

    def __init__(self, documents_of: Callable[[Any], Sequence[dict[str, Any]] | None], size: int = 256) -> None:
        self.documents_of = documents_of
        self.size = size
        self._indexes: OrderedDict[str, SearchIndex] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, problem: Any, query: str, k: int) -> list[Document]:
        """Up to ``k`` documents for ``query`` among ``problem``'s. LookupError when the task has
        no documents for it (not a QA task)."""
        key = str(problem.id)
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._indexes.move_to_end(key)
        if index is None:
            docs = self.documents_of(problem)
            if docs is None:
                raise LookupError("search is not available for this task")
            index = index_for_documents(docs)
            with self._lock:
                self._indexes[key] = index
                while len(self._indexes) > self.size:
                    self._indexes.popitem(last=False)
        return index.search(query, k)


def read_corpus(path: str | Path) -> list[Document]:
    """Read a JSONL corpus (one ``{"title", "text", ...}`` object a line; extra fields are
    ignored). Cached per (path, size, mtime). Raises ``UserError`` naming the file and line for a
    missing file, bad JSON, or a line without a ``text`` field."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"corpus file not found: {p}")
    st = p.stat()
    return list(_read_corpus_cached(str(p.resolve()), st.st_size, st.st_mtime_ns))


@lru_cache(maxsize=8)
def _read_corpus_cached(path: str, size: int, mtime_ns: int) -> tuple[Document, ...]:
    from harnesslearn.fsutil import json_lines

    docs: list[Document] = []
    with open(path, encoding="utf-8") as f:
        for lineno, row in json_lines(path, f):
            if not isinstance(row.get("text"), str):
                raise UserError(f"{path}: line {lineno}: a corpus line needs a string 'text' field")
            docs.append({"title": str(row.get("title") or ""), "text": row["text"]})
    return tuple(docs)


def index_for_corpus(path: str | Path) -> SearchIndex:
    """A (cached) ``SearchIndex`` over a JSONL corpus file; see ``read_corpus``."""
    return index_for_documents(read_corpus(path))
