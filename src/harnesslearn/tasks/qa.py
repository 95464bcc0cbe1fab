"""Multi-hop QA tasks: ``musique:PATH``, ``hotpotqa:PATH``, ``2wiki:PATH`` (``?metric=em|f1``,
``?corpus=PATH``).

File shapes read (JSON list or JSONL, detected from the first character):
- the shared files (``shared/data/qa``): ``id``, ``question``, ``answers`` (gold first, then
  aliases), ``paragraphs`` as ``{title, text, is_supporting}``;
- official MuSiQue: ``id``, ``question``, ``answer`` + ``answer_aliases``, ``paragraphs`` as
  ``{title, paragraph_text, is_supporting}``; rows with ``answerable: false`` are skipped;
- official HotpotQA / 2WikiMultihopQA: ``_id``, ``question``, ``answer``, ``context`` as
  ``[title, [sentences]]`` pairs, ``supporting_facts`` as ``[title, sentence_id]`` pairs.

Each problem's ``answer`` is the list of gold aliases and its metadata carries its paragraphs for
the ``search`` tool. Scoring follows the official scripts: SQuAD normalisation, EM and F1 best
over aliases, and for HotpotQA and 2Wiki F1 = 0 when one side is yes/no/noanswer and they
differ. ``Score.value`` is EM unless ``metric=f1``; details always hold both.

Order and splits: ``candidates(seed)`` is the file's problems shuffled by ``Random(seed)``; the
split of a problem depends only on the dataset name and the question id, so the same question
is in the same split whichever file or seed it comes from.

Two files (``select=PATH``, built in code: ``QATask(..., select=PATH)``): the test split is every
question of the main file, the feedback and score splits come from the ``select`` file (a question
of it is in feedback when its id hash is below ``SELECT_SIZES.feedback``, else in score: 16 and 134
of the 150 shared MuSiQue train questions); each split is its questions shuffled by ``Random(seed)``.
The two files must share no id and no question. With a corpus for the main file, the select file's
questions search the deduplicated union of the select file's paragraphs (the same construction as
the shared dev corpus), else each question its own paragraphs.
"""

from __future__ import annotations

import os
import random
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError
from harnesslearn.tasks.base import SPLITS, FileTask, Problem, Score, SplitSizes, check_question, split_of
from harnesslearn.tasks.files import read_records, resolve_path
from harnesslearn.tasks.textmatch import best_em_f1

QA_KINDS = {"musique": "MuSiQue", "hotpotqa": "HotpotQA", "2wiki": "2WikiMultihopQA"}
METRICS = ("em", "f1")
_EXTRA_FIELDS = ("hops", "type", "level")
# the split of a ``select`` file's question (by its id hash): feedback below 0.1, else score; never test
SELECT_SIZES = SplitSizes(feedback=0.1, score=0.9, test=0.0)


def qa_data_dir() -> Path | None:
    """The shared QA data folder: ``$HARNESSLEARN_QA_DATA``, else the first ``shared/data/qa``
    found walking up from the current directory or from this package's source."""
    env = os.environ.get("HARNESSLEARN_QA_DATA")
    if env:
        return Path(env) if Path(env).is_dir() else None
    for start in (Path.cwd(), Path(__file__).resolve()):
        for d in (start, *start.parents):
            cand = d / "shared" / "data" / "qa"
            if cand.is_dir():
                return cand
    return None


def _paragraphs(row: dict[str, Any], where: str) -> list[dict[str, Any]]:
    if isinstance(row.get("paragraphs"), list):
        out = []
        for p in row["paragraphs"]:
            if not isinstance(p, dict):
                raise UserError(f"{where}: each paragraph must be an object")
            text = p.get("text", p.get("paragraph_text"))
            out.append({"title": str(p.get("title") or ""), "text": str(text or ""),
                        "is_supporting": bool(p.get("is_supporting", False))})
        return out
    if isinstance(row.get("context"), list):  # HotpotQA / 2Wiki: [title, [sentences]]
        supporting = {str(sf[0]) for sf in row.get("supporting_facts") or [] if isinstance(sf, list) and sf}
        out = []
        for pair in row["context"]:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], list)):
                raise UserError(f"{where}: 'context' must hold [title, [sentences]] pairs")
            title = str(pair[0])
            text = " ".join(str(s).strip() for s in pair[1])
            out.append({"title": title, "text": text, "is_supporting": title in supporting})
        return out
    return []


def _indexable(doc: dict[str, Any]) -> bool:
    """Whether a passage holds a word the search index keeps (two or more word characters, not an
    English stop word: bm25s's tokenisation)."""
    from harnesslearn.tools.search import bm25s

    bm25s()  # JAX, where installed, kept off the GPU before bm25s imports it
    from bm25s.stopwords import STOPWORDS_EN

    words = re.findall(r"(?u)\b\w\w+\b", f"{doc.get('title', '')} {doc.get('text', '')}".lower())
    return any(w not in STOPWORDS_EN for w in words)


def _answers(row: dict[str, Any], where: str) -> list[str]:
    if isinstance(row.get("answers"), list):
        raw = row["answers"]
    elif "answer" in row:
        raw = [row["answer"], *(row.get("answer_aliases") or [])]
    else:
        raise UserError(f"{where}: missing field 'answers' (or 'answer')")
    out: list[str] = []
    for a in raw:
        if isinstance(a, str | int | float) and str(a).strip() and str(a) not in out:
            out.append(str(a))
    if not out:
        raise UserError(f"{where}: no non-empty gold answer")
    return out


def _problem(kind: str, where: str, row: dict[str, Any]) -> Problem | None:
    if row.get("answerable") is False:
        return None
    qid = row.get("id", row.get("_id"))
    if not isinstance(qid, str | int) or str(qid) == "":
        raise UserError(f"{where}: missing field 'id'")
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise UserError(f"{where}: missing field 'question'")
    check_question(where, qid, question)
    meta: dict[str, Any] = {"family": kind, "paragraphs": _paragraphs(row, where)}
    meta.update({k: row[k] for k in _EXTRA_FIELDS if row.get(k) is not None})
    return Problem(id=str(qid), question=question, answer=_answers(row, where), metadata=meta)


@lru_cache(maxsize=16)
def _load(kind: str, path: str, size: int, mtime_ns: int) -> tuple[Problem, ...]:
    name = os.path.basename(path)
    problems: list[Problem] = []
    seen: set[str] = set()
    for where, row in read_records(Path(path)):
        p = _problem(kind, f"{name}: {where}", row)
        if p is None:
            continue
        if p.id in seen:
            raise UserError(f"{name}: {where}: duplicate id {p.id!r}")
        seen.add(p.id)
        problems.append(p)
    if not problems:
        raise UserError(f"{name}: no questions in the file")
    return tuple(problems)


def load_qa_file(kind: str, path: Path) -> tuple[Problem, ...]:
    """All problems of a QA file, parsed once per (path, size, mtime) and kept in memory."""
    st = path.stat()
    return _load(kind, str(path.resolve()), st.st_size, st.st_mtime_ns)


class QATask(FileTask):
    """Multi-hop question answering over one file of questions."""

    tools = ("python", "search")

    def __init__(
        self,
        kind: str,
        path: str,
        *,
        metric: str = "em",
        corpus: str | None = None,
        spec: str | None = None,
        split_sizes: SplitSizes | None = None,
        select: str | None = None,
    ) -> None:
        if kind not in QA_KINDS:
            raise UserError(f"unknown QA dataset {kind!r}; choose one of {', '.join(QA_KINDS)}")
        if metric not in METRICS:
            raise UserError(f"{kind}: unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
        data_dir = qa_data_dir()
        dirs = (data_dir,) if data_dir else ()
        self.path = resolve_path(path, what=kind, search_dirs=dirs)
        self.name = self.family = kind
        self.metric = metric
        self.spec = spec or f"{kind}:{path}"
        if split_sizes is not None:
            self.split_sizes = split_sizes
        self._problems = load_qa_file(kind, self.path)
        self.corpus_path = resolve_path(corpus, what=f"{kind} corpus", search_dirs=dirs) if corpus else None
        self._corpus: list[dict[str, str]] | None = None
        if self.corpus_path is not None:
            from harnesslearn.tools.search import read_corpus

            self._corpus = read_corpus(self.corpus_path)
            if not any(_indexable(d) for d in self._corpus):
                raise UserError(f"{kind}: the corpus {self.corpus_path.name} has nothing to search (no passage with "
                                "an indexable word)")
        else:
            bare = next((p for p in self._problems if not any(_indexable(d) for d in p.metadata["paragraphs"])), None)
            if bare is not None:
                raise UserError(f"{kind}: question {bare.id!r} of {self.path.name} has no paragraphs to search; give "
                                f"them in the file or a corpus ({self.spec.split('?')[0]}?corpus=FILE.jsonl)")
        self.select_path = resolve_path(select, what=f"{kind} select file", search_dirs=dirs) if select else None
        self._select: tuple[Problem, ...] = ()
        self._select_corpus: list[dict[str, str]] | None = None
        if self.select_path is not None:
            self._select = load_qa_file(kind, self.select_path)
            self._check_disjoint()
            if self._corpus is not None:
                self._select_corpus = union_corpus(self._select)
            bare = next((p for p in self._select if not any(_indexable(d) for d in p.metadata["paragraphs"])), None)
            if bare is not None:
                raise UserError(f"{kind}: question {bare.id!r} of {self.select_path.name} has no paragraphs to search")
        self._select_ids = frozenset(p.id for p in self._select)

    def _check_disjoint(self) -> None:
        assert self.select_path is not None
        ids = {p.id for p in self._problems} & {p.id for p in self._select}
        questions = {p.question for p in self._problems} & {p.question for p in self._select}
        if ids or questions:
            what = f"id {sorted(ids)[0]!r}" if ids else f"question {sorted(questions)[0]!r}"
            raise UserError(f"{self.name}: {self.path.name} and the select file {self.select_path.name} share "
                            f"{len(ids) or len(questions)} question(s) ({what}): the test split must be disjoint "
                            "from the feedback and score splits")

    def __len__(self) -> int:
        return len(self._problems) + len(self._select)

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        """Without a select file, the first ``n`` problems of ``split`` (``Task.problems``). With one: the
        test split is the main file's questions, feedback and score the select file's (``SELECT_SIZES`` by
        id hash), each shuffled by ``Random(seed)``, the first ``n`` of it."""
        if self.select_path is None:
            return super().problems(split, n, seed)
        if split not in SPLITS:
            raise UserError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        pool = (list(self._problems) if split == "test" else
                [p for p in self._select if split_of(self.name, p.id, SELECT_SIZES) == split])
        random.Random(seed).shuffle(pool)
        out = pool[:max(n, 0)]
        for p in out:
            check_question(self.spec, p.id, p.question)
        return out

    @property
    def description(self) -> str:
        where = (
            f"a corpus of {len(self._corpus)} passages" if self._corpus is not None
            else "the paragraphs that come with the question (supporting ones mixed with distractors)"
        )
        if self._select_corpus is not None:
            where = (f"a corpus of the passages of the question's file ({len(self._corpus or [])} or "
                     f"{len(self._select_corpus)} passages)")
        files = f"{len(self._problems)} questions from {self.path.name}"
        if self.select_path is not None:
            files += f" and {len(self._select)} from {self.select_path.name}"
        score = "token F1" if self.metric == "f1" else "exact match"
        return (
            f"Multi-hop question answering ({QA_KINDS[self.name]}, {files}). "
            "Each question needs facts from several passages. "
            f"model.search(query, k) retrieves passages from {where} by BM25. "
            f"The answer is a short span (a name, date, number or yes/no), scored by {score} against "
            "the gold answer and its aliases after lower-casing and removing punctuation and articles."
        )


    def score(self, answer: str, problem: Problem) -> Score:
        if not isinstance(answer, str):
            return Score(0.0, {"em": 0.0, "f1": 0.0})
        em, f1 = best_em_f1(answer, problem.answer, yes_no_rule=self.name in ("hotpotqa", "2wiki"))
        return Score(f1 if self.metric == "f1" else em, {"em": em, "f1": f1})

    def search_documents(self, problem: Problem) -> list[dict[str, str]] | None:
        """The corpus (when ``corpus=`` was given; the same list object every time, so an index
        over it can be reused) or the problem's own paragraphs."""
        if problem.id in self._select_ids and self._select_corpus is not None:
            return self._select_corpus
        if self._corpus is not None and problem.id not in self._select_ids:
            return self._corpus
        return [{"title": p["title"], "text": p["text"]} for p in problem.metadata.get("paragraphs", [])]


def union_corpus(problems: tuple[Problem, ...]) -> list[dict[str, str]]:
    """The deduplicated union of the problems' paragraphs (by title and text, in file order): the shape
    of the shared ``musique_dev200_corpus.jsonl``, built for another file of questions."""
    seen: dict[tuple[str, str], dict[str, str]] = {}
    for p in problems:
        for d in p.metadata.get("paragraphs", []):
            seen.setdefault((d["title"], d["text"]), {"title": d["title"], "text": d["text"]})
    return list(seen.values())
