"""Tools that harnesses reach through the model handle, run in the trusted process.

``search``: BM25 over a problem's paragraphs or a corpus file (``SearchIndex``).
"""

from harnesslearn.tools.search import SearchIndex, index_for_corpus, index_for_documents, read_corpus

__all__ = ["SearchIndex", "index_for_corpus", "index_for_documents", "read_corpus"]
