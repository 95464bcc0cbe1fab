"""The embedded Qwen2.5-Coder-1.5B-Instruct for real (llama.cpp, 2 CPU cores): chat messages go
through its own template in process and through a real ``llama_cpp.server`` reached with
``openai:``; as a solver it makes a better harness pay (an interpreter loop written here, not
one of the zoo's, against the minimal seed)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from extras import HANG_S, needs, needs_true
from llama_server import llama_server

from harnesslearn.models import GenerateRequest, embedded, load_model

QWEN = "qwen2.5-coder-1.5b-instruct"
ROOT = Path(__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.slow,
    needs_true(embedded.installed(QWEN), "qwen"),
    needs("llama_cpp", "llamacpp"),
]

QUESTIONS = [
    [{"role": "user", "content": "What is 12 + 30? Reply with the number only."}],
    [{"role": "system", "content": "You answer with one word."},
     {"role": "user", "content": "What is the capital of France?"}],
]


def generate_all(model, reqs):
    async def main():
        try:
            return [await model.generate(r) for r in reqs]
        finally:
            await model.aclose()

    return asyncio.run(main())


def test_chat_template_in_process_and_through_a_real_server(tmp_path: Path) -> None:
    reqs = [GenerateRequest(q, max_tokens=12, temperature=0.0) for q in QUESTIONS]
    local = load_model(f"local:{QWEN}", cache=False)
    assert local.chat_template() is True
    here = [c.text.strip() for c in generate_all(local, reqs)]
    assert "42" in here[0] and "Paris" in here[1]
    log = tmp_path / "server.log"
    with llama_server(embedded.ensure_gguf(QWEN), alias="qwen", n_ctx=4096, log=log) as url:
        served = load_model("openai:qwen", base_url=url, cache=False)
        there = [c.text.strip() for c in generate_all(served, reqs)]
    assert "42" in there[0] and "Paris" in there[1]
    # the same template, the same greedy decoding: the same answers
    assert here == there
    assert "/v1/chat/completions" in log.read_text(errors="replace")


INTERPRETER = '''
import re

def solve(model, question):
    ask = [{"role": "user", "content": "Write a Python program that prints only the answer to this problem:\\n" + question}]
    reply = model.generate(ask, max_tokens=300)[0]
    code = re.findall(r"```(?:python)?\\n(.*?)```", reply, re.S)
    out = model.python(code[0] if code else reply)
    return out.strip()
'''


def _run(harness: str, n: int) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "harnesslearn.cli", "run", harness, "--task", "rg:gcd", "--solver", f"local:{QWEN}",
         "--n", str(n), "--concurrency", "1", "--json"],
        capture_output=True, text=True, timeout=HANG_S, cwd=ROOT,  # the work: n problems, 300 tokens a call
        env={**os.environ, "HARNESSLEARN_PROGRESS": "0", "HARNESSLEARN_CACHE": "0"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_cli_run_with_qwen_solver_a_better_harness_pays(tmp_path: Path) -> None:
    h = tmp_path / "interp.py"
    h.write_text(INTERPRETER)
    minimal, interp = _run("minimal", 6), _run(str(h), 6)
    assert all(p["status"] == "ok" and p["calls"] >= 1 for p in minimal["problems"] + interp["problems"])
    assert any(c["kind"] == "python" for p in interp["problems"] for c in p["model_calls"])
    assert interp["J"] >= minimal["J"] + 0.3, (minimal["J"], interp["J"])


def test_the_qwen_demo_shows_the_shipped_memory_and_its_proposer_borrows_from_it(tmp_path: Path) -> None:
    """``harnesslearn demo --proposer local:qwen2.5-coder-1.5b-instruct --memory --family gcd`` for real (about 4
    minutes here): the untrained proposer is shown the shipped paper-train memory (never an entry of gcd), every
    proposal records the entries it saw, and a valid revision takes the memory's strategy (``model.python``). Measured on 2 cores (3
    candidates at temperature 0.8, the settings it gets): test J 0.500 -> 0.750, 3/3 valid; without the
    memory 0.500 -> 0.500."""
    import sqlite3

    rd = tmp_path / "demo"
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "demo", "--proposer", f"local:{QWEN}", "--memory",
                        "--family", "gcd", "--run-dir", str(rd), "--json"], capture_output=True, text=True, timeout=HANG_S,
                       env={**os.environ, "HARNESSLEARN_PROGRESS": "0", "HARNESSLEARN_CACHE": "0"})
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert len(out["memory_shown"]) == 2 and out["proposals"] == 3  # another proposer than the RL one: 3 samples
    assert "shipped with harnesslearn" in p.stderr
    c = sqlite3.connect(rd / "runs.sqlite")
    rows = c.execute("SELECT memory, valid, harness_id FROM proposals").fetchall()
    c.close()
    assert all(sorted(json.loads(m)) == sorted(out["memory_shown"]) for m, _, _ in rows)
    sources = [(rd / "harnesses" / f"{h}.py").read_text() for _, v, h in rows if v and h]
    assert any("model.python" in s for s in sources), sources
    assert out["test_J"] is not None and out["seed_test_J"] is not None


def _demo(rd: Path, *args: str) -> dict[str, object]:
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "demo", "--run-dir", str(rd), *args],
                       capture_output=True, text=True, timeout=HANG_S, env={**os.environ, "HARNESSLEARN_PROGRESS": "0"})
    assert p.returncode == 0, p.stderr[-3000:]
    out: dict[str, object] = json.loads(p.stdout) if "--json" in args else {"stdout": p.stdout}
    return out


def test_the_default_demo_raises_test_j_on_an_unseen_family_says_how_and_gives_the_same_j_twice(
        tmp_path: Path) -> None:
    """``harnesslearn demo`` as ``make demo`` runs it, for real: the embedded Qwen solver, the shipped RL proposer,
    the demo family (outside its training families). Bounded by work, not time: 1 greedy proposal of at most 768
    tokens, 3 + 6 + 12 problems for the seed and 6 + 12 for the revision, each within the demo's call and token
    budgets (2 min 34 s on 2 cores, 2026-12-08). Measured: test J 0.000 -> 1.000 on count_bits, the winner a
    near-copy of the zoo's interpreter loop (README). Then the same demo again in another directory, as a user would run it twice: the
    same proposal, harnesses and J (greedy calls, answered from the response cache the first run filled)."""
    from harnesslearn.demo import DEMO_FAMILY
    from harnesslearn.tasks.families import family_set

    first = _demo(tmp_path / "a", "--json")
    assert first["family"] == DEMO_FAMILY and first["proposer"] == f"local:{QWEN}?adapter=rl"
    assert first["training_families"] == family_set("paper-train") and DEMO_FAMILY not in family_set("paper-train")
    assert first["proposals"] == 1 and first["memory_shown"] == []
    assert float(first["test_J"]) > float(first["seed_test_J"])  # type: ignore[arg-type]
    lines = first["lines"]
    assert isinstance(lines, list) and lines[0].startswith(f"rg:{DEMO_FAMILY} was unseen in training")
    assert lines[1].startswith("test J rose: ")
    win = first["provenance"]["winner"]  # type: ignore[index]
    assert lines[2].startswith(f"the winning revision is a near-copy of {win['nearest']}" if win["copy"]
                               else "the winning revision is the proposer's own")
    html = Path(str(first["report"])).read_text()
    assert html.index("test J rose: ") < html.index('<h2 id="run-0"')  # the verdict at the top of the report
    again = _demo(tmp_path / "b", "--json")
    for key in ("seed_test_J", "test_J", "seed_harness_id", "best_harness_id", "lines"):
        assert again[key] == first[key], key


def test_the_shipped_rl_adapter_writes_the_zoo_interpreter_loop_on_an_unseen_family_and_the_base_model_does_not(
        ) -> None:
    """``local:...?adapter=rl`` for real on llama.cpp (the GRPO-trained proposer shipped with the package, converted
    to a GGUF LoRA): greedy, on the eval stage's prompt for gcd (a family it never trained on; the prompt the
    device's eval sent, kept in tests/data), its revision is valid and a near-copy of the zoo's interpreter loop,
    as all 14 of its winning revisions in the transfer table are; the untrained model's reply to the same prompt
    is not. At most 768 + 768 tokens (~1-2 minutes on 2 cores)."""
    from harnesslearn import zoo
    from harnesslearn.harness import load_harness
    from harnesslearn.propose.edits import apply_proposal
    from harnesslearn.propose.formats import by_name
    from harnesslearn.propose.rounds import sample

    messages = json.loads((ROOT / "tests" / "data" / "eval_prompt_gcd.json").read_text())
    seed = load_harness("minimal").source

    async def revision(spec: str) -> tuple[bool, dict[str, object] | None]:
        m = load_model(spec, cache=False)
        try:
            text, _, _ = await sample(m, by_name("chat-prefill"), messages, temperature=0.0, max_tokens=768,
                                      source=seed)
        finally:
            await m.aclose()
        r = apply_proposal(seed, text)
        return r.valid, zoo.near(r.source) if r.valid and r.source is not None else None

    valid, near = asyncio.run(revision(f"local:{QWEN}?adapter=rl"))
    assert valid and near is not None and near["name"] == "interpreter_loop", near
    assert float(near["ratio"]) >= zoo.NEAR_COPY, near  # type: ignore[arg-type]
    valid, near = asyncio.run(revision(f"local:{QWEN}"))
    assert not (valid and near is not None and float(near["ratio"]) >= zoo.NEAR_COPY), near  # type: ignore[arg-type]
def test_prepare_makes_the_demos_one_time_files_so_that_the_first_demo_does_not(tmp_path: Path) -> None:
    """``demo.prepare()`` (the set-up script's last step): the default demo's and the smoke's model files are in the
    models cache and the shipped adapter's GGUF LoRA in the cache folder afterwards; no weights are loaded."""
    from harnesslearn.demo import prepare
    from harnesslearn.fsutil import cache_dir

    lora = cache_dir() / "lora"  # the test session's own cache folder (conftest): emptied here
    for f in lora.glob("*.gguf"):
        f.unlink()
    assert prepare() == [f"local:{QWEN}", f"local:{QWEN}?adapter=rl", "local:gemma-3-270m"]
    assert embedded.gguf_path(QWEN).is_file() and embedded.gguf_path("gemma-3-270m").is_file()
    assert len(list(lora.glob("*.gguf"))) == 1
