"""The prompt's sections (propose/prompt.py): contents, caps, determinism, styles, the chat form."""

from __future__ import annotations

import re

import pytest
from propose_fixtures import Task, build_prompt, ctx, feedback

from harnesslearn.harness import Harness, runtime_api_doc, seed_source
from harnesslearn.propose.decode import PRIME
from harnesslearn.propose.formats import ChatBlocks
from harnesslearn.propose.prompt import Attempt


def test_prompt_holds_every_section_and_ends_with_prime() -> None:
    h = Harness(seed_source("minimal"))
    hist = [Attempt(1, 0, False, "not_found", 0.3, None, "junk"), Attempt(1, 1, True, None, 0.3, 0.5, "EDIT-X")]
    p = build_prompt(Task(), h, feedback(), hist)
    assert Task.description in p and h.source.strip() in p
    assert runtime_api_doc().strip()[:200] in p
    assert "J (mean score) = 0.333" in p and "ok 6" in p
    assert "Gold answer:" in p and "Harness answer: garbage" in p and "ValueError: boom" in p
    assert "invalid edit (not_found)" in p and "0.300 -> 0.500" in p and "EDIT-X" in p
    assert ">>>>>>> REPLACE" in p and p.endswith(PRIME)


def test_traces_are_capped_and_failures_first() -> None:
    p = build_prompt(Task(), Harness(seed_source("minimal")), feedback(), n_traces=2)
    assert "LONG" * 100 not in p and "pad " * 300 not in p
    assert p.count("### Problem") == 2 and "score 1.0" not in p  # 4 failures exist: both sampled are failures
    assert len(p) < 12000


def test_prompt_is_deterministic_and_varied_style_differs() -> None:
    h, fb = Harness(seed_source("minimal")), feedback()
    assert build_prompt(Task(), h, fb, rng_seed=3) == build_prompt(Task(), h, fb, rng_seed=3)
    v = build_prompt(Task(), h, fb, style="varied", rng_seed=3)
    assert v != build_prompt(Task(), h, fb, rng_seed=3) and h.source.strip() in v and v.endswith(PRIME)
    assert len({build_prompt(Task(), h, fb, style="varied", rng_seed=s) for s in range(6)}) > 1


def test_chat_messages_hold_every_section_and_no_foreign_example() -> None:
    from harnesslearn.propose.decode import solve_lines
    from harnesslearn.propose.prompt import template

    h = Harness(seed_source("minimal"))
    hist = [Attempt(1, 1, True, None, 0.3, 0.5, "EDIT-X")]
    msgs = ChatBlocks().render(ctx(h, hist))
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert Task.description in user and h.source.strip() in user and "Gold answer:" in user and "EDIT-X" in user
    assert runtime_api_doc().strip()[:200] in user
    # the lines offered for SEARCH are the current harness's own solve function ...
    lines = solve_lines(h.source)
    assert lines and user.rstrip().endswith(lines)
    # ... and nothing of the plain form's worked example (a foreign harness) is shown
    example = template("few_shot")
    assert "Think step by step, then give the final answer on the last line" in example
    assert "Think step by step, then give the final answer on the last line" not in user
    assert PRIME not in user  # markers are described in words, never as a block to copy


@pytest.mark.parametrize("files, needle", [
    ({"nonsense.txt": "x"}, "overrides no template"),
    ({"propose.txt": "$system\n$task"}, "lacks the placeholder"),
    ({"system.txt": "You revise programs. $colour"}, "has placeholder(s) $colour"),
    ({"system.txt": "costs 5$ a call"}, "not a placeholder"),
    ({}, "no NAME.txt template"),
])
def test_a_prompt_dir_is_checked_at_start(tmp_path, files, needle):
    from harnesslearn.errors import UserError
    from harnesslearn.propose.prompt import load_prompt_dir

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(UserError, match=re.escape(needle) if "$" in needle else needle) as e:
        load_prompt_dir(str(tmp_path))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kind, needle", [("fifo", "not a regular file"), ("zero", "not a regular file"),
                                          ("huge", "larger than"), ("empty", "is empty"), ("blank", "is empty")])
def test_a_prompt_template_that_is_no_small_regular_file_or_is_empty_is_refused(tmp_path, kind, needle):
    """Issue 65, items 4 and 8: a FIFO named like a template hung adapt forever (Ctrl-C too), a link to /dev/zero
    gave a traceback, a 200 MB file was read and sent, an empty one fell back to the packaged template."""
    import os

    from harnesslearn.errors import UserError
    from harnesslearn.propose.prompt import MAX_TEMPLATE_BYTES, load_prompt_dir

    f = tmp_path / "system.txt"
    if kind == "fifo":
        os.mkfifo(f)
    elif kind == "zero":
        f.symlink_to("/dev/zero")
    elif kind == "huge":
        f.write_text("x" * (MAX_TEMPLATE_BYTES + 1))
    else:
        f.write_text("" if kind == "empty" else "\n  \n")
    with pytest.raises(UserError, match=needle) as e:
        load_prompt_dir(str(tmp_path))
    assert "\n" not in str(e.value)


def test_a_prompt_template_linked_to_a_regular_file_is_read(tmp_path):
    from harnesslearn.propose.prompt import load_prompt_dir, packaged_template

    (tmp_path / "real").write_text(packaged_template("system") + " Be brief.")
    (tmp_path / "system.txt").symlink_to(tmp_path / "real")
    assert load_prompt_dir(str(tmp_path))["system"].endswith("Be brief.")


def test_adapt_with_a_prompt_dir_shows_the_proposer_the_users_template(tmp_path):
    """--prompt-dir replaces packaged templates by name for the run (and only for it); the proposer sees
    the user's words; the run's identity holds the templates' text, so a changed template is not resumed."""
    import json
    import subprocess
    import sys

    from harnesslearn.propose.prompt import packaged_template

    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "system.txt").write_text("HOUSE RULES: revise the harness, keep it short.\n")
    (tmp_path / "models.py").write_text(
        "import json, os\n"
        "def solver(prompt, **kw):\n    return '1'\n"
        "def proposer(prompt, **kw):\n"
        f"    open({str(tmp_path / 'seen.txt')!r}, 'a').write(json.dumps(prompt) + '\\n')\n"
        "    return 'no edit'\n")
    base = [sys.executable, "-m", "harnesslearn.cli", "adapt", "--task", "rg:gcd", "--solver",
            f"python:{tmp_path / 'models.py'}:solver", "--proposer", f"python:{tmp_path / 'models.py'}:proposer",
            "--rounds", "1", "--candidates", "1", "--n-feedback", "1", "--n-score", "1", "--n-test", "1",
            "--no-memory", "--run-dir", str(tmp_path / "run"), "--json"]
    p = subprocess.run([*base, "--prompt-dir", str(prompts)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    seen = (tmp_path / "seen.txt").read_text()
    assert "HOUSE RULES" in seen and json.loads(seen.splitlines()[0]).count(packaged_template("system")[:40]) == 0
    (prompts / "system.txt").write_text("OTHER RULES.\n")
    again = subprocess.run([*base, "--prompt-dir", str(prompts), "--resume"], capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 2 and "prompts" in again.stderr, again.stderr[-1000:]


def test_the_packaged_prompts_digest_changes_with_any_template_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """packaged_digest: 16 hex digits over every packaged template, the same on every call, another one as soon as
    one template's text differs (what lets the peers benchmark refuse to mix runs asked with other prompts)."""
    from harnesslearn.propose import prompt as prompt_mod

    d = prompt_mod.packaged_digest()
    assert len(d) == 16 and int(d, 16) >= 0 and prompt_mod.packaged_digest() == d
    real = prompt_mod.packaged_template
    monkeypatch.setattr(prompt_mod, "packaged_template",
                        lambda name: real(name) + (" (edited)" if name == "chat_system" else ""))
    assert prompt_mod.packaged_digest() != d


# what the held-out-pattern prompts (propose/prompts_heldout/) change in the packaged ones, word for word
HELDOUT_CUTS = {
    "chat_system": [(", but it writes correct short Python programs", ""),
                    ("let the solver write a program for the computation and run it with model.python(code); ", "")],
    "system": [("let the solver write code and run it with model.python, ", "")],
    "RUNTIME_API": [("Use it to let the solver write a computation as code and get its result (print the result!).",
                     "The code must print its result."),
                    ("Have the solver write a program and run it (it is far better at writing code than at exact "
                     "arithmetic, counting or sorting in its head):", "")],
}


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_heldout_prompts_are_the_packaged_ones_less_the_solver_program_advice() -> None:
    """packaged:heldout: chat_system, system and the runtime API document as packaged, less exactly the advice to
    run solver-written programs with model.python and the Patterns program that does it (nothing else differs,
    so a change to the packaged prompts fails here until the folder follows); model.python stays documented, its
    advice sentence replaced by what the tool needs (print the result)."""
    from harnesslearn.propose.prompt import API, load_prompt_dir, packaged_prompt_dirs, packaged_template

    assert "packaged:heldout" in packaged_prompt_dirs()
    held = load_prompt_dir("packaged:heldout")
    assert set(held) == set(HELDOUT_CUTS)
    for name, cuts in HELDOUT_CUTS.items():
        packaged = _words(runtime_api_doc() if name == API else packaged_template(name))
        for cut, instead in cuts:
            assert cut in packaged, (name, cut)
            packaged = packaged.replace(cut, instead)
        if name == API:  # the Patterns program itself: the code block under the cut paragraph
            block = packaged[packaged.index("reply = model.generate([{\"role\": \"user\", \"content\": f\"Write"):
                             packaged.index("Let it reason")]
            assert "model.python(code)" in block
            packaged = packaged.replace(block, "")
        assert _words(packaged.replace(" ,", ",")) == _words(held[name].replace(" ,", ",")), name
    assert "model.python(code, timeout=5.0)" in held[API] and "model.python" not in held["chat_system"]
    from harnesslearn.errors import UserError

    with pytest.raises(UserError, match="no such packaged prompt folder .the packaged ones: packaged:heldout"):
        load_prompt_dir("packaged:nothing")


def test_a_prompt_dirs_runtime_api_is_what_the_proposer_and_the_known_sources_see(tmp_path) -> None:
    """A RUNTIME_API.md in a prompt folder replaces the API section of both prompt forms while the folder is in use
    (and only then), and the known sources read its programs: the held-out folder shows no api program that runs
    the solver's code (api:1 of the packaged document)."""
    from harnesslearn import sources
    from harnesslearn.propose.formats import ChatPrefill
    from harnesslearn.propose.prompt import load_prompt_dir, use_prompts
    from harnesslearn.taxonomy import runs_solver_code

    (tmp_path / "RUNTIME_API.md").write_text("# API\n\nCall `model(prompt)`.\n\n    reply = model.generate(question)[0]\n")
    mine = load_prompt_dir(str(tmp_path))
    h = Harness(seed_source("minimal"))
    with use_prompts(mine):
        user = ChatPrefill().render(ctx(h))[1]["content"]
        plain = build_prompt(Task(), h, feedback())
    assert "Call `model(prompt)`." in user and "Call `model(prompt)`." in plain
    assert runtime_api_doc().strip()[:200] not in user
    assert runtime_api_doc().strip()[:200] in ChatPrefill().render(ctx(h))[1]["content"]  # the folder no longer in use
    api = {k.name: k.source for k in sources.known_sources(tmp_path) if k.origin == "runtime_api"}
    assert list(api) == ["api:1"] and "reply = model.generate(question)[0]" in api["api:1"]
    with use_prompts(load_prompt_dir("packaged:heldout")):
        shown = ChatPrefill().render(ctx(h))
    assert "model.python(code" in shown[1]["content"] and "write a program" not in shown[0]["content"]
    held = [k for k in sources.known_sources("packaged:heldout") if k.origin == "runtime_api"]
    assert held and not any(runs_solver_code(k.source) for k in held)
    assert any(runs_solver_code(k.source) for k in sources.known_sources() if k.origin == "runtime_api")
    assert "zoo:interpreter_loop" in {k.name for k in sources.known_sources("packaged:heldout")}
