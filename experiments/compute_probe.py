"""What the proposer's gcd revisions do with the solver, for the prompt change that issue 35's peers run suggests.

GEPA beat us on gcd by writing a ``solve()`` that computes the answer in Python with no solver call. Our chat system
prompt (``propose/prompts/chat_system.txt``) suggests only that the solver write a program for ``model.python``;
the completion-style ``system.txt`` also says "compute the answer in Python when the task allows it". This sorts the
samples of ``proposer_samples.py`` (one ``--out`` JSON per prompt) by what the revised ``solve()`` does:

- ``no_change``: the edit gives the seed back (invalid);
- ``computes``: no solver call left (``model(``, ``model.generate``, ``model.python`` all gone): the answer is
  computed in Python;
- ``solver_program``: the solver writes a program that ``model.python`` runs;
- ``prompt_level``: the one solver call stays, its prompt or extraction changed;
- ``invalid``: any other invalid edit.

    .venv/bin/python experiments/proposer_samples.py --arm base --arm rl@80=rl --k 32 --seed 7 \\
        --prompt benchmarks/data/gcd_proposer_prompt.json --out orig.json
    .venv/bin/python experiments/proposer_samples.py --arm base --arm rl@80=rl --k 32 --seed 7 \\
        --prompt benchmarks/data/gcd_proposer_prompt_compute.json --out compute.json
    .venv/bin/python experiments/compute_probe.py orig.json compute.json

No candidate is scored: the rows say what the proposer writes, not how well it does.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

KINDS = ("computes", "solver_program", "prompt_level", "no_change", "invalid")


def kind(sample: dict[str, Any]) -> str:
    """What a sampled revision of the seed's ``solve()`` does with the solver (see the module docstring)."""
    if not sample["valid"]:
        return "no_change" if sample.get("reason") == "no_change" else "invalid"
    body = sample["text"].split(">>>>>>> REPLACE")[0]
    if "model.python" in body:
        return "solver_program"
    if "model(" in body or "model.generate" in body:
        return "prompt_level"
    return "computes"


def table(files: list[Path]) -> str:
    lines = ["| prompt | arm | samples | " + " | ".join(KINDS) + " |", "|---|---|---|" + "---|" * len(KINDS)]
    for f in files:
        data = json.loads(f.read_text())
        for arm, a in data["arms"].items():
            n = Counter(kind(s) for s in a["samples"])
            lines.append(f"| {Path(data['prompt']).name} | {arm} | {len(a['samples'])} | "
                         + " | ".join(str(n[k]) for k in KINDS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+", type=Path, help="proposer_samples.py --out files")
    a = p.parse_args(argv)
    print(table(a.files))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
