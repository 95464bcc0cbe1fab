"""The settings of one adaptation job: one composed tree, built at the edge, passed down whole.

``AdaptSettings`` is built by the CLI (``harnesslearn adapt``, ``demo``; options generated from the tree,
plus ``--config FILE`` and ``--set KEY=VALUE``) or by a caller of ``harnesslearn.adapt.adapt``; it is
validated on construction (a value out of range or not among the choices is a one-line ``UserError``
naming the CLI option), stored with the run (``record``: flat dotted keys), read back (``from_record``:
records written before the tree, with flat names, are read too) and compared on ``--resume``
(``changes``; only fields that affect results: ``runtime`` changes how fast, not what).

Bounds exist so that a typo cannot turn into a run that spins for hours or an integer SQLite cannot
store: they are far above any sensible value, not recommendations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from harnesslearn.sandbox.records import Budgets
from harnesslearn.settings.base import Settings, setting
from harnesslearn.settings.groups import (
    MAX_SEED,
    MemorySettings,
    ProposerSettings,
    RunLimits,
    RuntimeSettings,
    Splits,
    Strategy,
    TrackingSettings,
)

STRATEGIES: tuple[Strategy, ...] = ("sequential", "independent", "compare")
MAX_ROUNDS = 1_000
MAX_CANDIDATES = 1_000


class AdaptSettings(Settings):
    """How test-time adaptation runs (the task, the models and the seed harness are its inputs)."""

    strategy: Strategy = setting(
        "sequential", "--strategy",
        "sequential | independent (R*K proposals from the seed) | compare (both).")
    rounds: int = setting(3, "--rounds", "Rounds R.", lo=1, hi=MAX_ROUNDS)
    candidates: int = setting(4, "--candidates", "Candidates K per round.", lo=1, hi=MAX_CANDIDATES)
    seed: int = setting(0, "--seed", "Seed for problems and proposer sampling.", lo=0, hi=MAX_SEED)
    splits: Splits = setting(Splits(), None, "Split sizes.")
    budgets: Budgets = setting(Budgets(), None, "Per-problem limits of a harness run.")
    proposer: ProposerSettings = setting(ProposerSettings(), None, "The proposer's format, prompt and sampling.")
    retry_no_change: int = setting(
        0, "--retry-no-change", "Proposals of a round that may be drawn again when one leaves the harness unchanged "
        "(no_change); each redraw is one more proposer call, counted and recorded. 0: a no-op is counted as one "
        "of the K candidates, not retried.", lo=0, hi=MAX_CANDIDATES)
    memory: MemorySettings = setting(MemorySettings(), None, "The harness memory.")
    oracle: bool = setting(False, "--oracle", "Also report the oracle best-of-N by TEST split (an upper bound).")
    zoo_baselines: bool = setting(
        False, "--zoo-baselines", "Also evaluate every zoo harness that applies on the score split and the best "
        "of them (picked there) on the test split: baselines in the result and the report.", affects_results=False)
    runtime: RuntimeSettings = setting(RuntimeSettings(), None, "Where harness runs execute.")
    limits: RunLimits = setting(RunLimits(), None, "Caps on the run's spend.")
    tracking: TrackingSettings = setting(TrackingSettings(), None, "Experiment tracking.")

    cli_options: ClassVar[bool] = True  # --rounds, --n-score, ... (harnesslearn adapt)
    # the flat keys of records written before the settings tree
    legacy: ClassVar[dict[str, str]] = {
        "n_feedback": "splits.n_feedback", "n_score": "splits.n_score", "n_test": "splits.n_test",
        "temperature": "proposer.sampling.temperature", "max_tokens": "proposer.sampling.max_tokens",
        "n_traces": "proposer.n_traces", "proposer_format": "proposer.format", "memory_k": "memory.k",
        "memory_path": "memory.path", "concurrency": "runtime.concurrency"}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> AdaptSettings:
        return super().from_record(_upgrade(data))

    def changes(self, recorded: Mapping[str, Any]) -> list[str]:
        return super().changes(_upgrade(recorded))


# runs recorded before ``proposer_format`` kept two settings, ``form`` (auto/chat/plain) and ``prime``
# (auto/search/rewrite/file); the pairs that name one format without asking the backend
_LEGACY_FORMATS = {("plain", "search"): "plain-search", ("plain", "rewrite"): "plain-rewrite",
                   ("chat", "search"): "chat-blocks", ("chat", "file"): "chat-file", ("auto", "file"): "chat-file",
                   ("auto", "auto"): "auto"}


def _upgrade(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded settings object in today's keys: flat names of the first records (``memory`` was a bool,
    ``budgets`` one object); an older run's ``form``/``prime`` pair becomes its ``proposer.format`` (a pair
    whose format depended on the backend stays visibly different, so that ``--resume`` names it rather
    than guessing)."""
    out = dict(recorded)
    if isinstance(out.get("memory"), bool):
        out["memory.enabled"] = out.pop("memory")
    if "budgets" in out and not isinstance(out["budgets"], Mapping):  # null in the first records: defaults
        del out["budgets"]
    if "proposer_format" not in out and "proposer.format" not in out and ("form" in out or "prime" in out):
        pair = (str(out.pop("form", "auto")), str(out.pop("prime", "auto")))
        out["proposer.format"] = _LEGACY_FORMATS.get(pair, f"form={pair[0]}, prime={pair[1]}")
    return out
