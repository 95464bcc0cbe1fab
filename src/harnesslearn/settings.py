"""The settings of one adaptation job: one typed object, built at the edge, passed down whole.

``AdaptSettings`` is built once by the CLI (``harnesslearn adapt``, ``demo``) or by a caller of
``harnesslearn.adapt.adapt``, validated on construction (a value out of range or not among the
choices is a one-line ``UserError`` naming the CLI option), stored with the run
(``to_json``), read back typed (``from_json``) and compared on ``--resume`` (``changes``).

Every field carries, in its metadata: the help text (the CLI shows it), the CLI option that sets
it, its bounds, and whether it affects results. Only fields that affect results are compared on
resume (``concurrency`` does not: it changes how fast, not what). Adding a setting is one field
here plus one CLI option; a field missing from an older run's record compares as its default, so
runs recorded before the field existed still resume.

Bounds exist so that a typo cannot turn into a run that spins for hours or an integer SQLite
cannot store: they are far above any sensible value, not recommendations.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from harnesslearn.errors import UserError
from harnesslearn.propose.formats import FormatChoice
from harnesslearn.sandbox.records import Budgets

Strategy = Literal["sequential", "independent", "compare"]
STRATEGIES: tuple[Strategy, ...] = ("sequential", "independent", "compare")

MAX_SEED = 2**31 - 1
MAX_PROBLEMS = 100_000  # problems of one split (or one `run`)
MAX_ROUNDS = 1_000
MAX_CANDIDATES = 1_000
MAX_CONCURRENCY = 1_024
MAX_TIMEOUT_S = 86_400.0  # one solve() call: a day
MAX_COMPLETION_TOKENS = 1_000_000
MAX_TEMPERATURE = 2.0

L = TypeVar("L", bound=str)


def choose(value: str, choices: tuple[L, ...], option: str) -> L:
    """``value`` as one of ``choices`` (typed as their Literal), or a UserError naming ``option``."""
    for c in choices:
        if value == c:
            return c
    raise UserError(f"{option} must be one of {', '.join(choices)} (got {value!r})")


def setting(default: Any, option: str | None, help: str, *, lo: float | None = None, hi: float | None = None,
            affects_results: bool = True) -> Any:
    """A settings field: its default, the CLI option that sets it (None: set in code or a config file),
    help text, bounds. The one field helper of every settings object (adaptation, training configs,
    the transfer experiment); ``check_settings`` validates any of them."""
    meta = {"option": option, "help": help, "lo": lo, "hi": hi, "affects_results": affects_results}
    if isinstance(default, list):
        items = list(default)
        return field(default_factory=lambda: list(items), metadata=meta)
    return field(default=default, metadata=meta)


def check_settings(obj: Any, label: str = "{}") -> None:
    """Choices (``Literal`` types) and bounds of every field of a settings dataclass; a bad value is a
    one-line UserError naming the field's option (or its name, formatted with ``label``)."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        if "help" in f.metadata:
            _check(f, getattr(obj, f.name), hints[f.name], label)


@dataclass(frozen=True)
class AdaptSettings:
    """How test-time adaptation runs (the task, the models and the seed harness are its inputs)."""

    strategy: Strategy = setting(
        "sequential", "--strategy",
        "sequential | independent (R*K proposals from the seed) | compare (both).")
    rounds: int = setting(3, "--rounds", "Rounds R.", lo=1, hi=MAX_ROUNDS)
    candidates: int = setting(4, "--candidates", "Candidates K per round.", lo=1, hi=MAX_CANDIDATES)
    seed: int = setting(0, "--seed", "Seed for problems and proposer sampling.", lo=0, hi=MAX_SEED)
    n_feedback: int = setting(8, "--n-feedback", "Feedback-split problems.", lo=1, hi=MAX_PROBLEMS)
    n_score: int = setting(16, "--n-score", "Score-split problems (selection).", lo=1, hi=MAX_PROBLEMS)
    n_test: int = setting(32, "--n-test", "Test-split problems (reported only).", lo=1, hi=MAX_PROBLEMS)
    budgets: Budgets = setting(
        Budgets(), "--timeout",
        "Per-problem limits of a harness run; --timeout sets timeout_s, the wall-clock seconds of one solve() call.")
    oracle: bool = setting(False, "--oracle", "Also report the oracle best-of-N by TEST split (an upper bound).")
    temperature: float = setting(0.8, "--proposer-temperature", "Proposer temperature.", lo=0.0, hi=MAX_TEMPERATURE)
    max_tokens: int = setting(1024, "--proposer-max-tokens", "Proposer completion length (tokens).", lo=1,
                              hi=MAX_COMPLETION_TOKENS)
    retry_no_change: int = setting(
        0, "--retry-no-change", "Proposals of a round that may be drawn again when one leaves the harness unchanged "
        "(no_change); each redraw is one more proposer call, counted and recorded. 0: a no-op is counted as one "
        "of the K candidates, not retried.", lo=0, hi=MAX_CANDIDATES)
    n_traces: int = setting(4, None, "Per-problem traces shown in a proposer prompt.", lo=0, hi=1_000)
    proposer_format: FormatChoice = setting(
        "auto", "--proposer-format",
        "How the proposer is asked for a revision and how its answer is read: auto (a chat proposer rewrites "
        "solve(), in an open assistant turn where the engine can continue one (chat-prefill) else asked in words "
        "(chat-function), or writes the whole file when shown harness memory (chat-file); a base model continues "
        "a plain prompt ending in an open SEARCH marker (plain-search)) | plain-search | plain-rewrite | "
        "chat-blocks | chat-prefill | chat-function | chat-file.")
    zoo_baselines: bool = setting(
        False, "--zoo-baselines", "Also evaluate every zoo harness that applies on the score split and the best "
        "of them (picked there) on the test split: baselines in the result and the report.", affects_results=False)
    concurrency: int | None = setting(None, "--concurrency", "Harness runs in flight at once (default: the "
                                      "executor's).", lo=1, hi=MAX_CONCURRENCY, affects_results=False)
    memory: bool = setting(
        True, "--memory/--no-memory", "Harness memory: show the proposer the harnesses that worked on the most "
        "similar other tasks (a chat proposer then writes whole files), and add this run's best harness when it "
        "beats its seed on the score split.")
    memory_k: int = setting(2, "--memory-k", "Memory entries shown to the proposer.", lo=0, hi=20)
    memory_path: str | None = setting(
        None, "--memory-path", "The memory file (default: $HARNESSLEARN_MEMORY, else memory.sqlite in the cache "
        "folder); another one on --resume is refused, like any setting that shapes the run.")

    def __post_init__(self) -> None:
        check_settings(self)
        t = self.budgets.timeout_s
        if not 0 < t <= MAX_TIMEOUT_S:
            raise UserError(f"--timeout must be in (0, {MAX_TIMEOUT_S:g}] seconds (got {t:g})")

    # ------------------------------------------------------------ help, JSON, comparison
    @classmethod
    def help(cls, name: str) -> str:
        """The help text of a field (for the CLI)."""
        return str(_fields()[name].metadata["help"])

    def to_json(self) -> dict[str, Any]:
        """The settings as a flat JSON object (``budgets`` as a nested object)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AdaptSettings:
        """Settings read back from ``to_json`` (other keys ignored; a missing key: its default)."""
        kw: dict[str, Any] = {k: v for k, v in _upgrade(data).items() if k in _fields()}
        if isinstance(kw.get("budgets"), Mapping):
            kw["budgets"] = Budgets(**kw["budgets"])
        elif "budgets" in kw:  # recorded as null by older runs: the defaults applied
            del kw["budgets"]
        return cls(**kw)

    def changes(self, recorded: Mapping[str, Any]) -> list[str]:
        """The result-affecting settings that differ from a recorded run's ``to_json`` object, as
        ``"--option (recorded X, now Y)"``. A key the record lacks counts as its default."""
        now, default = self.to_json(), AdaptSettings().to_json()
        recorded = _upgrade(recorded)
        out = []
        for name, f in _fields().items():
            if not f.metadata["affects_results"]:
                continue
            was = recorded.get(name, default[name])
            if name == "budgets":
                was = {**default[name], **(was or {})}
                for k in now[name]:
                    if was.get(k) != now[name][k]:
                        label = "--timeout" if k == "timeout_s" else f"budgets.{k}"
                        out.append(f"{label} (recorded {was.get(k)!r}, now {now[name][k]!r})")
            elif was != now[name]:
                out.append(f"{f.metadata['option'] or name} (recorded {was!r}, now {now[name]!r})")
        return out


# runs recorded before ``proposer_format`` kept two settings, ``form`` (auto/chat/plain) and ``prime``
# (auto/search/rewrite/file); the pairs that name one format without asking the backend
_LEGACY_FORMATS = {("plain", "search"): "plain-search", ("plain", "rewrite"): "plain-rewrite",
                   ("chat", "search"): "chat-blocks", ("chat", "file"): "chat-file", ("auto", "file"): "chat-file",
                   ("auto", "auto"): "auto"}


def _upgrade(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded settings object in today's fields: an older run's ``form``/``prime`` pair becomes its
    ``proposer_format`` (a pair whose format depended on the backend stays visibly different, so that
    ``--resume`` names it rather than guessing)."""
    out = dict(recorded)
    if "proposer_format" not in out and ("form" in out or "prime" in out):
        pair = (str(out.pop("form", "auto")), str(out.pop("prime", "auto")))
        out["proposer_format"] = _LEGACY_FORMATS.get(pair, f"form={pair[0]}, prime={pair[1]}")
    return out


def _fields() -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(AdaptSettings)}


def _check(f: dataclasses.Field[Any], value: Any, hint: Any, label: str = "{}") -> None:
    """Type, choices and bounds of one field's value (UserError naming its option)."""
    name = f.metadata.get("option") or label.format(f.name)
    if typing.get_origin(hint) is Literal:
        choose(value, typing.get_args(hint), name)
        return
    lo, hi = f.metadata.get("lo"), f.metadata.get("hi")
    if value is None or (lo is None and hi is None):
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{name} must be a number (got {value!r})")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bound = (f"between {lo:g} and {hi:g}" if lo is not None and hi is not None
                 else f">= {lo:g}" if lo is not None else f"<= {hi:g}")
        raise UserError(f"{name} must be {bound} (got {value:g})")

