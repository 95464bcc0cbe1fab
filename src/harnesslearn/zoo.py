"""The harness zoo: human-designed harnesses, the baseline that harness learning argues against.

Each entry is a shipped harness file (``seeds/zoo/NAME.py``, standard library only, the same
runtime API as every harness). Reasoning tasks get the general entries; question-answering
tasks (those with the ``search`` tool) get the retrieval entries. ``few_shot`` is a template:
``build`` fills its ``EXAMPLES`` with questions and gold answers from the task's *feedback*
split (the split the proposer may see too), so a zoo harness never carries a score- or
test-split answer.

``harnesslearn zoo`` evaluates every entry that applies on the score and test splits
(:func:`evaluate_zoo`); ``adapt --harness zoo:NAME`` starts adaptation from one; and the zoo
is the teacher-free source of first-round revisions for SFT data (``training/sft_data.py``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from harnesslearn.errors import UserError
from harnesslearn.harness import Harness, check_source, load_harness, normalise
from harnesslearn.sandbox.protocol import HarnessExecutor
from harnesslearn.tasks.base import Task

PREFIX = "zoo:"
FEW_SHOT_EXAMPLES = 4
CAP_EXAMPLE = 1500  # characters of one few-shot question or answer


@dataclass(frozen=True)
class ZooEntry:
    name: str
    qa: bool  # needs the search tool (multi-hop QA)
    description: str


ENTRIES: dict[str, ZooEntry] = {
    e.name: e
    for e in (
        ZooEntry("interpreter_loop", False, "the solver writes a Python program, the harness runs it "
                                            "(model.python) and fixes it from its errors"),
        ZooEntry("reason_extract", False, "reason step by step, then extract the 'Answer:' line"),
        ZooEntry("self_consistency", False, "5 sampled reasoning paths, majority vote over the answers"),
        ZooEntry("verify_retry", False, "answer, let the solver check it, retry with the objection"),
        ZooEntry("few_shot", False, "worked examples from the feedback split as earlier chat turns"),
        ZooEntry("retrieve_read", True, "8 passages, answer with a short span, careful extraction"),
        ZooEntry("iterative_search", True, "multi-hop: search, read, ask a follow-up query, up to 3 hops"),
    )
}


def is_qa(task: Task) -> bool:
    return "search" in task.tools


def names(task: Task | None = None) -> list[str]:
    """The zoo entries that apply to ``task`` (all of them when ``task`` is None)."""
    if task is None:
        return list(ENTRIES)
    return [n for n, e in ENTRIES.items() if e.qa == is_qa(task)]


def source(name: str) -> str:
    if name not in ENTRIES:
        import difflib

        close = difflib.get_close_matches(name, list(ENTRIES), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UserError(f"unknown zoo harness {name!r}{hint} (zoo: {', '.join(ENTRIES)})")
    return (resources.files("harnesslearn") / "seeds" / "zoo" / f"{name}.py").read_text(encoding="utf-8")


NEAR_COPY = 0.8  # difflib ratio at or above which a harness counts as a near-copy of a zoo harness


FILLED_EXAMPLES = re.compile(r"^EXAMPLES = \[\n(?:    \(.*\),\n)*\]$", re.MULTILINE)


@functools.lru_cache(maxsize=8192)
def nearest(source_text: str) -> tuple[str, float]:
    """The zoo harness file most similar to ``source_text`` and the difflib ratio (0..1) of the two:
    how much of a revision is what the zoo (or a memory built from it) already showed. A few-shot list filled
    in for a task (``build``) is compared as the template's empty one, so ``few_shot`` built for any task is a
    copy of its file (ratio 1), as every other zoo harness is. Remembered per text (the zoo's files do not change
    while a process runs): a GRPO rollout log repeats a revision often (3,824 valid candidates, 1,408 distinct
    after stretch 9), and the ratios are most of the report's time. ``sources.nearest`` compares with every
    program a proposer is shown (the zoo, the runtime API's patterns, the prompts' example)."""
    return closest(source_text, ((name, source(name)) for name in ENTRIES))


def unfill(text: str) -> str:
    """``text`` with a filled few-shot ``EXAMPLES`` list put back to the zoo template's empty one (``build`` fills
    it per task): ``few_shot`` built for any task then compares as its file."""
    empty = re.search(r"^EXAMPLES = \[\].*$", source("few_shot"), re.MULTILINE)
    return FILLED_EXAMPLES.sub(lambda _: empty.group(0), text) if empty is not None else text


def closest(text: str, candidates: Iterable[tuple[str, str]]) -> tuple[str, float]:
    """The ``(name, source)`` of ``candidates`` most similar to ``text`` by difflib ratio (autojunk off), and
    that ratio: the first on ties, ``("", 0.0)`` when none shares a character. A filled few-shot ``EXAMPLES``
    list in ``text`` is compared as the zoo template's empty one (see :func:`nearest`)."""
    import difflib

    text = unfill(text)
    best = ("", 0.0)
    for name, src in candidates:
        sm = difflib.SequenceMatcher(None, text, src, autojunk=False)
        # the quick ratios bound ratio() from above: a source that cannot beat the best so far is skipped (exact)
        if best[0] and (sm.real_quick_ratio() <= best[1] or sm.quick_ratio() <= best[1]):
            continue
        ratio = sm.ratio()
        if ratio > best[1]:
            best = (name, ratio)
    return best


def near(source_text: str) -> dict[str, Any]:
    """``nearest`` as a record: ``{"name", "ratio"}`` (ratio to 3 places), as results files keep it."""
    name, ratio = nearest(source_text)
    return {"name": name, "ratio": round(ratio, 3)}


async def score_all(task: Task, seed: int, score_J: Callable[[Harness], Awaitable[float | None]]
                    ) -> tuple[dict[str, Harness], dict[str, float | None], str | None]:
    """Every zoo harness that applies to ``task`` (built with ``seed``), its score-split J by ``score_J`` (the
    caller's evaluation, so its counting and caching hold), and the name of the best (``rounds.best_of``: the
    first on ties; None when none was scored): the pick every comparison with the zoo makes."""
    from harnesslearn.propose.rounds import best_of

    hs = {name: build(name, task, seed) for name in names(task)}
    js = {name: await score_J(h) for name, h in hs.items()}
    top = best_of([(j, name) for name, j in js.items()])
    return hs, js, top[1] if top is not None else None


def _fill_examples(src: str, task: Task, seed: int) -> str:
    examples = [(p.question[:CAP_EXAMPLE], str(p.answer)[:CAP_EXAMPLE])
                for p in task.problems("feedback", FEW_SHOT_EXAMPLES, seed)]
    body = "".join(f"    ({q!r}, {a!r}),\n" for q, a in examples)
    filled, n = re.subn(r"^EXAMPLES = \[\].*$", lambda _: f"EXAMPLES = [\n{body}]", src, count=1, flags=re.MULTILINE)
    assert n == 1, "few_shot.py lost its EXAMPLES line"
    return filled


def build(name: str, task: Task, seed: int = 0) -> Harness:
    """Zoo harness ``name`` made for ``task`` (UserError for an unknown name or one that does not
    apply to the task)."""
    src = source(name)
    if name not in names(task):
        kind = "question-answering" if is_qa(task) else "reasoning"
        raise UserError(f"zoo harness {name!r} does not apply to {kind} task {task.spec} "
                        f"(applicable: {', '.join(names(task))})")
    if name == "few_shot":
        src = _fill_examples(src, task, seed)
    return Harness(src, name=f"{PREFIX}{name}")


def default_seed(task: Task) -> Harness:
    """The seed a task's adaptation starts from: the minimal retrieve-then-answer seed for question answering
    (tasks with the search tool), else the minimal one-call seed."""
    return load_harness("qa_minimal" if is_qa(task) else "minimal")


def resolve_harness(ref: str, task: Any = None, seed: int = 0, *, check: bool = True) -> Harness:
    """Every way to name a harness, in one place: ``zoo:NAME`` (a zoo harness built for ``task``),
    ``style:NAME`` (a training seed style), a shipped seed name, or a ``.py`` file (``harness.load_harness``;
    validated unless ``check=False``). UserError for anything that names no harness."""
    if ref.startswith(PREFIX):
        if task is None:
            raise UserError(f"{ref}: a zoo harness is built for a task; this command has none")
        return build(ref[len(PREFIX):], task, seed)
    if ref.startswith("style:"):
        from harnesslearn.seed_styles import style_source

        src = normalise(style_source(ref.split(":", 1)[1]))
        if check_source(src) is not None:  # a bug in seed_styles.py, not a user mistake
            raise ValueError(f"seed style {ref} is not a valid harness")
        return Harness(source=src, name=ref)
    return load_harness(ref, check=check)


@dataclass
class ZooRow:
    """One harness's J on the score and test splits, with 95 % bootstrap intervals over problems."""

    name: str
    harness_id: str
    score: dict[str, Any]  # {"J", "lo", "hi", "n", "completion_rate"}
    test: dict[str, Any]
    solver_calls: int
    wall_s: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "harness_id": self.harness_id, "score": self.score, "test": self.test,
                "solver_calls": self.solver_calls, "wall_s": round(self.wall_s, 2)}


def summarise(ev: Any) -> dict[str, Any]:
    """J, its bootstrap interval, n and completion rate of an Evaluation."""
    from harnesslearn.stats import bootstrap_ci

    scores = [p.score for p in ev.problems if p.score is not None]
    ci = bootstrap_ci(scores)
    return {"J": ev.J, "lo": ci["lo"], "hi": ci["hi"], "n": len(scores), "completion_rate": ev.completion_rate}


def best(rows: list[ZooRow]) -> ZooRow | None:
    """The row picked on the *score* split (``rounds.best_of``: highest J, the first on ties); never on test."""
    from harnesslearn.propose.rounds import best_of

    top = best_of([(r.score["J"], r) for r in rows])
    return top[1] if top is not None else None


async def evaluate_zoo(
    task: Task,
    executor: HarnessExecutor,
    *,
    n_score: int,
    n_test: int,
    seed: int = 0,
    budgets: Any = None,
    only: list[str] | None = None,
    test: str = "all",
    include_seed: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate the zoo entries for ``task`` (``only``: a subset) and the task's seed harness on
    the score split, and on the test split (``test="all"``) or only the one picked on the score
    split (``test="best"``, cheaper). The pick never looks at the test split."""
    from harnesslearn.evaluation import evaluate

    if test not in ("all", "best"):
        raise UserError(f"--test must be all or best, not {test!r}")
    chosen = only or names(task)
    harnesses = [(n, build(n, task, seed)) for n in chosen]
    if include_seed:
        seed_h = default_seed(task)
        harnesses.insert(0, (f"seed:{seed_h.name}", seed_h))
    rows: list[ZooRow] = []
    for name, h in harnesses:
        ev = await evaluate(h, task, "score", n_score, seed, executor, budgets=budgets, progress=progress)
        rows.append(ZooRow(name, h.id, summarise(ev), {}, ev.solver_calls, ev.wall_s))
    top = best([r for r in rows if not r.name.startswith("seed:")])
    for (name, h), row in zip(harnesses, rows, strict=True):
        if test == "all" or row is top or name.startswith("seed:"):
            ev = await evaluate(h, task, "test", n_test, seed, executor, budgets=budgets, progress=progress)
            row.test, row.solver_calls, row.wall_s = summarise(ev), row.solver_calls + ev.solver_calls, row.wall_s + ev.wall_s
    return {"task": task.spec, "n_score": n_score, "n_test": n_test, "seed": seed,
            "best": top.name if top else None, "best_test_J": top.test.get("J") if top else None,
            "rows": [r.to_json() for r in rows]}
