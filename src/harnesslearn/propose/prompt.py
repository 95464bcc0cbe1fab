"""The revision prompt's sections: what the proposer is shown, in either form.

A prompt (templates in ``prompts/*.txt``) holds the task description, the harness runtime API
document, the current harness source, aggregate feedback (J, completion rate, status counts), a few
sampled per-problem traces from the *feedback* split (question, harness answer, gold answer, status,
error excerpt, model-call excerpts; every field length-capped), harness memory entries when there are
any, and earlier revisions with their J change.

Two forms, and this module makes both up to where the formats (``formats.py``) take over:

- :func:`plain_prompt`: one text for base models, which continue it (the SEARCH/REPLACE format shown
  with a worked example); the format adds the ending the completion starts from.
- :func:`chat_prompt`: a system + user message pair for instruction-tuned models, sent through their
  own chat template: the same sections, no worked example from a foreign harness (small models copy
  it); the format gives the words that ask for the answer (and may open the assistant turn).

The prompt is a pure function of its :class:`PromptContext` (traces sampled with ``rng_seed``). It
knows nothing of sandboxing or the store: it turns an Evaluation into text.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any, Literal

from harnesslearn.fsutil import read_regular
from harnesslearn.harness import Harness, runtime_api_doc
from harnesslearn.models.base import Messages

if TYPE_CHECKING:  # the prompt reads evaluations; it never runs one
    from harnesslearn.evaluation import Evaluation, ProblemResult

# length caps (characters) for each field of a trace
CAP_QUESTION = 600
CAP_ANSWER = 200
CAP_ERROR = 400
CAP_CALL = 300
MAX_CALLS_PER_TRACE = 2
MAX_HISTORY = 12

Style = Literal["canonical", "varied"]


_OVERRIDES: dict[str, str] = {}  # template name -> the user's text, while ``use_prompts`` is active


def template(name: str) -> str:
    """A prompt template: the user's override of it (``--prompt-dir``) while one is in use, else the packaged
    ``prompts/NAME.txt`` (trailing newline stripped)."""
    return _OVERRIDES.get(name) or packaged_template(name)


@cache
def packaged_template(name: str) -> str:
    return (resources.files("harnesslearn.propose") / "prompts" / f"{name}.txt").read_text(encoding="utf-8").rstrip("\n")


def packaged_digest() -> str:
    """A digest of every packaged template's text (16 hex digits): what a record keeps so that results asked with
    one set of prompts are never mixed with results asked with another (the peers benchmark's ``--carry``)."""
    h = hashlib.sha256()
    for name in template_names():
        h.update(f"{name}\0{packaged_template(name)}\0".encode())
    return h.hexdigest()[:16]


def template_names() -> list[str]:
    return sorted(p.name[:-4] for p in (resources.files("harnesslearn.propose") / "prompts").iterdir()
                  if p.name.endswith(".txt"))


API = "RUNTIME_API"  # the key of a prompt folder's RUNTIME_API.md among its overrides
PACKAGED = "packaged:"  # a prompt folder shipped in the package: packaged:NAME is propose/prompts_NAME/


def api_doc() -> str:
    """The harness runtime API as the proposer is shown it: the ``RUNTIME_API.md`` of the prompt folder in use
    (``use_prompts``), else the packaged ``seeds/RUNTIME_API.md`` (``harness.runtime_api_doc``)."""
    return _OVERRIDES.get(API) or runtime_api_doc()


def packaged_prompt_dirs() -> list[str]:
    """The prompt folders shipped in the package, as ``packaged:NAME`` (``propose/prompts_NAME/``)."""
    return sorted(PACKAGED + p.name.removeprefix("prompts_") for p in resources.files("harnesslearn.propose").iterdir()
                  if p.name.startswith("prompts_") and p.is_dir())


MAX_TEMPLATE_BYTES = 256 * 1024  # a prompt template of a user's: the packaged ones are under 4 KB


def load_prompt_dir(path: str) -> dict[str, str]:
    """The templates a folder overrides (``NAME.txt`` for any packaged ``NAME``), checked at start: a file
    that is not a regular one (a FIFO, a device, a link to one) or is over ``MAX_TEMPLATE_BYTES``, an empty one, an
    unknown name, a placeholder of the packaged template that the override lacks, or one it does not know
    (``$name``: ``string.Template``) is a UserError naming the file. A ``RUNTIME_API.md`` in the folder replaces
    the runtime API document the prompts show (key :data:`API`; shown as it is, no placeholders). ``path``
    ``packaged:NAME`` is a folder shipped in the package (``packaged_prompt_dirs``: ``packaged:heldout``, the
    held-out-pattern control's prompts)."""
    from harnesslearn.errors import UserError

    if path.startswith(PACKAGED):
        d = Path(str(resources.files("harnesslearn.propose") / f"prompts_{path.removeprefix(PACKAGED)}"))
        if not d.is_dir():
            raise UserError(f"--prompt-dir {path}: no such packaged prompt folder (the packaged ones: "
                            f"{', '.join(packaged_prompt_dirs()) or 'none'})")
    else:
        d = Path(path)
    if not d.is_dir():
        raise UserError(f"--prompt-dir {path}: not a folder")
    known = template_names()
    out: dict[str, str] = {}
    if (d / f"{API}.md").is_file():
        try:  # as a template: a regular file, and small
            out[API] = read_regular(d / f"{API}.md", MAX_TEMPLATE_BYTES, follow_links=True).decode("utf-8")
        except (OSError, ValueError) as e:
            raise UserError(f"--prompt-dir: cannot read {d / f'{API}.md'}: {getattr(e, 'strerror', None) or e}") from None
        if not out[API].strip():
            raise UserError(f"--prompt-dir: {d / f'{API}.md'} is empty")
    for f in sorted(d.glob("*.txt")):
        name = f.name[:-4]
        if name not in known:
            raise UserError(f"--prompt-dir: {f.name} overrides no template (the templates: {', '.join(known)})")
        try:  # a regular file (a FIFO's read never ends; /dev/zero's neither), and small
            text = read_regular(f, MAX_TEMPLATE_BYTES, follow_links=True).decode("utf-8").rstrip("\n")
        except (OSError, ValueError) as e:  # ValueError: UnicodeDecodeError, not a regular file, too large
            raise UserError(f"--prompt-dir: cannot read {f}: {getattr(e, 'strerror', None) or e}") from None
        if not text.strip():
            raise UserError(f"--prompt-dir: {f.name} is empty (remove it to keep the packaged template)")
        want, have = set(Template(packaged_template(name)).get_identifiers()), set(Template(text).get_identifiers())
        if not Template(text).is_valid():
            raise UserError(f"--prompt-dir: {f.name} has a '$' that is not a placeholder (write $$ for a dollar sign)")
        if want - have:
            raise UserError(f"--prompt-dir: {f.name} lacks the placeholder(s) "
                            f"{', '.join('$' + x for x in sorted(want - have))} of the template it overrides")
        if have - want:
            raise UserError(f"--prompt-dir: {f.name} has placeholder(s) {', '.join('$' + x for x in sorted(have - want))} "
                            f"that this template does not fill (it fills: {', '.join('$' + x for x in sorted(want)) or 'none'})")
        out[name] = text
    if not out:
        raise UserError(f"--prompt-dir {path}: no NAME.txt template (nor {API}.md) in it (the templates: "
                        f"{', '.join(known)})")
    return out


@contextmanager
def use_prompts(overrides: dict[str, str]) -> Iterator[None]:
    """The templates ``overrides`` replace, for the duration (one job of this process at a time)."""
    before = dict(_OVERRIDES)
    _OVERRIDES.clear()
    _OVERRIDES.update(overrides)
    try:
        yield
    finally:
        _OVERRIDES.clear()
        _OVERRIDES.update(before)


@dataclass(frozen=True)
class PromptContext:
    """What a revision prompt is made of: the task, the harness to revise, its feedback-split
    evaluation, earlier attempts, and the prompt's style and sampling of traces."""

    task: Any  # anything with a ``description``
    harness: Harness
    feedback: Evaluation | Any
    history: Sequence[Attempt] = ()
    style: Style = "canonical"
    n_traces: int = 4
    rng_seed: int = 0
    memory: Sequence[Any] = ()  # harness memory entries shown to the proposer (``memory.Entry``)


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


def _sections(ctx: PromptContext) -> tuple[str, dict[str, Any]]:
    """(template name, substitutions) shared by both prompt forms; seeded by ``ctx.rng_seed``.

    ``style="canonical"``: fixed section order, traces as labelled fields, aggregate as a sentence.
    ``style="varied"``: another section order (``prompts/propose_varied.txt``, plain form), and, chosen
    by ``rng_seed``, traces as JSON lines or fields and the aggregate as a table or a sentence."""
    if ctx.style not in ("canonical", "varied"):
        raise ValueError(f"unknown prompt style {ctx.style!r}")
    rng = random.Random(ctx.rng_seed)
    traces = sample_traces(ctx.feedback, ctx.n_traces, rng)
    if ctx.style == "canonical":
        trace_fmt, agg_fmt, name = "fields", "sentence", "propose"
    else:
        trace_fmt, agg_fmt, name = rng.choice(["fields", "json"]), rng.choice(["sentence", "table"]), "propose_varied"
    rendered = "\n\n".join(render_trace(i + 1, _trace_fields(p), trace_fmt) for i, p in enumerate(traces))
    return name, {
        "task": cap(ctx.task.description, 1500),
        "api": api_doc().strip(),
        "source": ctx.harness.source.rstrip("\n"),
        "n_problems": len(ctx.feedback.problems),
        "aggregate": render_aggregate(ctx.feedback, agg_fmt),
        "traces": rendered or "(no problems)",
        "history": render_history(ctx.history),
        "memory": render_memory(ctx.memory),
    }


def plain_prompt(ctx: PromptContext) -> str:
    """The plain-text revision prompt (for base models), up to the line where the completion starts:
    the plain formats add their ending (an open SEARCH marker, or a block opened on ``solve``)."""
    name, subs = _sections(ctx)
    return Template(template(name)).substitute(
        system=template("system"), format=template("format"), example=template("few_shot"),
        instruction=template("instruction"), **subs,
    ) + "\n"


def chat_prompt(ctx: PromptContext, answer_format: str, reply: str) -> Messages:
    """The chat revision prompt (for instruction-tuned models): a system and a user message whose
    format section is ``answer_format`` (the words of a chat format, ``formats.py``, that ask for the
    answer: whole edit blocks, the new ``solve``, or the complete file) and whose system message ends
    with ``reply`` (the same format's one line on what the reply is)."""
    _, subs = _sections(ctx)
    return [
        {"role": "system", "content": Template(template("chat_system")).substitute(reply=reply)},
        {"role": "user", "content": Template(template("chat_user")).substitute(format=answer_format, **subs)},
    ]
