"""The SFT quality screen and the revision classifier, one property per test."""

from __future__ import annotations

import pytest

from harnesslearn.harness import check_source, seed_source
from harnesslearn.seed_styles import STYLES
from harnesslearn.training.contexts import seed_harness
from harnesslearn.training.screen import classify_revision, screen

SEED = seed_source("minimal")


def test_seed_passes() -> None:
    assert screen(SEED) == []


@pytest.mark.parametrize("bad", [
    "import socket\n\ndef solve(model, question):\n    return 'x'\n",
    "from urllib import request\n\ndef solve(model, question):\n    return 'x'\n",
    "import subprocess\n\ndef solve(model, question):\n    return subprocess.run(['ls']).stdout\n",
    "def solve(model, question):\n    return open('/etc/passwd').read()\n",
    "def solve(model, question):\n    return __import__('os').system('id')\n",
])
def test_file_process_network_access_is_rejected(bad: str) -> None:
    assert set(screen(bad)) & {"forbidden_import", "forbidden_call"}


def test_answer_table_is_rejected() -> None:
    table = "T = {" + ", ".join(f"'q{i}': '{i}'" for i in range(10)) + "}\n\ndef solve(model, question):\n    return T.get(question, '')\n"
    assert "answer_table" in screen(table)
    leak = "def solve(model, question):\n    if question == 'What is the area of a square of side 3?':\n        return '9'\n    return ''\n"
    assert "answer_table" in screen(leak, questions=["What is the area of a square of side 3?"])


def test_size_limits_and_compile() -> None:
    big = SEED + "\n" + "\n".join(f"X{i} = {i}" for i in range(400)) + "\n"
    assert "too_many_lines" in screen(big, max_lines=300)
    assert screen("def solve(model, question):\n    return (\n") == ["syntax_error"]


@pytest.mark.parametrize("child,kind", [
    (SEED.replace("    return completion.strip()", "    code = model('Write Python: ' + question)\n"
                  "    return model.python(code).strip()"), "interpreter_loop"),
    (SEED.replace("    completion = model(prompt, max_tokens=64, temperature=0.0, stop=[\"\\n\"])",
                  "    from collections import Counter\n    outs = model.generate(prompt, n=5, temperature=0.7)\n"
                  "    completion = Counter(o.strip() for o in outs).most_common(1)[0][0]"), "sampling_voting"),
    (SEED.replace("    return completion.strip()", "    import re\n    m = re.findall(r'-?\\d+', completion)\n"
                  "    return m[-1] if m else completion.strip()"), "answer_extraction"),
    (SEED.replace("Question: {question}\\nAnswer:", "Solve carefully.\\nQ: {question}\\nFinal answer:"), "prompt_rewrite"),
    (SEED.replace("max_tokens=64", "max_tokens=128"), "other"),
])
def test_classify_revision(child: str, kind: str) -> None:
    assert child != SEED
    assert classify_revision(SEED, child) == kind


@pytest.mark.parametrize("name", sorted(STYLES))
def test_seed_styles_are_valid_harnesses(name: str) -> None:
    assert check_source(STYLES[name]) is None
    assert seed_harness(f"style:{name}").source.startswith(("def solve", '"""'))
