"""Failure taxonomy: one property per test, and the answer-table flag."""

from __future__ import annotations

from harnesslearn.sandbox.records import CallRecord
from harnesslearn.taxonomy import FailureKind, classify, find_answer_tables, rollup


def _model(resp: str, error: str | None = None) -> CallRecord:
    return CallRecord("model", {"prompt": "q"}, resp, error=error)


def test_success_and_infra_are_not_failures() -> None:
    assert classify(status="ok", score=1.0, answer="4", gold="4") is None
    assert classify(status="infra_error", score=None, answer=None, gold="4") is None


def test_budget_and_timeout() -> None:
    for st in ("timeout", "budget_exceeded", "memory"):
        assert classify(status=st, score=0.0, answer=None, gold="4") == FailureKind.TIMEOUT_OR_BUDGET


def test_harness_error_without_failed_call() -> None:
    assert classify(status="harness_error", score=0.0, answer=None, gold="4", calls=[_model("4")]) == \
        FailureKind.HARNESS_ERROR


def test_failed_or_empty_call_is_communication() -> None:
    assert classify(status="harness_error", score=0.0, answer=None, gold="4",
                    calls=[_model("", error="ModelError: down")]) == FailureKind.COMMUNICATION
    assert classify(status="ok", score=0.0, answer="", gold="4", calls=[_model("   ")]) == FailureKind.COMMUNICATION
    py = CallRecord("python", {"code": "x"}, "Error: NameError: x")
    assert classify(status="ok", score=0.0, answer="5", gold="4", calls=[py]) == FailureKind.COMMUNICATION


def test_extraction_needs_gold_as_a_token_in_a_completion() -> None:
    calls = [_model("Let me think. 2+2 = 4, so the answer is 4.")]
    assert classify(status="ok", score=0.0, answer="Let me think.", gold="4", calls=calls) == FailureKind.EXTRACTION
    # "4" inside "14" is not the gold answer appearing
    assert classify(status="ok", score=0.0, answer="7", gold="4", calls=[_model("14")]) == FailureKind.REASONING
    # aliases (a JSON list stored as text) count
    assert classify(status="ok", score=0.0, answer="x", gold='["Paris", "paris, france"]',
                    calls=[_model("It is Paris.")]) == FailureKind.EXTRACTION


def test_wrong_answer_is_reasoning() -> None:
    assert classify(status="ok", score=0.0, answer="5", gold="4", calls=[_model("5")]) == FailureKind.REASONING


def test_rollup_per_family() -> None:
    rows = [("a", "reasoning"), ("a", None), ("b", "extraction"), ("a", "reasoning")]
    r = rollup(rows)
    assert r["a"]["reasoning"] == 2 and r["b"]["extraction"] == 1 and r["a"]["extraction"] == 0


def test_answer_table_flags() -> None:
    table = "ANSWERS = {" + ", ".join(f"'q{i}': '{i}'" for i in range(10)) + "}\n"
    src = table + "def solve(model, question):\n    return ANSWERS.get(question, '')\n"
    assert [f.kind for f in find_answer_tables(src)] == ["dict_literal"]
    pairs = "T = [" + ", ".join(f"('q{i}', {i})" for i in range(9)) + "]\n"
    assert [f.kind for f in find_answer_tables(pairs)] == ["pair_list"]
    q = "What is 1234 plus 4321?"
    src2 = f"def solve(model, question):\n    if question == {q!r}:\n        return '5555'\n    return ''\n"
    assert [f.kind for f in find_answer_tables(src2, [q])] == ["question_literal"]


def test_ordinary_harness_is_not_flagged() -> None:
    from harnesslearn.harness import seed_source

    assert find_answer_tables(seed_source("minimal"), ["What is 2 + 2?"]) == []
    small = "M = {'one': 1, 'two': 2, 'three': 3}\ndef solve(model, question):\n    return ''\n"
    assert find_answer_tables(small) == []


def test_solver_use_reads_what_a_harness_does_with_its_solver() -> None:
    """computes (no model call: GEPA's gcd program), solver_program (model.python, also through a helper that gets
    the model), prompt_level (solver calls only), invalid; a __main__ block that calls the model does not count."""
    from harnesslearn import zoo
    from harnesslearn.taxonomy import solver_use

    computes = ("import re\nfrom math import gcd\n\ndef solve(model, question):\n"
                "    a, b = map(int, re.findall(r'\\d+', question)[:2])\n    return str(gcd(a, b))\n\n"
                "if __name__ == '__main__':\n    print(solve(model, 'GCD of 4 and 6?'))\n    model('x')\n")
    assert solver_use(computes) == "computes"
    assert solver_use("def solve(m, q):\n    return m(f'Q: {q}').strip()\n") == "prompt_level"
    assert solver_use("def solve(model, q):\n    return model.generate([{'role': 'user', 'content': q}])[0]\n") \
        == "prompt_level"
    helper = ("def run(llm, code):\n    return llm.python(code)\n\n"
              "def solve(model, question):\n    code = model(question)\n    return run(llm=model, code=code)\n")
    assert solver_use(helper) == "solver_program"
    assert solver_use(zoo.source("interpreter_loop")) == "solver_program"
    assert solver_use("def solve(model, q)\n    return q\n") == "invalid"
    assert solver_use("def answer(model, q):\n    return q\n") == "invalid"
    # a helper of the same name as the model parameter of another function: followed once, no loop
    loop = "def f(model):\n    return f(model)\n\ndef solve(model, q):\n    return f(model)\n"
    assert solver_use(loop) == "computes"


def test_harness_kind_tells_a_zoo_copy_before_its_solver_use() -> None:
    """A near-copy of a zoo file is a zoo_copy whatever it does with the solver (the interpreter loop is a solver
    program); anything else is its solver_use."""
    from harnesslearn import zoo
    from harnesslearn.taxonomy import HARNESS_KINDS, harness_kind

    assert harness_kind(zoo.source("interpreter_loop")) == "zoo_copy"
    assert harness_kind(zoo.source("interpreter_loop") + "\n# tuned\n") == "zoo_copy"
    assert harness_kind("def solve(m, q):\n    return m(f'Q: {q}').strip()\n") == "prompt_level"
    assert harness_kind("def solve(m, q)\n") == "invalid" and "invalid" not in HARNESS_KINDS


def test_runs_solver_code_follows_the_solver_output_into_model_python() -> None:
    """The held-out pattern's measure: code the solver wrote, run with model.python (the zoo's interpreter loop,
    the runtime API's first program), followed through names, loops, helpers handed the model or the output;
    code the harness wrote itself (a constant, the question formatted) is not the solver's."""
    from harnesslearn import sources, zoo
    from harnesslearn.taxonomy import runs_solver_code, solver_code_share

    assert [n for n in zoo.ENTRIES if runs_solver_code(zoo.source(n))] == ["interpreter_loop"]
    api = {k.name: runs_solver_code(k.source) for k in sources.known_sources() if k.origin == "runtime_api"}
    assert api == {"api:1": True, "api:2": False}
    head = "def solve(model, question):\n"
    assert not runs_solver_code(head + "    return model.python('print(1)')\n")
    assert not runs_solver_code(head + "    code = f'print({question})'\n    return model.python(code)\n")
    assert runs_solver_code(head + "    for r in model.generate(question, n=3):\n        out = model.python(r)\n"
                                   "    return out\n")
    assert runs_solver_code(head + "    r = model(question)\n    return model.python(code=r.strip())\n")
    helper = "def ask(m, q):\n    return m.generate(q)[0]\n\n\ndef run(m, c):\n    return m.python(c)\n\n\n"
    assert runs_solver_code(helper + head + "    r = ask(model, question)\n    return model.python(r)\n")
    assert runs_solver_code(helper + head + "    r = model(question)\n    return run(model, r)\n")
    assert not runs_solver_code(helper + head + "    r = model(question)\n    return run(model, 'print(2)')\n")
    assert not runs_solver_code("def solve(:\n") and not runs_solver_code("x = 1\n")
    assert solver_code_share([zoo.source("interpreter_loop"), zoo.source("few_shot")]) == 0.5
    assert solver_code_share([]) is None
