"""The transfer experiment (issues 12 and 20) on one H200, as a recipe over ``harnesslearn.transfer``:
Qwen2.5-Coder-1.5B-Instruct as the frozen solver AND as the proposer that is trained (teacher-free SFT
data from the zoo, LoRA SFT, GRPO with the exact reward) and evaluated on the 21 unseen families.

    python3 experiments/qwen12.py run --model DIR [--engine vllm] [--stages sftdata,sft,grpo,eval] [--minutes-eval 6]
    python3 experiments/qwen12.py smoke [--work DIR]          # all four stages on the CPU, in about a minute
    python3 experiments/qwen12.py collect --work DIR --out $OUT   # what comes back from the device
    python3 experiments/qwen12.py restore --work DIR --from RETURNED_OUT

Every field of ``TransferSettings`` is an option (``--minutes-sftdata 3``, ``--families-eval gcd,maze``).
Each stage stops at its deadline with what finished, marked ``partial`` in ``WORK/ret/status.json``;
a later ``run`` skips stages that are ``done``. experiments/results/qwen/COMMANDS.md has the chain of
device calls.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from typing import Any

from harnesslearn.transfer import TransferSettings, collect, restore, run
from harnesslearn.transfer import smoke as smoke_mod


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def settings_parser(p: argparse.ArgumentParser) -> None:
    """One option per ``TransferSettings`` field, typed from its default."""
    for f in dataclasses.fields(TransferSettings):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        text = f.metadata.get("help", "")
        if f.name == "model":
            p.add_argument("--model", required=True, help=text)
        elif isinstance(default, bool):
            p.add_argument(_flag(f.name), action=argparse.BooleanOptionalAction, default=default, help=text)
        elif isinstance(default, tuple):
            p.add_argument(_flag(f.name), type=lambda s: tuple(x for x in s.split(",") if x), default=default,
                           help=f"{text}; comma-separated (default {','.join(map(str, default)) or 'none'})")
        else:
            p.add_argument(_flag(f.name), type=type(default), default=default, help=f"{text} (default {default})")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    settings_parser(sub.add_parser("run", help="run the stages"))
    sm = sub.add_parser("smoke", help="all four stages on the CPU with a tiny model and a rule-based solver")
    sm.add_argument("--work", default="/tmp/q12smoke")
    c = sub.add_parser("collect", help="WORK/ret -> a folder the device tool brings back")
    c.add_argument("--work", default="/tmp/q12w")
    c.add_argument("--out", required=True)
    c.add_argument("--skip-adapters", action="store_true")
    r = sub.add_parser("restore", help="a returned folder -> WORK/ret")
    r.add_argument("--work", default="/tmp/q12w")
    r.add_argument("--from", dest="src", required=True)
    a = p.parse_args(argv)
    out: Any
    with contextlib.redirect_stdout(sys.stderr):  # trainers print their logs: stdout holds the JSON alone
        if a.cmd == "run":
            out = run(TransferSettings(**{k: v for k, v in vars(a).items() if k != "cmd"}))
        elif a.cmd == "smoke":
            out = run(smoke_mod.settings(a.work))
        elif a.cmd == "collect":
            out = collect(a.work, a.out, adapters=not a.skip_adapters)
        else:
            out = restore(a.work, a.src)
    json.dump(out, sys.stdout, indent=1, default=str)
    print()


if __name__ == "__main__":
    main()
