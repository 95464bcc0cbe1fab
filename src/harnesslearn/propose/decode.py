"""From what a proposer wrote to a proposal: the SEARCH/REPLACE markers, the lines of ``solve`` a
rewrite is opened on, and the decoders the formats use (``formats.py``).

- ``as_proposal``: whole blocks as they stand; a continuation of a prompt that ends with an open
  block gets that block (``primed_tail``) put back in front.
- ``finish_body``: a rewrite's new ``solve`` body, ended at its first non-indented line (the way
  HumanEval completions end), closed with the REPLACE marker unless the token limit cut it.
- ``finish_function``: a reply's new ``solve`` in a code block, made the REPLACE part of a block on
  the parent's ``solve``.
- ``finish_file``: a reply's complete new file, made one block replacing the whole parent.

A proposal is only text here; ``edits.apply_proposal`` judges it.
"""

from __future__ import annotations

import ast
import re

from harnesslearn.models.base import Messages

PRIME = "<<<<<<< SEARCH\n"
END = ">>>>>>> REPLACE"
DIVIDER = "======="
_SEARCH_MARKER = re.compile(r"^\s*<{5,9}\s?SEARCH\s*$", re.MULTILINE)
_END_MARKER = re.compile(r"^\s*>{5,9}\s?REPLACE\s*$", re.MULTILINE)


def solve_lines(source: str) -> str | None:
    """The lines of the top-level ``solve`` function (with its decorators), or None."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "solve"]
    if not fns or fns[-1].end_lineno is None:
        return None
    fn = fns[-1]
    start = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
    return "\n".join(source.split("\n")[start - 1 : fn.end_lineno])


def rewrite_tail(source: str) -> str | None:
    """``PRIME`` + the lines of the top-level ``solve`` function + the divider + its header
    (the ``def`` line(s)), or None when there is no such function with a body on its own lines."""
    whole = solve_lines(source)
    if whole is None:
        return None
    fn = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "solve"][-1]
    if fn.body[0].lineno <= fn.lineno:
        return None
    start = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
    header = "\n".join(source.split("\n")[start - 1 : fn.body[0].lineno - 1])
    return PRIME + whole + "\n=======\n" + header + "\n"


def primed_tail(prompt: str | Messages) -> str:
    """The open block a prompt ends with (from its last ``PRIME``; for a chat prompt, in a last
    assistant message that the model continues), or "" if it ends with none."""
    if not isinstance(prompt, str):
        if not prompt or prompt[-1].get("role") != "assistant":
            return ""
        prompt = prompt[-1].get("content", "")
    i = prompt.rfind(PRIME)
    if i == -1 or _END_MARKER.search(prompt, i):
        return ""
    return prompt[i:]


def as_proposal(completion: str, prompt: str | Messages | None = None) -> str:
    """The proposal text for a completion of ``prompt``: the completion as is when it opens every block
    it closes itself (a model that repeats the SEARCH marker, a scripted proposer that writes whole
    blocks) or answers a chat prompt, else the prompt's primed tail (``PRIME`` when no prompt is given)
    + completion: a continuation whose first block was opened by the prompt has one REPLACE marker more
    than it has SEARCH markers (with several blocks too)."""
    if isinstance(prompt, list) and not primed_tail(prompt):
        return completion
    opened = len(_SEARCH_MARKER.findall(completion))
    if opened and opened >= len(_END_MARKER.findall(completion)):
        return completion
    return (PRIME if prompt is None else primed_tail(prompt)) + completion


def finish_body(text: str, prompt: str | Messages, *, hit_max_tokens: bool) -> str:
    """The proposal for a completion of a prompt that ends in a block opened on ``solve`` (the divider
    and the ``def`` line written): the completion is the new body; it ends at its first non-indented
    line, and the REPLACE marker is added when the body ended before the token limit (a body cut by
    the limit stays unterminated: invalid). Then :func:`as_proposal` puts the open block in front."""
    if not _END_MARKER.search(text):
        body, ended = end_of_body(text)
        if ended or not hit_max_tokens:
            text = body.rstrip("\n") + "\n" + END + "\n"
    return as_proposal(text, prompt)


def finish_file(text: str, source: str | None, *, hit_max_tokens: bool) -> str:
    """The proposal for a reply that was asked for the complete new harness file: the reply's code block
    that defines ``solve`` (else the whole reply), as one block replacing all of ``source`` (a whole-file
    rewrite; ``edits`` then judges it like any edit). A reply with SEARCH blocks is kept as it is; one
    without such code, or cut by the token limit inside its block, stays as it is (invalid)."""
    if _SEARCH_MARKER.search(text) or source is None:
        return text
    for m in _FENCE.finditer(text):
        code, closed = m.group(1), bool(m.group(2))
        if "def solve(" in code:
            if hit_max_tokens and not closed:
                return text
            return PRIME + source.rstrip("\n") + "\n=======\n" + code.rstrip("\n") + "\n" + END + "\n"
    return text


def finish_function(text: str, source: str | None, *, hit_max_tokens: bool) -> str:
    """The proposal for a reply that was asked, in words, for the new ``solve`` in a code block: the
    reply's function (:func:`reply_function`) as the REPLACE part of a block on ``source``'s ``solve``.
    A reply that holds SEARCH blocks is kept as it is; one without a function, or cut by the token
    limit inside it, stays as it is too (invalid: no blocks)."""
    if _SEARCH_MARKER.search(text):
        return text
    fn, ended = reply_function(text)
    lines = solve_lines(source) if source is not None else None
    if fn is None or lines is None or (hit_max_tokens and not ended):
        return text
    return PRIME + lines + "\n=======\n" + fn + END + "\n"


# a code block; it closes only at a fence on a line of its own (code may hold "```" in a string)
_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)(^[ \t]*```[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)


def reply_function(text: str) -> tuple[str | None, bool]:
    """The new ``solve`` of a reply: the first code block (else the whole text) with a top-level
    ``def solve(``. Around the function that block may hold only imports (kept, in front of it),
    a docstring (dropped) and blank or comment lines; anything else (helpers, module code,
    example calls) makes the reply no function (None), so a rewritten file stays invalid.
    Returns the text and whether the function ended (a dedent or a closing code fence) rather
    than running to the end of the reply."""
    blocks = [(m.group(1), bool(m.group(2))) for m in _FENCE.finditer(text)] or [(text, False)]
    for code, closed in blocks:
        lines = code.split("\n")
        starts = [i for i, line in enumerate(lines) if line.startswith("def solve(")]
        if not starts:
            continue
        i = starts[0]
        body, dedent = end_of_body("\n".join(lines[i + 1 :]))
        rest = "\n".join(lines[:i] + lines[i + 1 + len(body.split("\n")) :])
        try:
            tree = ast.parse(rest)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None, False
        docstring = [n for n in tree.body[:1] if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                     and isinstance(n.value.value, str)]
        imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        if not body.strip() or len(docstring) + len(imports) != len(tree.body):
            return None, False
        head = "".join(ast.get_source_segment(rest, n) + "\n" for n in imports)  # type: ignore[operator]
        return head + lines[i] + "\n" + body.rstrip("\n") + "\n", dedent or closed
    return None, False


def end_of_body(text: str) -> tuple[str, bool]:
    """``text`` up to its first non-empty line that is not indented, and whether one was found."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.strip() and not line[0].isspace():
            return "\n".join(lines[:i]), True
    return text, False
