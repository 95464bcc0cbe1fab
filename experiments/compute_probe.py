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

The whole-file form (``--format chat-file``: what GEPA's reflection asks for, and what a ``+mem`` run gets by
default) of the same prompt, for the peers benchmark's ``~file`` arm:

    .venv/bin/python experiments/compute_probe.py --file-form benchmarks/data/gcd_proposer_prompt.json \
        benchmarks/data/gcd_proposer_prompt_file.json
    .venv/bin/python experiments/proposer_samples.py --arm base --k 24 --seed 7 --max-tokens 512 --format chat-file \
        --prompt benchmarks/data/gcd_proposer_prompt_file.json --out file.json
    .venv/bin/python experiments/compute_probe.py orig.json compute.json file.json

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
    """What a sampled revision of the seed's ``solve()`` does with the solver (see the module docstring), by
    ``harnesslearn.taxonomy.solver_use`` on the revised harness the sample keeps (since session 43), or on the new
    ``solve`` of a chat-prefill sample (the session-42 files: the prompt opened it, the sample is its body)."""
    from harnesslearn.taxonomy import solver_use

    if not sample["valid"]:
        return "no_change" if sample.get("reason") == "no_change" else "invalid"
    return solver_use(sample.get("source")
                      or "def solve(model, question):\n" + sample["text"].split(">>>>>>> REPLACE")[0])


def table(files: list[Path]) -> str:
    lines = ["| prompt | format | arm | samples | " + " | ".join(KINDS) + " |",
             "|---|---|---|---|" + "---|" * len(KINDS)]
    for f in files:
        data = json.loads(f.read_text())
        for arm, a in data["arms"].items():
            n = Counter(kind(s) for s in a["samples"])
            lines.append(f"| {Path(data['prompt']).name} | {data.get('format', 'chat-prefill')} | {arm} |"
                         f" {len(a['samples'])} | " + " | ".join(str(n[k]) for k in KINDS) + " |")
    return "\n".join(lines)


def file_form(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """A chat-prefill revision prompt in the chat-file form, as ``formats.ChatFile`` renders the same context: the
    system message's last line says the reply is the whole file, the user message's format section (after
    "## How to write your revision") asks for it in words, and no assistant turn is started."""
    from harnesslearn.propose.prompt import template

    head = "## How to write your revision\n"
    user = next(m for m in messages if m["role"] == "user")["content"]
    if head not in user:
        raise SystemExit(f"not a revision prompt: its user message has no {head.strip()!r} section")
    blocks, file = template("chat_reply_blocks"), template("chat_reply_file")

    def convert(m: dict[str, str]) -> dict[str, str]:
        if m["role"] == "user":
            return {"role": "user", "content": user[:user.index(head) + len(head)] + template("chat_file")}
        if m["role"] == "system" and m["content"].endswith(blocks):
            return {**m, "content": m["content"][:-len(blocks)] + file}
        return m

    return [convert(m) for m in messages if m["role"] != "assistant"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="*", type=Path, help="proposer_samples.py --out files")
    p.add_argument("--file-form", nargs=2, type=Path, metavar=("PROMPT", "OUT"),
                   help="write PROMPT (a chat-prefill prompt) in the chat-file form to OUT, and stop")
    a = p.parse_args(argv)
    if a.file_form:
        src, out = a.file_form
        out.write_text(json.dumps(file_form(json.loads(src.read_text())), indent=1) + "\n")
        print(f"wrote {out}")
        return 0
    if not a.files:
        p.error("give proposer_samples.py --out files, or --file-form")
    print(table(a.files))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
