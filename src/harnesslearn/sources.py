"""Known sources: every program a proposer is shown, and how close a harness is to the nearest of them.

A revision that scores may be a program the proposer wrote, or one it was shown, pasted back. The programs it
is shown, read from the package's files each time this module builds the list (never hard-coded):

- ``zoo:NAME``: every zoo harness file (``zoo.py``; a harness memory is built from these);
- ``api:N``: every indented code block of ``seeds/RUNTIME_API.md`` (or a prompt folder's own ``RUNTIME_API.md``)
  that calls the model (``model.``), made a
  harness: the block inside ``solve(model, question)``, returning the last name it assigns (N in order of
  appearance: today 1 is "write a program and run it with model.python", 2 "reason, then take the Answer:
  line");
- ``prompt:STEM``: every prompt template that shows a harness and a SEARCH/REPLACE edit of it (today
  ``few_shot.txt``), as the harness with the edit applied; a ``--prompt-dir`` template overrides the packaged one.

How close (:func:`match`), on the code alone (:func:`code_of`: comments, docstrings and layout dropped):
``ratio``, the difflib ratio of the two programs, and ``contained``, the share of the known program found in
the proposal in order. A **copy** is a ratio >= :data:`COPY` (mostly a known program), or a known program held
nearly whole (contained >= COPY) that is at least half of the proposal's code (:data:`PASTE_SHARE`): the
runtime API's program pasted into ``solve`` with a few lines of its own around it is a copy, which the whole-text
ratio of ``zoo.nearest`` (0.55 for such a paste in stretch 11) does not see.
What it does not catch: a program rewritten in other words (the ratios measure characters, not behaviour), a copy
of something else (another run's harness, the model's own training data), or a known pattern that is a small part
of a larger program (share below one half: counted as the proposer's own).
A block that yields no valid harness (``harness.check_source``) is skipped.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnesslearn import zoo
from harnesslearn.harness import check_source, normalise, runtime_api_doc
from harnesslearn.propose.edits import apply_proposal, parse_blocks
from harnesslearn.propose.prompt import API, load_prompt_dir, packaged_template, template_names

COPY = zoo.NEAR_COPY  # a ratio at or above which a harness counts as a copy of a known source


@dataclass(frozen=True)
class KnownSource:
    name: str  # zoo:NAME, api:N or prompt:STEM
    origin: str  # "zoo" | "runtime_api" | "prompt"
    source: str  # always a complete harness source defining solve(model, question)
    qa: bool  # needs the search tool (a zoo entry's flag; else whether it calls model.search)


def _code_blocks(markdown: str) -> list[str]:
    """The indented (4 spaces) code blocks of a Markdown text, dedented, each opened after a blank line."""
    blocks: list[list[str]] = []
    cur: list[str] | None = None
    prev_blank = True
    for line in normalise(markdown).split("\n"):
        if cur is not None and (not line.strip() or line.startswith("    ")):
            cur.append(line[4:])
            continue
        cur = None
        if line.strip() and line.startswith("    ") and prev_blank:
            cur = [line[4:]]
            blocks.append(cur)
        prev_blank = not line.strip()
    return ["\n".join(b).strip("\n") for b in blocks]


def as_harness(block: str) -> str | None:
    """``block`` (top-level statements) as the body of ``solve(model, question)`` that returns
    ``str(VAR).strip()``, VAR the last name the block assigns at its top level; None when it assigns none,
    does not parse, or is no valid harness."""
    try:
        tree = ast.parse(block)
    except (SyntaxError, ValueError):
        return None
    var = None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else [])
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    var = n.id
    if var is None:
        return None
    body = "".join(f"    {line}\n" if line.strip() else "\n" for line in block.split("\n"))
    src = f"def solve(model, question):\n{body}    return str({var}).strip()\n"
    return src if check_source(src) is None else None


_START = re.compile(r"^(def |async def |import |from |class |@)")


def shown_revision(text: str) -> str | None:
    """The harness a template shows before its first SEARCH marker, with the template's SEARCH/REPLACE edit
    applied (``edits.apply_proposal``); None when the text shows no such pair. The harness is the longest run
    of lines, from a line that opens Python code (``def``, ``import``...), that is a valid harness the edit
    applies to."""
    parsed = parse_blocks(text)
    if not parsed.blocks or parsed.malformed is not None:
        return None
    lines = normalise(text).split("\n")
    end = next(i for i, line in enumerate(lines) if re.match(r"^\s*<{5,9}\s?SEARCH\s*$", line))
    for i in (k for k in range(end) if _START.match(lines[k])):
        for j in range(end, i, -1):
            src = "\n".join(lines[i:j]).strip("\n") + "\n"
            if check_source(src) is None:
                ed = apply_proposal(src, text)
                if ed.valid and ed.source is not None:
                    return ed.source
    return None


def _build(templates: dict[str, str], api_doc: str | None = None) -> tuple[KnownSource, ...]:
    out = [KnownSource(f"{zoo.PREFIX}{n}", "zoo", zoo.source(n), e.qa) for n, e in zoo.ENTRIES.items()]
    doc = api_doc or runtime_api_doc()
    api = [h for b in _code_blocks(doc) if "model." in b and (h := as_harness(b)) is not None]
    out += [KnownSource(f"api:{k}", "runtime_api", h, "model.search" in h) for k, h in enumerate(api, 1)]
    for stem, text in sorted(templates.items()):
        h = shown_revision(text) if "SEARCH" in text else None
        if h is not None:
            out.append(KnownSource(f"prompt:{stem}", "prompt", h, "model.search" in h))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _packaged() -> tuple[KnownSource, ...]:
    return _build({name: packaged_template(name) for name in template_names()})


def known_sources(prompt_dir: str | Path | None = None) -> tuple[KnownSource, ...]:
    """Every program a proposer is shown (module docstring), zoo first, then ``api:N``, then ``prompt:STEM``.
    With ``prompt_dir`` (``--prompt-dir``: checked by ``prompt.load_prompt_dir``, UserError when bad) its
    templates replace the packaged ones of the same name and its ``RUNTIME_API.md`` the runtime API document, read
    now; without, the packaged list (cached)."""
    if prompt_dir is None:
        return _packaged()
    overrides = load_prompt_dir(str(prompt_dir))
    return _build({name: overrides.get(name) or packaged_template(name) for name in template_names()},
                  overrides.get(API))


PASTE_SHARE = 0.5  # a known program this large a part of a proposal's code, held nearly whole in it: a paste


@functools.lru_cache(maxsize=8192)
def code_of(text: str) -> str:
    """A program's code without what does not run: comments, docstrings and layout (``ast.unparse`` of the tree
    without its docstrings), after a filled few-shot list is put back to the zoo template's empty one; the text
    itself where it does not parse."""
    text = zoo.unfill(text)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return text
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    try:
        return ast.unparse(tree)
    except (ValueError, RecursionError):
        return text


@dataclass(frozen=True)
class Match:
    """How close a program is to one known source, both as code (:func:`code_of`)."""

    name: str
    ratio: float  # difflib ratio of the two: 2 x matched / (both lengths)
    contained: float  # the share of the known source found in the program, in order: matched / the source's length
    share: float  # the share of the program that is the known source: matched / the program's length

    @property
    def copy(self) -> bool:
        """Mostly a known program (ratio >= COPY), or a known program pasted nearly whole (contained >= COPY) that
        is at least half of it (share >= PASTE_SHARE): a paste with a few lines of its own around it."""
        return self.ratio >= COPY or (self.contained >= COPY and self.share >= PASTE_SHARE)

    @property
    def closeness(self) -> float:
        """What ranks the sources: the ratio, or the containment where the source is half the program or more."""
        return max(self.ratio, self.contained if self.share >= PASTE_SHARE else 0.0)


@functools.lru_cache(maxsize=8192)
def _nearest(text: str, pool: tuple[tuple[str, str], ...]) -> Match:
    import difflib

    code = code_of(text)
    best = Match("", 0.0, 0.0, 0.0)
    for name, src in pool:
        known = code_of(src)
        m = sum(b.size for b in difflib.SequenceMatcher(None, code, known, autojunk=False).get_matching_blocks())
        total = len(code) + len(known)
        cand = Match(name, 2 * m / total if total else 1.0, m / len(known) if known else 0.0,
                     m / len(code) if code else 0.0)
        if cand.closeness > best.closeness:
            best = cand
    return best


def match(text: str, *, qa: bool | None = None, prompt_dir: str | Path | None = None,
          sources: Sequence[KnownSource] | None = None) -> Match:
    """The known source closest to ``text`` (:class:`Match`; the first on ties; an empty name for no source).
    ``qa`` keeps the zoo files of that kind only (the runtime API and the prompts are shown for every task);
    ``sources`` is the pool (default ``known_sources(prompt_dir)``). Remembered per text and pool."""
    pool = known_sources(prompt_dir) if sources is None else sources
    return _nearest(text, tuple((s.name, s.source) for s in pool if qa is None or s.origin != "zoo" or s.qa == qa))


def nearest(text: str, *, qa: bool | None = None, prompt_dir: str | Path | None = None,
            sources: Sequence[KnownSource] | None = None) -> tuple[str, float]:
    """``(name, closeness)`` of :func:`match`."""
    m = match(text, qa=qa, prompt_dir=prompt_dir, sources=sources)
    return m.name, m.closeness


def provenance(text: str, *, qa: bool | None = None, prompt_dir: str | Path | None = None,
               sources: Sequence[KnownSource] | None = None) -> dict[str, Any]:
    """``{"nearest", "ratio", "contained", "copy"}`` of :func:`match` (ratios to 3 places; nearest None for no
    source)."""
    m = match(text, qa=qa, prompt_dir=prompt_dir, sources=sources)
    return {"nearest": m.name or None, "ratio": round(m.ratio, 3), "contained": round(m.contained, 3), "copy": m.copy}
