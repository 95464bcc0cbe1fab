"""Known sources (``sources.py``): every program a proposer is shown, and whether a harness is a copy of one;
``adapt --json``'s ``provenance`` built on them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harnesslearn import sources, zoo
from harnesslearn.harness import check_source, load_harness

ROOT = Path(__file__).resolve().parents[1]

# what a proposer writes when it pastes RUNTIME_API.md's "write a program and run it" pattern into solve
PASTED_PATTERN = '''def solve(model, question):
    reply = model.generate([{"role": "user", "content": f"Write a Python program that prints the answer to:\\n{question}"}],
                           max_tokens=400)[0]
    code = reply.split("```python")[-1].split("```")[0] if "```" in reply else reply
    output = model.python(code)  # what the program printed, or "Error: ..."
    return output.strip()
'''


def test_packaged_sources_are_the_zoo_the_runtime_api_patterns_and_the_few_shot_example() -> None:
    known = {s.name: s for s in sources.known_sources()}
    assert list(known) == [f"zoo:{n}" for n in zoo.ENTRIES] + ["api:1", "api:2", "prompt:few_shot"]
    assert all(check_source(s.source) is None for s in known.values())
    assert all(known[f"zoo:{n}"].source == zoo.source(n) and known[f"zoo:{n}"].qa == e.qa
               for n, e in zoo.ENTRIES.items())
    api1, api2, shot = known["api:1"], known["api:2"], known["prompt:few_shot"]
    assert api1.origin == api2.origin == "runtime_api" and shot.origin == "prompt"
    assert "model.python(code)" in api1.source and api1.source.endswith("    return str(output).strip()\n")
    assert 'rsplit("Answer:", 1)' in api2.source and api2.source.endswith("    return str(answer).strip()\n")
    assert "Think step by step" in shot.source and 'f"Question: {question}\\nAnswer:"' not in shot.source  # edited
    assert sources.known_sources() is sources.known_sources()  # the packaged list is built once


def test_the_pasted_program_pattern_is_a_copy_of_api_1_and_not_of_the_zoo() -> None:
    name, ratio = sources.nearest(PASTED_PATTERN)
    assert name == "api:1" and ratio >= sources.COPY == 0.8
    assert zoo.nearest(PASTED_PATTERN)[1] < zoo.NEAR_COPY  # what best_nearest_zoo alone would miss
    rec = sources.provenance(PASTED_PATTERN)
    assert rec["nearest"] == "api:1" and rec["copy"] is True and rec["contained"] >= 0.8
    assert sources.nearest(PASTED_PATTERN, qa=True)[0] == "api:1"  # the runtime API is shown for QA tasks too


def test_the_minimal_seed_and_a_filled_few_shot_zoo_harness() -> None:
    rec = sources.provenance(load_harness("minimal").source)
    assert rec["copy"] is False and rec["ratio"] < 0.8 and rec["nearest"] is not None
    filled = re.sub(r"^EXAMPLES = \[\].*$", "EXAMPLES = [\n    ('q', 'a'),\n]", zoo.source("few_shot"), count=1,
                    flags=re.MULTILINE)
    assert filled != zoo.source("few_shot") and sources.nearest(filled) == ("zoo:few_shot", 1.0)
    assert sources.nearest(zoo.source("retrieve_read"), qa=False)[0] != "zoo:retrieve_read"  # QA files left out


def test_a_prompt_dir_and_the_runtime_api_change_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    (tmp_path / "few_shot.txt").write_text(
        "For this harness:\n\ndef solve(model, question):\n    return model(question).strip()\n\nan edit:\n\n"
        "<<<<<<< SEARCH\n    return model(question).strip()\n=======\n"
        "    votes = model.generate(question, n=3)\n    return max(set(votes), key=votes.count).strip()\n"
        ">>>>>>> REPLACE\n")
    shot = {s.name: s for s in sources.known_sources(tmp_path)}["prompt:few_shot"]
    assert "votes.count" in shot.source and check_source(shot.source) is None
    assert sources.nearest(shot.source, prompt_dir=tmp_path) == ("prompt:few_shot", 1.0)
    assert sources.nearest(shot.source)[1] < 1.0  # the packaged list is not the folder's
    (tmp_path / "few_shot.txt").write_text("No example here.\n")  # shows no harness: no source
    assert "prompt:few_shot" not in {s.name for s in sources.known_sources(tmp_path)}

    doc = ("Intro.\n\n    x = 1\n\nNot code.\n\n    print(model.python('print(1)'))\n\n"  # no model / no assignment
           "More.\n\n    out = model.generate('q')[0]\n    out = out.upper()\n\nText.\n")
    monkeypatch.setattr(sources, "runtime_api_doc", lambda: doc)
    api = [s for s in sources.known_sources(tmp_path) if s.origin == "runtime_api"]
    assert [s.name for s in api] == ["api:1"] and api[0].source == (
        "def solve(model, question):\n    out = model.generate('q')[0]\n    out = out.upper()\n    return str(out).strip()\n")


MODELS = '''
from harnesslearn import zoo
from harnesslearn.harness import load_harness

SEED = load_harness("minimal").source
_calls = []

def paste_then_edit(prompt, **kw):  # odd calls paste the zoo's interpreter loop, even ones make a small edit
    _calls.append(1)
    if len(_calls) % 2:
        return "<<<<<<< SEARCH\\n" + SEED.rstrip("\\n") + "\\n=======\\n" + zoo.source("interpreter_loop") + ">>>>>>> REPLACE\\n"
    return "<<<<<<< SEARCH\\n    return completion.strip()\\n=======\\n    return completion.strip() + '!'\\n>>>>>>> REPLACE\\n"
'''


def test_adapt_json_reports_a_pasted_zoo_harness_in_each_strategy(tmp_path: Path) -> None:
    task = tmp_path / "six.jsonl"
    task.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is 2 times 3? ({i})", "answer": "6"}) + "\n"
                            for i in range(40)))
    (tmp_path / "models.py").write_text(MODELS)
    p = subprocess.run(
        [sys.executable, "-m", "harnesslearn.cli", "adapt", "--task", f"jsonl:{task}",
         "--solver", f"python:{ROOT / 'tests' / 'zoo_solver.py'}:six",
         "--proposer", f"python:{tmp_path / 'models.py'}:paste_then_edit", "--strategy", "compare",
         "--rounds", "1", "--candidates", "2", "--n-feedback", "2", "--n-score", "4", "--n-test", "4",
         "--no-memory", "--run-dir", str(tmp_path / "run"), "--json"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "HARNESSLEARN_PROGRESS": "0"})
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    for name in ("sequential", "independent"):
        prov = out["compare"][name]["provenance"]
        assert prov["copy_ratio"] == 0.8 and prov["valid"] == 2 and prov["copies"] == 1 and prov["distinct_valid"] == 2
        assert sorted((r["index"], r["round"]) for r in prov["proposals"]) == [(0, 1), (1, 1)]
        assert sorted(r["copy"] for r in prov["proposals"]) == [False, True]
        assert prov["winner"] == {"nearest": "zoo:interpreter_loop", "ratio": 1.0, "contained": 1.0, "copy": True}
    assert out["provenance"] == out["compare"]["sequential"]["provenance"]
    assert out["best_nearest_zoo"]["name"] == "interpreter_loop"  # kept as it was


def test_provenance_of_a_run_that_kept_its_seed(tmp_path: Path) -> None:
    from harnesslearn.adapt import provenance_of
    from harnesslearn.store import ProposalRow, Store

    seed = load_harness("minimal")
    with Store.open(tmp_path / "run") as store:
        bad = ProposalRow(1, "sequential", 1, 0, seed.id, None, "x", False, False, False, "no_blocks", None, 0,
                          None, "")
        prov = provenance_of(store, [bad], seed, seed)
    assert prov == {"copy_ratio": 0.8, "valid": 0, "copies": 0, "distinct_valid": 0, "winner": None,
                    "proposals": [{"round": 1, "index": 0, "valid": False, "nearest": None, "ratio": None, "contained": None,
                                   "copy": False}]}


# stretch 11's untrained winner on basic_arithmetic: the runtime API's program pasted into the seed's solve, with the
# seed's own lines, comments and a stray line around it (whole-text ratio 0.55 to api:1)
EMBEDDED_PASTE = '''"""Seed harness: one solver call, then extract the answer."""


def solve(model, question):
    prompt = f"Question: {question}\\nAnswer:"
    completion = model(prompt, max_tokens=64, temperature=0.0, stop=["\\n"])
    # Let the solver write a program for the computation and run it with model.python(code); tell
    # the solver the exact answer format; extract the final answer carefully from its reply.
    reply = model.generate([{"role": "user", "content": f"Write a Python program that prints the answer to:\\n{question}"}],
                           max_tokens=400)[0]
    code = reply.split("```python")[-1].split("```")[0] if "```" in reply else reply
    output = model.python(code)  # what the program printed, or "Error: ..."
    # Extract the final answer carefully from its reply.
    answer = output.strip()
    gold_answer = "-110"
    return answer
'''


def test_a_known_program_pasted_with_lines_around_it_is_a_copy_by_containment() -> None:
    import difflib

    m = sources.match(EMBEDDED_PASTE)
    assert difflib.SequenceMatcher(None, EMBEDDED_PASTE, sources.known_sources()[7].source).ratio() < 0.6
    assert m.name == "api:1" and m.ratio < sources.COPY <= m.contained and m.share >= sources.PASTE_SHARE
    assert m.copy


def test_a_known_pattern_that_is_a_small_part_of_a_larger_program_is_not_a_copy() -> None:
    helpers = "".join(f"\n\ndef helper_{i}(text):\n    words = [w for w in text.split() if len(w) > {i}]\n"
                      f"    return sorted(words, key=lambda w: (len(w), w))[:{i + 2}]\n" for i in range(12))
    m = sources.match(PASTED_PATTERN + helpers)
    assert m.contained >= sources.COPY and m.share < sources.PASTE_SHARE and not m.copy
