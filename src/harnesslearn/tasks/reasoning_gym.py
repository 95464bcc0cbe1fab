"""Reasoning Gym families as tasks: ``rg:FAMILY[?key=value...]``.

Problems come from the family's own generator (``reasoning_gym.create_dataset``), one item per
index, and are scored by the family's own ``score_answer``. Items are deterministic in
(family, config, seed, index). Reasoning Gym seeds each item with ``Random(seed + idx)``, so its
seed s+1 repeats seed s shifted by one item; our seed is therefore mapped to a generator seed by
a hash (``generator_seed``), which makes different seeds give unrelated problems. A few
families (``acre``) pre-generate a pool whose content depends on the dataset size, so the size
is fixed per family (``UNIVERSE_SIZE``) and is part of the identity of a problem.

Partial credit: the base ``score_answer`` gives len(gold)/len(answer) when the gold string
appears inside the answer ("60" scores 0.5 against gold "6"); many families override it with
their own rules. ``tasks/PARTIAL_CREDIT.md`` lists each family's source of partial credit.
``strict=True`` turns any score below 1.0 into 0.

Guards and their limits:
- Generation runs in this process with stdout discarded (some generators print progress dots).
  That swap of ``sys.stdout`` is process-wide, so do not generate from several threads at once
  while something else writes results to stdout.
- A scorer that raises scores 0 with ``details["scorer_error"] = 1``; it never crashes a run.
  A scorer that loops forever is not guarded against.
- The global ``random`` module is seeded per item (and restored after): list_functions uses it.
- Five families depend on Python's hash seed (``rg_pinned.HASH_SENSITIVE``); their items are made
  in a child process with ``PYTHONHASHSEED=0`` (about 2 s a batch of 64) so that they are the
  same in every process. codeio's generator executes sample programs that write files into the
  current directory (``rg_pinned.SCRATCH_FAMILIES``): its items are made in the same child, which
  runs in a private scratch directory.
- Slow items (over ``DISK_CACHE_MIN_S`` to generate, e.g. sokoban, knight_swap) and the items of
  hash-sensitive families are pickled under
  ``~/.cache/harnesslearn/rg/`` (or ``$HARNESSLEARN_CACHE_DIR``/rg, the folder the models and
  the response cache use; ``$HARNESSLEARN_CACHE`` only switches the response cache off). The cache is trusted: it is
  read with pickle, so do not point it at files from someone else.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import pickle
import time
import warnings
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError
from harnesslearn.fsutil import atomic_write_bytes
from harnesslearn.tasks.base import Problem, Score, SplitSizes, Task, split_of
from harnesslearn.tasks.rg_pinned import BATCH as PINNED_BATCH
from harnesslearn.tasks.rg_pinned import (
    HASH_SENSITIVE,
    SCRATCH_FAMILIES,
    generate_pinned,
    hash_seed_pinned,
    seeded_global_random,
)

DEFAULT_UNIVERSE_SIZE = 100_000
MAX_UNIVERSE_SIZE = 1_000_000  # ?size= above it: memory grows with the size (50,000,000 took over 1.5 GB)
# Families whose generator pre-computes (acre) or caps (word_ladder) the dataset size.
UNIVERSE_SIZE = {"acre": 1_000, "word_ladder": 20_000}
DISK_CACHE_MIN_S = 0.05
EXAMPLE_SEED = 987_654_321  # far from evaluation seeds; the example is taken from its feedback split
MAX_CONSECUTIVE_FAILURES = 20


def generator_seed(seed: int) -> int:
    """The Reasoning Gym seed for our ``seed``: 31 bits of a hash, so that the windows of item
    seeds (``gen_seed + idx``) of different seeds practically never overlap."""
    digest = hashlib.sha256(f"harnesslearn-rg:{seed}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def rg_families() -> list[str]:
    """Every registered Reasoning Gym family except ``composite`` (which needs a config)."""
    from reasoning_gym.factory import DATASETS

    return sorted(n for n in DATASETS if n != "composite")


def rg_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reasoning-gym")
    except PackageNotFoundError:  # pragma: no cover - it is a core dependency
        return "unknown"


def cache_root() -> Path:
    # not $HARNESSLEARN_CACHE: that one is the response cache's on/off switch ("0" made a ./0/rg folder)
    base = os.environ.get("HARNESSLEARN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "harnesslearn"
    )
    return Path(base) / "rg"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Discard stdout and warnings from generator and scorer code (see the module docstring)."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _did_you_mean(word: str, options: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, options, n=3, cutoff=0.6)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return msg[0] if msg and msg[0] else type(e).__name__


def config_keys(family: str) -> list[str]:
    """The generator's config fields a user may set (``seed`` is ours: use ``--seed``)."""
    from reasoning_gym.factory import DATASETS

    _, config_cls = DATASETS[family]
    return [f.name for f in fields(config_cls) if f.name != "seed"]


class RGTask(Task):
    """One Reasoning Gym family with a fixed generator config."""

    def __init__(
        self,
        family: str,
        config: dict[str, Any] | None = None,
        *,
        strict: bool = False,
        spec: str | None = None,
        split_sizes: SplitSizes | None = None,
    ) -> None:
        families = rg_families()
        if family not in families:
            raise UserError(f"unknown Reasoning Gym family {family!r}{_did_you_mean(family, families)}")
        self.family = self.name = family
        self.config = dict(config or {})
        self.strict = strict
        self.spec = spec or f"rg:{family}"
        if split_sizes is not None:
            self.split_sizes = split_sizes
        self._check_config_keys()
        size = self.config.pop("size", UNIVERSE_SIZE.get(family, DEFAULT_UNIVERSE_SIZE))
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise UserError(f"rg:{family}: size must be a positive integer, not {size!r}")
        if size > MAX_UNIVERSE_SIZE:
            raise UserError(f"rg:{family}: size must be at most {MAX_UNIVERSE_SIZE:,} (got {size:,})")
        self.universe_size = size
        self._datasets: dict[int, Any] = {}
        self._pinned_items: dict[tuple[int, int], tuple[str, Any]] = {}
        self._description: str | None = None
        self._dataset(0)  # builds and validates the config now, so a bad config fails at load time
        key = json.dumps(
            ["gen-seed-v1", family, self.config, self.universe_size, rg_version()], sort_keys=True, default=repr
        )
        self._cache_key = hashlib.sha256(key.encode()).hexdigest()[:16]

    def _check_config_keys(self) -> None:
        keys = config_keys(self.family)
        if "seed" in self.config:
            raise UserError(f"rg:{self.family}: 'seed' is not a config key here; pass the seed with --seed")
        for k in self.config:
            if k not in keys:
                hint = _did_you_mean(k, keys) or f"; valid keys: {', '.join(keys)}"
                raise UserError(f"rg:{self.family}: unknown config key {k!r}{hint}")

    def _dataset(self, seed: int) -> Any:
        ds = self._datasets.get(seed)
        if ds is None:
            import reasoning_gym

            try:
                with _quiet():
                    ds = reasoning_gym.create_dataset(
                        self.family, size=self.universe_size, seed=generator_seed(seed), **self.config
                    )
            except Exception as e:  # generator config validation: asserts, ValueError, TypeError ...
                raise UserError(f"rg:{self.family}: bad config {self.config}: {_one_line(e)}") from None
            self._datasets[seed] = ds
        return ds

    # ------------------------------------------------------------------ problems
    def _item_path(self, seed: int, idx: int) -> Path:
        return cache_root() / self.family / self._cache_key / f"s{seed}" / f"{idx}.pkl"

    def _generate(self, seed: int, idx: int) -> dict[str, Any]:
        path = self._item_path(seed, idx)
        if path.is_file():
            try:
                with open(path, "rb") as f:
                    entry = pickle.load(f)
                if isinstance(entry, dict):
                    return entry
            except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
                pass  # a broken cache file is regenerated below
        if (self.family in HASH_SENSITIVE and not hash_seed_pinned()) or self.family in SCRATCH_FAMILIES:
            entry = self._pinned(seed, idx)
            self._store(path, entry)
            return entry
        t0 = time.perf_counter()
        with _quiet(), seeded_global_random(generator_seed(seed), idx):
            entry = self._dataset(seed)[idx]
        if time.perf_counter() - t0 > DISK_CACHE_MIN_S:
            self._store(path, entry)
        return entry

    def _pinned(self, seed: int, idx: int) -> dict[str, Any]:
        """An item of a hash-sensitive family, made in a child with PYTHONHASHSEED=0 (see
        ``rg_pinned``); a batch of following indices is made at the same time and kept."""
        if (seed, idx) not in self._pinned_items:
            self._dataset(seed)  # validates the config here, with a one-line error
            indices = list(range(idx, min(idx + PINNED_BATCH, self.universe_size)))
            outcomes = generate_pinned(self.family, self.config, self.universe_size, generator_seed(seed), indices)
            self._pinned_items.update({(seed, i): o for i, o in zip(indices, outcomes, strict=True)})
        kind, value = self._pinned_items.pop((seed, idx))
        if kind == "index_error":
            raise IndexError(value)
        if kind == "error":
            raise RuntimeError(value)
        return dict(value)

    @staticmethod
    def _store(path: Path, entry: dict[str, Any]) -> None:
        """Best effort: an item that cannot be pickled or a read-only cache just is not cached."""
        try:
            atomic_write_bytes(path, pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL))
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            pass

    def problem(self, seed: int, idx: int) -> Problem:
        """The problem at ``idx`` for ``seed`` (its id is ``FAMILY/s{seed}/{idx}``)."""
        entry = self._generate(seed, idx)
        gold = entry.get("answer")
        return Problem(
            id=f"{self.family}/s{seed}/{idx}",
            question=str(entry["question"]),
            answer=gold if gold is None or isinstance(gold, str) else str(gold),
            metadata={"family": self.family, "seed": seed, "index": idx, "entry": entry},
        )

    def candidates(self, seed: int) -> Iterator[Problem]:
        """Problems in index order. An index whose generation fails is skipped (it fails the same
        way every time); ``MAX_CONSECUTIVE_FAILURES`` failures in a row raise ``UserError``."""
        failures = 0
        for idx in range(self.universe_size):
            try:
                p = self.problem(seed, idx)
            except IndexError:  # some generators run out of distinct items (word_ladder)
                return
            except Exception as e:  # a generator bug for this index; deterministic, so skip it
                failures += 1
                if failures >= MAX_CONSECUTIVE_FAILURES:
                    raise UserError(f"rg:{self.family}: the generator keeps failing: {_one_line(e)}") from None
                continue
            failures = 0
            yield p

    # ------------------------------------------------------------------ scoring
    def score(self, answer: str, problem: Problem) -> Score:
        """The family's own ``score_answer`` clamped to [0, 1] (NaN -> 0). ``details``: ``raw``
        (the clamped score before ``strict``), ``scorer_error`` (1 when the scorer raised)."""
        if not isinstance(answer, str):
            return Score(0.0, {"raw": 0.0})
        entry = problem.metadata["entry"]
        ds = self._dataset(int(problem.metadata.get("seed", 0)))
        try:
            with _quiet():
                raw = float(ds.score_answer(answer, entry))
        except Exception:  # the family's scorer choked on this answer: a wrong answer, not a crash
            return Score(0.0, {"raw": 0.0, "scorer_error": 1.0})
        raw = 0.0 if math.isnan(raw) else min(1.0, max(0.0, raw))
        value = (1.0 if raw == 1.0 else 0.0) if self.strict else raw
        return Score(value, {"raw": raw})

    # ------------------------------------------------------------------ description
    @property
    def description(self) -> str:
        """Family, category, the generator's docstring, and one example with its gold answer
        taken from the feedback split of a far-away seed (so it is never a score/test item)."""
        if self._description is None:
            ds = self._dataset(0)
            doc = (type(ds).__doc__ or "").strip().split("\n\n")[0]
            doc = " ".join(doc.split())
            text = f"Reasoning Gym family '{self.family}' (category: {ds.category})."
            if doc:
                text += f" {doc}"
            if self.strict:
                text += " Scoring is strict: only a fully correct answer scores 1."
            example = self._example()
            if example is not None:
                text += f"\n\nExample question:\n{example.question}\n\nExample answer: {example.answer}"
            self._description = text
        return self._description

    def _example(self) -> Problem | None:
        for i, p in enumerate(self.candidates(EXAMPLE_SEED)):
            if split_of(self.name, self.problem_key(p), self.split_sizes) == "feedback" and p.answer is not None:
                return p
            if i >= 50:
                break
        return None
