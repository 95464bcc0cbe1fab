"""Generate items of hash-sensitive Reasoning Gym families in a child process with
``PYTHONHASHSEED=0``.

A few generators iterate over sets of strings, so their items depend on Python's per-process
hash seed: the same (family, seed, index) gives a different problem in another process. Found by
generating the first 8 items of every family under ``PYTHONHASHSEED=1`` and ``=2`` (see
tests/tasks/test_tasks_rg.py). For those families items are made in a child with the hash seed pinned,
a batch at a time, which makes them the same in every process on the same Python version
(not guaranteed across Python versions, whose set layout can change).

The same child makes the items of families whose generators execute sample programs in the process
that generates them (``SCRATCH_FAMILIES``: codeio, whose programs write files such as
``simulation_data.txt`` into the current directory). The child always runs in a private scratch
directory that is removed afterwards, so such writes never land in the user's folder. This is not a
sandbox: a program that writes to an absolute path still can.

Run as ``python -m harnesslearn.tasks.rg_pinned``: reads a pickled request on stdin, writes
pickled outcomes on stdout. Only this package's trusted parent process talks to it.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harnesslearn.errors import InfraError

HASH_SENSITIVE = frozenset(
    {
        "intermediate_integration",
        "isomorphic_strings",
        "polynomial_multiplication",
        "ransom_note",
        "word_ladder",
    }
)
# generators that execute sample programs while making an item (made in the child's scratch directory)
SCRATCH_FAMILIES = frozenset({"codeio"})
BATCH = 64

Outcome = tuple[str, Any]  # ("ok", entry) | ("index_error", message) | ("error", message)


@contextlib.contextmanager
def seeded_global_random(gen_seed: int, idx: int) -> Iterator[None]:
    """Seed the global ``random`` module for one item and restore its state afterwards:
    list_functions draws some numbers from the unseeded global generator."""
    state = random.getstate()
    random.seed(gen_seed + idx)
    try:
        yield
    finally:
        random.setstate(state)


def hash_seed_pinned() -> bool:
    """True when this process already runs with ``PYTHONHASHSEED=0``."""
    return os.environ.get("PYTHONHASHSEED") == "0" and not sys.flags.hash_randomization


def generate_pinned(family: str, config: dict[str, Any], size: int, gen_seed: int, indices: list[int]) -> list[Outcome]:
    """Outcomes for ``indices``, generated in a child with ``PYTHONHASHSEED=0``. Raises
    ``InfraError`` if the child itself fails (not for items that fail to generate)."""
    request = pickle.dumps((family, config, size, gen_seed, indices))
    here = str(Path(__file__).resolve().parents[2])  # the folder holding this package: importable from any cwd
    path = os.pathsep.join([here, *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])])
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": path}
    with tempfile.TemporaryDirectory(prefix="harnesslearn-rg-") as scratch:
        proc = subprocess.run(
            [sys.executable, "-m", "harnesslearn.tasks.rg_pinned"],
            input=request, capture_output=True, env=env, timeout=3600, check=False, cwd=scratch,
        )
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise InfraError(f"pinned-hash generator for {family} failed: {tail[0]}")
    outcomes: list[Outcome] = pickle.loads(proc.stdout)
    return outcomes


def _child() -> None:
    import contextlib
    import io
    import warnings

    import reasoning_gym

    family, config, size, gen_seed, indices = pickle.loads(sys.stdin.buffer.read())
    out: list[Outcome] = []
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = reasoning_gym.create_dataset(family, size=size, seed=gen_seed, **config)
        for idx in indices:
            try:
                with seeded_global_random(gen_seed, idx):
                    out.append(("ok", ds[idx]))
            except IndexError as e:
                out.append(("index_error", str(e)))
            except Exception as e:  # reported to the parent, which skips that index
                out.append(("error", f"{type(e).__name__}: {e}"))
    sys.stdout.buffer.write(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    _child()
