"""The strict edit format: verdicts, resulting sources and reasons; fuzzing the parser."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harnesslearn.harness import harness_id
from harnesslearn.propose.edits import EditResult, Reason, apply_proposal, parse_blocks

SRC = '''def helper(x):
    return x.strip()


def solve(model, question):
    completion = model(f"Q: {question}\\nA:")
    return helper(completion)
'''


def block(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def test_valid_single_block_with_prose_and_fence():
    text = "I will strip less.\n```python\n" + block("    return x.strip()", "    return x.strip().lower()") + "```\nDone."
    r = apply_proposal(SRC, text)
    assert r.valid and r.parsed and r.produced and r.reason is None
    assert r.source == SRC.replace("return x.strip()", "return x.strip().lower()")
    assert r.harness_id == harness_id(r.source)


def test_crlf_proposal_and_source_are_normalised():
    text = block("    return x.strip()", "    return x").replace("\n", "\r\n")
    r = apply_proposal(SRC.replace("\n", "\r\n"), text)
    assert r.valid
    assert "\r" not in r.source
    assert "    return x\n" in r.source


def test_two_blocks_applied_together():
    text = block("def helper(x):", "def helper(x, y=1):") + "and\n" + block(
        '    completion = model(f"Q: {question}\\nA:")', '    completion = model(question)'
    )
    r = apply_proposal(SRC, text)
    assert r.valid and r.n_blocks == 2
    assert "def helper(x, y=1):" in r.source and "model(question)" in r.source


def test_deleting_lines_removes_them_cleanly():
    src = "import re\nimport os\n\ndef solve(model, question):\n    return 'x'\n"
    r = apply_proposal(src, block("import os", ""))
    assert r.valid
    assert r.source == "import re\n\ndef solve(model, question):\n    return 'x'\n"


@pytest.mark.parametrize(
    ("text", "reason", "parsed"),
    [
        ("Just prose, no edit.", Reason.NO_BLOCKS, False),
        ("<<<<<<< SEARCH\n    return x.strip()\n>>>>>>> REPLACE\n", Reason.MALFORMED_BLOCK, False),
        ("<<<<<<< SEARCH\n    return x.strip()\n=======\n    return x\n", Reason.MALFORMED_BLOCK, False),
        (block("    return x.strip()", "    return x") + ">>>>>>> REPLACE\n", Reason.MALFORMED_BLOCK, True),
        (block("", "x = 1"), Reason.EMPTY_SEARCH, True),
        (block("    return x.upper()", "    return x"), Reason.NOT_FOUND, True),
        (block("return x.strip()", "return x"), Reason.NOT_FOUND, True),  # whole lines only
        (block("\n", "x = 1"), Reason.EMPTY_SEARCH, True),
    ],
)
def test_invalid_reasons(text, reason, parsed):
    r = apply_proposal(SRC, text)
    assert not r.valid and not r.produced and r.source is None
    assert r.reason == reason
    assert r.parsed is parsed


def test_ambiguous_when_search_matches_twice():
    src = "def solve(model, question):\n    x = 1\n    x = 1\n    return str(x)\n"
    r = apply_proposal(src, block("    x = 1", "    x = 2"))
    assert r.reason == Reason.AMBIGUOUS and not r.valid and r.parsed


def test_overlapping_blocks():
    text = block("def helper(x):\n    return x.strip()", "def helper(x):\n    return x") + block(
        "    return x.strip()\n\n", "    return x\n"
    )
    r = apply_proposal(SRC, text)
    assert r.reason == Reason.OVERLAPPING


def test_blocks_on_consecutive_lines_do_not_overlap():
    """Two SEARCH blocks that touch (the second starts on the line after the first ends) are two
    edits, applied together, not an overlap."""
    text = block("def helper(x):", "def helper(text):") + block("    return x.strip()", "    return text.strip()")
    r = apply_proposal(SRC, text)
    assert r.valid and r.reason is None
    assert r.source is not None and r.source.startswith("def helper(text):\n    return text.strip()\n")


def test_identical_blocks_overlap():
    b = block("    return x.strip()", "    return x")
    assert apply_proposal(SRC, b + b).reason == Reason.OVERLAPPING


@pytest.mark.parametrize(
    ("search", "replace", "reason"),
    [
        ("    return helper(completion)", "    return helper(completion", Reason.SYNTAX_ERROR),
        ("def solve(model, question):", "def answer(model, question):", Reason.MISSING_SOLVE),
        ("def solve(model, question):", "def solve(model, question, extra):", Reason.BAD_SOLVE_SIGNATURE),
        ("def solve(model, question):", "def solve(question, model):", Reason.BAD_SOLVE_SIGNATURE),
        ("def solve(model, question):", "async def solve(model, question):", Reason.BAD_SOLVE_SIGNATURE),
    ],
)
def test_results_that_do_not_compile_or_lose_solve(search, replace, reason):
    r = apply_proposal(SRC, block(search, replace))
    assert r.reason == reason and r.parsed and not r.produced and not r.valid


def test_stray_divider_in_prose_is_not_a_block():
    text = "Plan\n=======\nI change the prompt.\n" + block("    return x.strip()", "    return x")
    assert apply_proposal(SRC, text).valid


def test_all_or_nothing_when_second_block_fails():
    text = block("    return x.strip()", "    return x") + block("nope", "x")
    r = apply_proposal(SRC, text)
    assert r.reason == Reason.NOT_FOUND and r.source is None and "block 2" in r.detail


def test_a_noop_edit_is_not_a_revision():
    """Issue 24: a proposal that leaves the harness as it was (REPLACE = SEARCH, or blank lines only) is
    invalid with its own reason, so it is never evaluated or counted as a revision."""
    r = apply_proposal(SRC, block("    return x.strip()", "    return x.strip()"))
    assert not r.valid and r.reason == Reason.NO_CHANGE and r.parsed and r.produced and r.source is None
    r = apply_proposal(SRC, block("    return x.strip()", "\n    return x.strip()\n"))
    assert r.reason == Reason.NO_CHANGE
    assert apply_proposal(SRC, block("    return x.strip()", "    return x.strip()  # same")).reason == Reason.NO_CHANGE
    assert apply_proposal(SRC, block("    return x.strip()", "    return x.lstrip()")).valid


def test_an_edit_of_trailing_whitespace_only_is_no_change():
    """Issue 33 item 11: trailing spaces or tabs added or removed change nothing a harness does."""
    r = apply_proposal(SRC, block("    return x.strip()", "    return x.strip()   \t"))
    assert r.reason == Reason.NO_CHANGE and "layout" in (r.detail or "")
    spaced = SRC.replace("    return helper(completion)", "    return helper(completion)  ")
    assert apply_proposal(spaced, block("    return helper(completion)  ", "    return helper(completion)")).reason == (
        Reason.NO_CHANGE)


def test_the_same_program_laid_out_anew_is_no_change():
    """A revision is judged by its syntax tree: spacing, comments, quote style, parentheses and line breaks inside
    brackets change nothing the harness does (session 37: 19 of 32 samples of a zoo-seeded context were the zoo's
    program laid out anew, and they would have earned the parent's J as revisions). Anything that is in the tree --
    a name, a literal, a docstring, whitespace inside a string -- is a change."""
    src = 'def solve(model, question):\n    """Ask once."""\n    return model(question, max_tokens=64).strip()\n'

    def rewrite(new: str) -> EditResult:
        return apply_proposal(src, block(src.rstrip("\n"), new.rstrip("\n")))

    same = ["# a harness\ndef solve( model,question ):\n    'Ask once.'\n\n    return (model(question,\n"
            "                  max_tokens = 64)).strip()  # reply\n",
            'def solve(model, question):\n    "Ask once."\n    return model(question, max_tokens=0x40).strip()\n']
    for new in same:
        r = rewrite(new)
        assert not r.valid and r.reason == Reason.NO_CHANGE and r.source is None, new
    changed = [src.replace("64", "65"), src.replace("Ask once.", "Ask once!"), src.replace(".strip()", ""),
               src.replace("question, max", "question + ' ', max"), src.replace("max_tokens=64", "max_tokens=64.0"),
               src.replace("Ask once.", "Ask once. ")]
    for new in changed:
        r = rewrite(new)
        assert r.valid and r.source == new and r.harness_id != harness_id(src), new


def test_no_change_falls_back_to_lines_where_a_tree_cannot_be_dumped(monkeypatch: pytest.MonkeyPatch):
    """Where a syntax tree cannot be had (a parent given by hand that does not parse, or a harness nested too deeply
    for ast.dump), both sides are compared by their non-blank lines: a blank-line edit is still no_change, a comment
    is then a change, and nothing crashes."""
    import ast

    broken = "def solve(model, question):\n    return model(question\n"
    assert apply_proposal(broken, block("    return model(question", "    return model(question)")).valid

    def too_deep(*_a: object, **_k: object) -> str:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(ast, "dump", too_deep)
    assert apply_proposal(SRC, block("    return x.strip()", "\n    return x.strip()\n")).reason == Reason.NO_CHANGE
    assert apply_proposal(SRC, block("    return x.strip()", "    return x.strip()  # same")).valid
    assert apply_proposal(SRC, block("    return x.strip()", "    return x.lstrip()")).valid

def test_one_block_over_the_whole_file_is_a_rewrite():
    new = "import re\n\ndef solve(model, question):\n    return re.sub('a', '', question)\n"
    r = apply_proposal(SRC, block(SRC.rstrip("\n"), new.rstrip("\n")))
    assert r.valid and r.kind == "rewrite" and r.source == new
    assert apply_proposal(SRC, block("    return x.strip()", "    return x")).kind == "blocks"


# ---- properties ------------------------------------------------------------------------

_line = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_fuzz_parser_and_applier_never_crash(text):
    p = parse_blocks(text)
    assert isinstance(p.blocks, tuple)
    r = apply_proposal(SRC, text)
    assert r.valid == (r.reason is None)
    assert (r.source is not None) == r.produced


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "```", "x = 1", "", "    return x.strip()"]), max_size=20))
def test_fuzz_marker_soup_never_crashes(lines):
    r = apply_proposal(SRC, "\n".join(lines))
    if r.valid:
        assert r.source is not None and "def solve(model, question)" in r.source


@settings(max_examples=200, deadline=None)
@given(st.lists(_line, min_size=1, max_size=5).filter(lambda ls: any(s.strip() for s in ls)))
def test_inserted_unique_lines_can_be_replaced_back(extra):
    """Adding unique lines then replacing them with nothing restores the source (the marker is a statement, so
    taking the lines out changes the program, not only its comments)."""
    marker = "UNIQUE_MARKER_7f3a = 1"
    added = [marker] + [f"# {s}" for s in extra]
    src2 = SRC + "\n".join(added) + "\n"
    r = apply_proposal(src2, block("\n".join(added), ""))
    assert r.valid
    assert r.source == SRC
