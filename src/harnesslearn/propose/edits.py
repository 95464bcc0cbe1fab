"""The edit format: SEARCH/REPLACE blocks parsed out of free model text, applied strictly.

A block looks like this (markers alone on their lines; 5 to 9 marker characters accepted)::

    <<<<<<< SEARCH
    exact lines of the current harness
    =======
    the lines that replace them
    >>>>>>> REPLACE

Prose and code fences around blocks are ignored; CRLF and CR line endings are normalised.
Application is all-or-nothing. Every SEARCH is matched against the *current* source as whole
lines (a match starts at a line start and ends at a line end) and must match exactly once;
matched spans must not overlap; then all replacements are made at once. The result must
compile and define a top-level ``solve(model, question)``, and it must be a different program: a result with
the source's syntax tree (the same code, only laid out anew: spacing, blank lines, comments, quotes, parentheses)
is not a revision (``no_change``). Any failure makes the whole proposal invalid with a reason from :class:`Reason` -- a block that does not match is never
skipped silently. One block whose SEARCH is the whole source is a whole-file rewrite (``kind``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from enum import StrEnum

from harnesslearn.harness import check_source, harness_id, normalise

_SEARCH = re.compile(r"^\s*<{5,9}\s?SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s?REPLACE\s*$")


class Reason(StrEnum):
    NO_BLOCKS = "no_blocks"
    MALFORMED_BLOCK = "malformed_block"
    EMPTY_SEARCH = "empty_search"
    NOT_FOUND = "not_found"
    AMBIGUOUS = "ambiguous"
    OVERLAPPING = "overlapping"
    SYNTAX_ERROR = "syntax_error"
    MISSING_SOLVE = "missing_solve"
    BAD_SOLVE_SIGNATURE = "bad_solve_signature"
    TOO_LARGE = "too_large"  # the revised harness is over harness.MAX_SOURCE_BYTES
    NO_CHANGE = "no_change"  # the edits leave the program as it was (REPLACE = SEARCH, or layout and comments only)


@dataclass(frozen=True)
class Block:
    search: str  # lines joined by "\n", no trailing newline
    replace: str


@dataclass(frozen=True)
class ParseResult:
    blocks: tuple[Block, ...]
    malformed: str | None  # description of the first malformed block, if any


@dataclass(frozen=True)
class EditResult:
    valid: bool
    reason: Reason | None  # None when valid
    detail: str | None  # a human-readable elaboration of the reason
    parsed: bool  # at least one well-formed block
    produced: bool  # a candidate that compiles and defines solve(model, question)
    n_blocks: int
    source: str | None  # the revised source when produced
    harness_id: str | None
    kind: str = "blocks"  # "rewrite" when one block replaces the whole file (a whole-file rewrite)


def parse_blocks(text: str) -> ParseResult:
    """Extract SEARCH/REPLACE blocks from free text. Never raises."""
    lines = normalise(text).split("\n")
    blocks: list[Block] = []
    malformed: str | None = None
    state, search, replace, start = "out", [], [], 0  # type: tuple[str, list[str], list[str], int]

    def bad(msg: str) -> None:
        nonlocal malformed
        if malformed is None:
            malformed = msg

    for i, line in enumerate(lines, 1):
        if state == "out":
            if _SEARCH.match(line):
                state, search, replace, start = "search", [], [], i
            elif _REPLACE.match(line):
                bad(f"line {i}: REPLACE marker without a SEARCH block")
            # a stray "=======" outside a block is prose (e.g. a Markdown underline)
            continue
        ends = _DIVIDER if state == "search" else _REPLACE  # what legitimately ends this part
        breaks = (_SEARCH, _REPLACE) if state == "search" else (_SEARCH, _DIVIDER)  # what breaks the block
        if ends.match(line):
            if state == "replace":
                blocks.append(Block("\n".join(search), "\n".join(replace)))
            state = "replace" if state == "search" else "out"
        elif any(p.match(line) for p in breaks):
            bad(f"line {start}: " + ("block has no ======= divider" if state == "search"
                                     else "block is not closed with >>>>>>> REPLACE"))
            state = "search" if _SEARCH.match(line) else "out"
            search, replace, start = [], [], i
        else:
            (search if state == "search" else replace).append(line)
    if state != "out":
        bad(f"line {start}: block is not closed (text ended inside it)")
    return ParseResult(tuple(blocks), malformed)


def _line_matches(source: str, needle: str) -> list[int]:
    """Start offsets where ``needle`` (whole lines, ending in "\\n") occurs at a line start."""
    out, pos = [], source.find(needle)
    while pos != -1:
        if pos == 0 or source[pos - 1] == "\n":
            out.append(pos)
        pos = source.find(needle, pos + 1)
    return out


def _invalid(reason: Reason, detail: str | None, parsed: bool, n: int) -> EditResult:
    return EditResult(False, reason, detail, parsed, False, n, None, None)


def apply_blocks(source: str, blocks: tuple[Block, ...]) -> tuple[str | None, Reason | None, str | None]:
    """Apply blocks all-or-nothing. Returns (new_source, None, None) or (None, reason, detail)."""
    src = normalise(source)
    added_newline = not src.endswith("\n")
    if added_newline:
        src += "\n"
    spans: list[tuple[int, int, int]] = []  # (start, end, block index)
    for i, b in enumerate(blocks, 1):
        if not b.search.strip():
            return None, Reason.EMPTY_SEARCH, f"block {i}: SEARCH is empty"
        needle = b.search + "\n"
        hits = _line_matches(src, needle)
        if not hits:
            return None, Reason.NOT_FOUND, f"block {i}: SEARCH text not found in the harness"
        if len(hits) > 1:
            return None, Reason.AMBIGUOUS, f"block {i}: SEARCH text matches {len(hits)} places"
        spans.append((hits[0], hits[0] + len(needle), i))
    spans.sort()
    for (_s1, e1, i1), (s2, _e2, i2) in zip(spans, spans[1:], strict=False):
        if s2 < e1:
            return None, Reason.OVERLAPPING, f"blocks {min(i1, i2)} and {max(i1, i2)} overlap"
    out, prev = [], 0
    for s, e, i in spans:
        out.append(src[prev:s])
        rep = blocks[i - 1].replace
        out.append(rep + "\n" if rep else "")
        prev = e
    out.append(src[prev:])
    result = "".join(out)
    if added_newline and result.endswith("\n"):
        result = result[:-1]
    return result, None, None


def apply_proposal(source: str, text: str) -> EditResult:
    """Parse a proposer completion and apply it to ``source`` strictly. Never raises."""
    parsed = parse_blocks(text)
    n = len(parsed.blocks)
    if parsed.malformed is not None:
        return _invalid(Reason.MALFORMED_BLOCK, parsed.malformed, n > 0, n)
    if n == 0:
        return _invalid(Reason.NO_BLOCKS, "no SEARCH/REPLACE block found", False, 0)
    new, reason, detail = apply_blocks(source, parsed.blocks)
    if new is None:
        assert reason is not None
        return _invalid(reason, detail, True, n)
    problem = check_source(new)
    if problem is not None:
        return _invalid(Reason(problem), f"the revised harness: {problem.replace('_', ' ')}", True, n)
    if same_program(new, normalise(source)):
        return EditResult(False, Reason.NO_CHANGE, "the edits leave the program unchanged (only its layout or comments differ)",
                          True, True, n, None, None)
    whole = n == 1 and parsed.blocks[0].search.strip("\n") == normalise(source).strip("\n")
    return EditResult(True, None, None, True, True, n, new, harness_id(new), "rewrite" if whole else "blocks")


def same_program(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are one program: the same syntax tree, without positions (comments, blank lines,
    spacing, quote style and redundant parentheses are not in it), so a proposal that only lays its parent out
    anew is not a revision. What the tree leaves out can still be seen by a harness that reads its own source
    (``inspect.getsource``, line numbers in a traceback); no shipped harness does. Where either side does not
    parse or is too deep to dump (a parent given by hand), both are compared by their non-blank lines without
    trailing whitespace."""
    try:
        return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        def lines(src: str) -> list[str]:
            return [x.rstrip() for x in src.split("\n") if x.strip()]

        return lines(a) == lines(b)
