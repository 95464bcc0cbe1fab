"""The proposer: build the revision prompt from feedback, and sample completions.

The prompt (templates in ``prompts/*.txt``) holds the task description, the harness runtime
API document, the current harness source, aggregate feedback (J, completion rate, status
counts), a few sampled per-problem traces from the *feedback* split (question, harness answer,
gold answer, status, error excerpt, model-call excerpts; every field length-capped), earlier
revisions and their J change, then the SEARCH/REPLACE format with an example. It ends where
the completion should begin: with ``PRIME`` (an opening SEARCH marker, ``prime="search"``), or
(``prime="rewrite"``, for weak base models) with a block whose SEARCH is the whole current
``solve`` function and whose REPLACE starts with its ``def`` line, so the model only writes the
new body. ``as_proposal`` puts that primed tail back in front of a completion that has no SEARCH
marker of its own.

Two prompt forms. ``plain`` (above, :func:`build_prompt`) is one text for base models, which
continue it. ``chat`` (:func:`build_messages`) is a system + user message pair for
instruction-tuned models, sent through their own chat template: the same sections, no worked
example from a foreign harness (small models copy it), and the edit format shown on the
*current* harness's own ``solve`` lines, so the block the model is asked to write starts with
lines it can copy exactly. A chat completion is the proposal as it stands: nothing is put in
front of it, and a whole-file rewrite without blocks stays invalid (``no_blocks``).

The proposer knows nothing of sandboxing or the store: it turns an Evaluation into text and
text into completions. Training calls these same functions.
"""

from __future__ import annotations

import ast
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template
from typing import TYPE_CHECKING, Any, Literal, Protocol

from harnesslearn.harness import Harness, runtime_api_doc
from harnesslearn.models.base import Messages, ModelBackend
from harnesslearn.seeding import child_seed

if TYPE_CHECKING:  # the proposer reads evaluations; it never runs one
    from harnesslearn.evaluation import Evaluation, ProblemResult

PRIME = "<<<<<<< SEARCH\n"
END = ">>>>>>> REPLACE"
_SEARCH_MARKER = re.compile(r"^\s*<{5,9}\s?SEARCH\s*$", re.MULTILINE)
_END_MARKER = re.compile(r"^\s*>{5,9}\s?REPLACE\s*$", re.MULTILINE)

# length caps (characters) for each field of a trace
CAP_QUESTION = 600
CAP_ANSWER = 200
CAP_ERROR = 400
CAP_CALL = 300
MAX_CALLS_PER_TRACE = 2
MAX_HISTORY = 12

Style = Literal["canonical", "varied"]
Prime = Literal["search", "rewrite", "file"]
Form = Literal["chat", "plain"]
PrimeChoice = Literal["auto", "search", "rewrite", "file"]
FormChoice = Literal["auto", "chat", "plain"]
STYLES: tuple[Style, ...] = ("canonical", "varied")
PRIMES: tuple[Prime, ...] = ("search", "rewrite")
PRIME_CHOICES: tuple[PrimeChoice, ...] = ("auto", "search", "rewrite", "file")
FORM_CHOICES: tuple[FormChoice, ...] = ("auto", "chat", "plain")


@cache
def template(name: str) -> str:
    """A prompt template from ``prompts/NAME.txt`` (trailing newline stripped)."""
    return (resources.files("harnesslearn") / "prompts" / f"{name}.txt").read_text(encoding="utf-8").rstrip("\n")


class _TaskLike(Protocol):
    @property
    def description(self) -> str: ...


@dataclass(frozen=True)
class Attempt:
    """One earlier proposal, for the "earlier revisions" section."""

    round: int
    index: int
    valid: bool
    reason: str | None  # why it was invalid
    parent_J: float | None  # score-split J of the harness it revised
    J: float | None  # score-split J of the candidate (valid ones)
    edit: str  # the proposal text


def cap(text: Any, n: int, *, tail: bool = False) -> str:
    """``text`` as a one-piece string of at most ``n`` characters (head, or tail for tracebacks)."""
    s = "" if text is None else text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    if len(s) <= n:
        return s
    return "..." + s[-(n - 3):] if tail else s[: n - 3] + "..."


def _fmt_j(j: float | None) -> str:
    return "n/a" if j is None else f"{j:.3f}"


def _call_excerpts(problem: ProblemResult) -> list[str]:
    calls = problem.record.calls[:MAX_CALLS_PER_TRACE]
    out = []
    for c in calls:
        req = c.request if isinstance(c.request, dict) else {"prompt": c.request}
        arg = req.get("prompt", req.get("code", req.get("query", req)))
        resp = c.error if c.error else c.response
        out.append(f"[{c.kind}] {cap(arg, CAP_CALL, tail=True)!r} -> {cap(resp, CAP_CALL)!r}")
    return out


def _trace_fields(problem: ProblemResult) -> dict[str, Any]:
    return {
        "question": cap(problem.question, CAP_QUESTION),
        "harness answer": cap(problem.answer, CAP_ANSWER),
        "gold answer": cap(problem.gold, CAP_ANSWER),
        "status": str(problem.status),
        "score": problem.score,
        "error": cap(problem.error, CAP_ERROR, tail=True) if problem.error else None,
        "calls": _call_excerpts(problem),
    }


def sample_traces(feedback: Evaluation, n_traces: int, rng: random.Random) -> list[ProblemResult]:
    """Up to ``n_traces`` problems, failures first (random order within each group)."""
    problems = [p for p in feedback.problems if p.score is not None]
    failed = [p for p in problems if (p.score or 0.0) < 1.0]
    passed = [p for p in problems if (p.score or 0.0) >= 1.0]
    rng.shuffle(failed)
    rng.shuffle(passed)
    return (failed + passed)[:n_traces]


def render_trace(i: int, fields: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"problem": i, **fields}, ensure_ascii=False)
    lines = [f"### Problem {i} (status {fields['status']}, score {fields['score']})"]
    for key in ("question", "harness answer", "gold answer", "error"):
        if fields[key] is not None:
            lines.append(f"{key.capitalize()}: {fields[key]}")
    lines += [f"Call: {c}" for c in fields["calls"]]
    return "\n".join(lines)


def render_aggregate(feedback: Evaluation, fmt: str) -> str:
    counts: dict[str, int] = {}
    for p in feedback.problems:
        counts[str(p.status)] = counts.get(str(p.status), 0) + 1
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    if fmt == "table":
        return (
            "| J (mean score) | completion rate | problems | statuses |\n|---|---|---|---|\n"
            f"| {_fmt_j(feedback.J)} | {_fmt_j(feedback.completion_rate)} | {len(feedback.problems)} | {statuses} |"
        )
    return (
        f"J (mean score) = {_fmt_j(feedback.J)}; completion rate = {_fmt_j(feedback.completion_rate)}; "
        f"statuses: {statuses}."
    )


def render_history(history: Sequence[Attempt]) -> str:
    if not history:
        return "None yet."
    lines = []
    for a in list(history)[-MAX_HISTORY:]:
        head = f"Round {a.round}, candidate {a.index}: "
        if not a.valid:
            lines.append(head + f"invalid edit ({a.reason}).")
        else:
            lines.append(
                head + f"J {_fmt_j(a.parent_J)} -> {_fmt_j(a.J)}. Edit: {cap(a.edit.strip(), CAP_CALL)!r}"
            )
    return "\n".join(lines)


CAP_MEMORY_SOURCE = 4000
CAP_MEMORY_TASK = 300
CAP_MEMORY_NOTE = 200


def render_memory(entries: Sequence[Any]) -> str:
    """The "harnesses that worked on other tasks" section (``memory.Entry``s), or "" for none."""
    if not entries:
        return ""
    items = "".join(Template(template("memory_entry")).substitute(
        i=i + 1, task=cap(" ".join(e.description.split()), CAP_MEMORY_TASK), note=cap(" ".join(e.note.split()), CAP_MEMORY_NOTE) or "(no note)",
        seed_J=_fmt_j(e.seed_J), score_J=_fmt_j(e.score_J), source=cap(e.source.rstrip("\n"), CAP_MEMORY_SOURCE))
        for i, e in enumerate(entries))
    return Template(template("memory")).substitute(entries=items)


def _sections(task: _TaskLike, harness: Harness, feedback: Any, history: Sequence[Attempt], *, style: Style,
              n_traces: int, rng_seed: int, memory: Sequence[Any] = ()) -> tuple[str, dict[str, Any]]:
    """(template name, substitutions) shared by both prompt forms; seeded by ``rng_seed``."""
    if style not in ("canonical", "varied"):
        raise ValueError(f"unknown prompt style {style!r}")
    rng = random.Random(rng_seed)
    traces = sample_traces(feedback, n_traces, rng)
    if style == "canonical":
        trace_fmt, agg_fmt, name = "fields", "sentence", "propose"
    else:
        trace_fmt, agg_fmt, name = rng.choice(["fields", "json"]), rng.choice(["sentence", "table"]), "propose_varied"
    rendered = "\n\n".join(render_trace(i + 1, _trace_fields(p), trace_fmt) for i, p in enumerate(traces))
    return name, {
        "task": cap(task.description, 1500),
        "api": runtime_api_doc().strip(),
        "source": harness.source.rstrip("\n"),
        "n_problems": len(feedback.problems),
        "aggregate": render_aggregate(feedback, agg_fmt),
        "traces": rendered or "(no problems)",
        "history": render_history(history),
        "memory": render_memory(memory),
    }


def build_prompt(task: _TaskLike, harness: Harness, feedback: Evaluation, history: Sequence[Attempt] = (), *,
                 style: Style = "canonical", n_traces: int = 4, rng_seed: int = 0, prime: Prime = "search",
                 memory: Sequence[Any] = ()) -> str:
    """The plain-text revision prompt (for base models) for ``harness`` given its ``feedback``
    Evaluation (feedback split).

    ``style="canonical"``: fixed section order, traces as labelled fields, aggregate as a
    sentence. ``style="varied"``: another section order (``prompts/propose_varied.txt``), and,
    chosen by ``rng_seed``, traces as JSON lines or fields and the aggregate as a table or a
    sentence. Trace sampling is seeded by ``rng_seed``; the prompt is a pure function of the
    arguments. It ends with ``PRIME`` (``prime="search"``) or with ``rewrite_tail(source)``
    (``prime="rewrite"``; ``PRIME`` when the source has no multi-line ``solve``)."""
    if prime not in ("search", "rewrite"):
        raise ValueError(f"unknown prompt prime {prime!r}")
    name, subs = _sections(task, harness, feedback, history, style=style, n_traces=n_traces, rng_seed=rng_seed,
                           memory=memory)
    text = Template(template(name)).substitute(
        system=template("system"), format=template("format"), example=template("few_shot"),
        instruction=template("instruction"), **subs,
    )
    tail = (rewrite_tail(harness.source) if prime == "rewrite" else None) or PRIME
    return text + "\n" + tail


def build_messages(task: _TaskLike, harness: Harness, feedback: Any, history: Sequence[Attempt] = (), *,
                   style: Style = "canonical", n_traces: int = 4, rng_seed: int = 0,
                   prime: Literal["none", "rewrite", "file"] = "none", prefill: bool = True,
                   memory: Sequence[Any] = ()) -> Messages:
    """The chat revision prompt (for instruction-tuned models): a system and a user message.

    The same sections as :func:`build_prompt` (``style="varied"`` varies the trace and
    aggregate formats, not the order). The edit format is described in words and the lines to
    copy into SEARCH are the current harness's own ``solve`` function (``solve_lines``): there is
    no worked example, so nothing invites copying lines of another harness.

    ``prime="rewrite"`` adds the start of the answer as a last assistant message, which the
    model continues (in-process engines render it as an open turn): the block of the plain
    rewrite prime (:func:`rewrite_tail`), opened on the current ``solve`` with the divider and
    the new ``def`` line written, so the model writes only the new body. With ``prefill=False``
    (a chat API that cannot continue an assistant turn) the same rewrite is asked for in words:
    the model answers with the new ``solve`` function in a code block
    (``prompts/chat_function.txt``), and :func:`finish_function` builds the block around it.
    ``prime="none"`` asks for whole edit blocks (ending with ``prompts/chat_open.txt``)."""
    _, subs = _sections(task, harness, feedback, history, style=style, n_traces=n_traces, rng_seed=rng_seed,
                        memory=memory)
    search = solve_lines(harness.source) or harness.source.rstrip("\n")
    if prime == "file":
        fmt = template("chat_file")
    elif prime == "rewrite" and not prefill:
        fmt = Template(template("chat_function")).substitute(search=search)
    else:
        opening = "" if prime == "rewrite" else "\n" + template("chat_open")
        fmt = Template(template("chat_format")).substitute(search=search, open=opening)
    msgs: Messages = [
        {"role": "system", "content": template("chat_system")},
        {"role": "user", "content": Template(template("chat_user")).substitute(format=fmt, **subs)},
    ]
    if prime == "rewrite" and prefill:
        msgs.append({"role": "assistant", "content": rewrite_tail(harness.source) or PRIME})
    return msgs


def prompt_form(proposer: ModelBackend, requested: str = "auto") -> Form:
    """The prompt form for ``proposer``: ``chat`` when chat messages reach it through its own
    template, ``plain`` for base models and when unknown (python: callables); ``requested``
    (``chat``/``plain``) overrides."""
    if requested in ("chat", "plain"):
        return requested  # type: ignore[return-value]
    if requested != "auto":
        raise ValueError(f"unknown prompt form {requested!r}")
    return "chat" if proposer.chat_template() else "plain"


def resolve_prime(proposer: ModelBackend, form: Form, requested: str = "auto") -> Prime:
    """Where the prompt ends: ``requested`` when it is ``search`` or ``rewrite``; for ``auto``,
    ``rewrite`` for a chat prompt (the model writes the new ``solve``: continuing an
    assistant-turn start where the engine can, else asked in words; the measured best for the
    untrained Qwen coders, which as a rule fail to write whole blocks: 0/8 valid on gcd), else
    ``search`` (plain text ending in an opening SEARCH marker, for base models). ``file`` asks a chat
    model for the complete new harness file (the format that harness memory needs: borrowed harnesses
    come with module-level helpers)."""
    if requested in ("search", "rewrite", "file"):
        return requested  # type: ignore[return-value]
    if requested != "auto":
        raise ValueError(f"unknown prime {requested!r}")
    return "rewrite" if form == "chat" else "search"


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


def candidate_seed(seed: int, round: int, index: int) -> int:
    """The sampling seed of candidate ``index`` in ``round``: fixed per (seed, round, index), so
    a resumed run re-samples exactly the proposals it had not recorded."""
    return child_seed(seed, round * 10_007 + index) % (2**31 - 1)


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
