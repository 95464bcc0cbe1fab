"""Pure parts of the peer comparison (no model, no sandbox): accounting, the score-split best
tracker, what a peer may see of an evaluation, OpenEvolve's diff log, the table.

Imported by ``run.py`` (the driver) and by ``tests/test_peers_bench.py``. Standard library only.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from harnesslearn.evaluation import clip as _clip
from harnesslearn.evaluation import improves

# hl-STRATEGY[+mem][~FORM][@trained]: +mem shows the proposer the shipped harness memory (built from paper-train
# families only); @trained asks the trained proposer (--trained-proposer: its name on the server) instead. The
# proposer format is the default one (auto) unless ~FORM names another: ~file asks for the whole harness file (the
# chat-file format, which +mem gets by default, and what GEPA's reflection asks for) with no memory shown;
# ~prefill opens the assistant turn with the edit block and the model writes on from it (chat-prefill: the format
# the trained proposer was trained in; auto asks in words on a server, chat-function)
SYSTEMS = ("hl-sequential", "hl-independent", "gepa", "openevolve", "hl-sequential+mem", "hl-independent+mem",
           "hl-sequential@trained", "hl-independent@trained", "hl-sequential+mem@trained", "hl-sequential~file",
           "hl-independent~file", "hl-sequential~prefill", "hl-sequential~prefill@trained", "zoo")
FORMS = {"": "auto", "file": "chat-file", "prefill": "chat-prefill"}  # ~FORM -> ProposerSettings.format
DEFAULT_SYSTEMS = (*SYSTEMS[:4], "zoo")
LABELS = {
    "hl-sequential": "harnesslearn sequential",
    "hl-independent": "harnesslearn independent",
    "gepa": "GEPA 0.1.4",
    "openevolve": "OpenEvolve 0.4.0",
    "hl-sequential+mem": "harnesslearn sequential + memory",
    "hl-independent+mem": "harnesslearn independent + memory",
    "hl-sequential@trained": "harnesslearn sequential, trained proposer",
    "hl-independent@trained": "harnesslearn independent, trained proposer",
    "hl-sequential+mem@trained": "harnesslearn sequential + memory, trained proposer",
    "hl-sequential~file": "harnesslearn sequential, whole-file revisions",
    "hl-independent~file": "harnesslearn independent, whole-file revisions",
    "hl-sequential~prefill": "harnesslearn sequential, prefilled rewrites",
    "hl-sequential~prefill@trained": "harnesslearn sequential, trained proposer, prefilled rewrites (its training format)",
    "zoo": "best zoo harness (score split; no proposer)",
}


def style(system: str) -> tuple[Any, str]:
    """A system's colour and marker in every plot of the peers (run.py's curves, summary.py's budgets): one of
    matplotlib's 20 ``tab20`` colours, the dark shades first (the default cycle of 10 repeats itself within
    ``SYSTEMS``), black for the zoo; circles for ours, squares for the peers, a star for the zoo."""
    from matplotlib import colormaps

    if system == "zoo":
        return "black", "*"
    tab20 = colormaps["tab20"].colors
    order = (*range(0, 20, 2), *range(1, 20, 2))
    return tab20[order[SYSTEMS.index(system) % 20]], "o" if system.startswith("hl-") else "s"


def slug(spec: str) -> str:
    """A task spec or system name as a file and URL part."""
    return "".join(ch if ch.isalnum() else "_" for ch in spec)[:60]


class HlSystem(NamedTuple):
    strategy: str  # sequential | independent
    memory: bool  # shown the shipped harness memory
    trained: bool  # the trained proposer
    format: str  # the proposer format (ProposerSettings.format): auto, or the one ~FORM names (FORMS)


def hl_system(system: str) -> HlSystem:
    """``hl-sequential+mem@trained`` -> (strategy, with memory, trained proposer, proposer format)."""
    name, _, who = system.removeprefix("hl-").partition("@")
    name, _, form = name.partition("~")
    strategy, _, mem = name.partition("+")
    if form not in FORMS:
        raise ValueError(f"{system}: unknown form ~{form} (known: {', '.join('~' + f for f in FORMS if f)})")
    return HlSystem(strategy, mem == "mem", who == "trained", FORMS[form])
PEER_SPLITS = ("feedback", "score")  # the only splits a system may have evaluated; test is ours alone
MAX_TRACE_CHARS = 400


@dataclass
class Ledger:
    """What one system spent on one (task, seed): every proposer call goes through the driver's
    proxy and every harness evaluation through the driver's evaluation, so both are counted
    the same way for every system."""

    system: str
    proposer_calls: int = 0
    proposer_refused: int = 0  # calls over the budget, refused by the proxy (never reached the model)
    proposer_prompt_tokens: int = 0
    proposer_completion_tokens: int = 0
    proposer_s: float = 0.0
    solver_calls: int = 0  # adaptation's own evaluations (feedback and score splits)
    solver_tokens: int = 0
    evaluations: int = 0
    problems_run: int = 0
    eval_s: float = 0.0

    def add_proposer(self, prompt_tokens: int, completion_tokens: int, seconds: float) -> None:
        self.proposer_calls += 1
        self.proposer_prompt_tokens += prompt_tokens
        self.proposer_completion_tokens += completion_tokens
        self.proposer_s += seconds

    def add_evaluation(self, solver_calls: int, tokens: int, problems: int, seconds: float) -> None:
        self.evaluations += 1
        self.solver_calls += solver_calls
        self.solver_tokens += tokens
        self.problems_run += problems
        self.eval_s += seconds

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["proposer_s"] = round(self.proposer_s, 2)
        d["eval_s"] = round(self.eval_s, 2)
        return d


@dataclass
class BestTracker:
    """The best harness by score-split J as the proposer budget is spent: one point each time a
    harness evaluated on the WHOLE score split beats the best so far (strictly; ties keep the
    earlier one, as every system here selects). ``points``: (proposer calls so far, J, harness id)."""

    n_score: int
    best_id: str | None = None
    best_J: float | None = None
    points: list[tuple[int, float, str]] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)

    def record(self, proposer_calls: int, J: float | None, harness_id: str, source: str, n: int) -> bool:
        if n != self.n_score or J is None:
            return False  # a minibatch, not a score-split J
        if not improves(J, self.best_J):  # the one rule: strictly better, ties keep the earlier
            return False
        self.best_id, self.best_J = harness_id, J
        self.points.append((proposer_calls, J, harness_id))
        self.sources[harness_id] = source
        return True


def clip(x: Any, n: int = MAX_TRACE_CHARS) -> Any:
    return _clip(x, n)


def peer_view(split: str, problems: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What a peer gets back from evaluating a harness on ``split``: on the feedback split the
    question, the harness's answer, the gold answer, status, error and call excerpts (what our
    proposer sees); on the score split only the id, score and status (selection needs no more).
    ``problems`` are ``ProblemResult.to_json()``-shaped dicts plus ``question`` and ``gold``.
    The test split is refused before this is reached."""
    if split not in PEER_SPLITS:
        raise ValueError(f"split {split!r} is not for peers")
    out = []
    for p in problems:
        row: dict[str, Any] = {"id": p["id"], "score": p["score"], "status": p["status"]}
        if split == "feedback":
            row.update({
                "question": clip(p.get("question")), "answer": clip(p.get("answer")),
                "gold": clip(p.get("gold")), "error": clip(p.get("error")),
                "calls": [{"prompt": clip(c.get("prompt"), 300), "completion": clip(c.get("completion"), 300)}
                          for c in (p.get("model_calls") or [])[:2]],
            })
        out.append(row)
    return out


# ---------------------------------------------------------------------- GEPA's proposals
def norm_source(source: str) -> str:
    """A program's text up to white space at line ends and blank lines (GEPA strips the text it
    extracts, so a seed returned as it was differs from it only there)."""
    return "\n".join(x.rstrip() for x in source.replace("\r\n", "\n").split("\n") if x.strip())


def gepa_validity(proposals: Sequence[Mapping[str, Any]], evaluated: Sequence[Mapping[str, Any]],
                  failed_calls: int = 0) -> dict[str, Any]:
    """GEPA's proposals in our terms. ``proposals``: one per reflection call, with the id of the
    harness GEPA evaluated right after it (``evaluated: False`` when it evaluated none);
    ``evaluated``: every harness the system had evaluated, in first-evaluation order (``id``,
    ``source``, ``invalid_reason``). A proposal is valid when its program is a harness and
    differs (beyond white space) from every program evaluated before it."""
    order = {h["id"]: i for i, h in enumerate(evaluated)}
    valid = unchanged = broken = none = 0
    for p in proposals:
        hid = p.get("harness_id")
        if not p.get("evaluated", True) or hid not in order:
            none += 1
            continue
        h = evaluated[order[hid]]
        earlier = {norm_source(e["source"]) for e in evaluated[: order[hid]]}
        if norm_source(h["source"]) in earlier:
            unchanged += 1
        elif h.get("invalid_reason"):
            broken += 1
        else:
            valid += 1
    note = f"{broken} not a harness, {unchanged} unchanged, {none} not evaluated"
    if failed_calls:
        note += f", {failed_calls} failed calls"
    return {"proposals": len(proposals), "valid": valid, "note": note}


# ---------------------------------------------------------------------- OpenEvolve's diffs
def summarise_oe_diff_log(lines: Iterable[str]) -> dict[str, int]:
    """Counts from the JSON lines our hook in OpenEvolve's worker writes (``oe_hook``): one
    ``extract`` event per model response in diff mode (``blocks``: SEARCH/REPLACE blocks found,
    ``error`` when OpenEvolve rejected the markers), one ``apply`` event per applied response
    (``blocks``, ``applied``: how many SEARCH texts matched; the rest were skipped,
    ``changed``: whether the program changed)."""
    c = {"responses": 0, "malformed": 0, "no_blocks": 0, "blocks": 0, "blocks_skipped": 0,
         "children_dropped_no_match": 0, "children_with_skipped_blocks": 0, "children_unchanged": 0,
         "children_all_blocks_matched": 0}
    for line in lines:
        line = line.strip()
        if not line:
            continue
        ev = json.loads(line)
        if ev.get("event") == "extract":
            c["responses"] += 1
            if ev.get("error"):
                c["malformed"] += 1
            elif not ev.get("blocks"):
                c["no_blocks"] += 1
        elif ev.get("event") == "apply":
            n, k = int(ev["blocks"]), int(ev["applied"])
            c["blocks"] += n
            c["blocks_skipped"] += n - k
            if k == 0:
                c["children_dropped_no_match"] += 1
            elif k < n:
                c["children_with_skipped_blocks"] += 1
            elif ev.get("changed"):
                c["children_all_blocks_matched"] += 1
            if k > 0 and not ev.get("changed"):
                c["children_unchanged"] += 1
    return c


# ---------------------------------------------------------------------- the table
def fmt_ci(ci: Mapping[str, float] | None) -> str:
    if not ci or ci.get("mean") is None or math.isnan(ci["mean"]):
        return "n/a"
    return f"{ci['mean']:.3f} [{ci['lo']:.2f}, {ci['hi']:.2f}]"


def table_row(r: Mapping[str, Any]) -> str:
    """One markdown row for one (task, seed, system) result; ``r["error"]`` replaces the numbers
    with the reason a system could not be run as intended."""
    head = f"| {r['task']} | {r['seed']} | {LABELS.get(r['system'], r['system'])}{' (carried)' if r.get('carried_from') else ''} |"
    if r.get("error"):
        why = r["error"] if str(r["error"]).startswith("not run") else f"not run as intended: {r['error']}"
        return head + f" {why} |" + " |" * 8
    led = r["ledger"]
    valid = r.get("validity", {})
    vtxt = f"{valid.get('valid', 0)}/{valid.get('proposals', 0)}"
    if valid.get("note"):
        vtxt += f" ({valid['note']})"
    return (
        head + f" {fmt_ci(r.get('test_ci'))} | {fmt_ci(r.get('seed_test_ci'))} | {_f(r.get('score_J'))} | {vtxt} |"
        f" {led['proposer_calls']} | {led['solver_calls']} |"
        f" {led['proposer_prompt_tokens'] + led['proposer_completion_tokens']} / {led['solver_tokens']} |"
        f" {r.get('wall_s', 0):.0f} | {near_cell(r.get('returned_nearest_zoo'))} |"
    )


def near_cell(near: Mapping[str, Any] | None) -> str:
    return "n/a" if not near else f"{near['name']} ({near['ratio']:.2f})"


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


TABLE_HEAD = (
    "| task | seed | system | test J of returned harness [95% CI] | seed harness test J | score J (selection) |"
    " valid proposals | proposer calls | solver calls | tokens proposer / solver | wall s |"
    " returned: nearest zoo harness (difflib ratio) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def render_table(rows: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join([TABLE_HEAD, *(table_row(r) for r in rows)])


def mean_by_system(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float | int]]:
    """Mean test J (and its gain over the seed) per system over the (task, seed) runs that ran, and against the
    best zoo harness where the zoo system ran on the same (task, seed): the mean difference and the runs above it."""
    out: dict[str, dict[str, float | int]] = {}
    zoo = {(r["task"], r["seed"]): float(r["test_J"]) for r in rows
           if r["system"] == "zoo" and not r.get("error") and r.get("test_J") is not None}
    for s in SYSTEMS:
        ok = [r for r in rows if r["system"] == s and not r.get("error") and r.get("test_J") is not None]
        if not ok:
            continue
        tj = [float(r["test_J"]) for r in ok]
        gain = [float(r["test_J"]) - float(r["seed_test_J"]) for r in ok if r.get("seed_test_J") is not None]
        vs = [float(r["test_J"]) - zoo[(r["task"], r["seed"])] for r in ok if (r["task"], r["seed"]) in zoo]
        out[s] = {"runs": len(ok), "mean_test_J": sum(tj) / len(tj),
                  "mean_gain": sum(gain) / len(gain) if gain else math.nan,
                  "improved": sum(1 for g in gain if g > 1e-9), "worse": sum(1 for g in gain if g < -1e-9),
                  "zoo_runs": len(vs), "minus_zoo": sum(vs) / len(vs) if vs else math.nan,
                  "above_zoo": sum(1 for v in vs if v > 1e-9)}
    return out


class Coalesced:
    """Calls ``write(snapshot())`` in a worker thread whenever ``mark()`` was called since the last call, one call at
    a time: marks that come during a write are served by one more write, not one each. ``snapshot`` runs on the
    event loop (so it sees a consistent state), the write off it: the loop goes on serving the runs in flight.
    Stretch 13's driver wrote its partial outputs synchronously after every finished cell, ~1 s each on the loop
    that also dispatches every system's evaluations. ``close()`` waits for the last write (and raises its error)."""

    def __init__(self, snapshot: Callable[[], Any], write: Callable[[Any], None]) -> None:
        self.snapshot, self.write = snapshot, write
        self.dirty = False
        self.task: asyncio.Future[None] | None = None

    def mark(self) -> None:
        self.dirty = True
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        while self.dirty:
            self.dirty = False
            await asyncio.to_thread(self.write, self.snapshot())

    async def close(self) -> None:
        if self.task is not None:
            await self.task
