"""The transfer experiment (issues 12 and 20) on one H200, as a recipe over ``harnesslearn.transfer``:
Qwen2.5-Coder-1.5B-Instruct as the frozen solver AND as the proposer that is trained (teacher-free SFT
data from the zoo, LoRA SFT, GRPO with the exact reward) and evaluated on the 21 unseen families.

    python3 experiments/qwen12.py run --model DIR [--engine vllm] [--stages sftdata,sft,grpo,eval] [--eval.minutes 6]
    python3 experiments/qwen12.py smoke [--work DIR]          # every stage on the CPU, in about a minute
    python3 experiments/qwen12.py collect --work DIR --out $OUT   # what comes back from the device
    python3 experiments/qwen12.py restore --work DIR --from RETURNED_OUT [--new-chain]
    python3 experiments/qwen12.py land --from FILES_AT --logs experiments/results/qwen/stretchN   # here, after a stretch

Every leaf of the ``TransferSettings`` tree is an option named by its dotted key (``--sftdata.minutes 3``,
``--grpo.trainer.learning-rate 1e-5``, ``--eval.families gcd,maze``), generated from the tree by the
library's loader, which also takes ``--config FILE`` (YAML) and ``--set KEY=VALUE``. Each stage stops at
its deadline with what finished, marked ``partial`` in ``WORK/ret/status.json``; a later ``run`` skips
stages that are ``done``. experiments/results/qwen/COMMANDS.md has the chain of device calls.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from harnesslearn.errors import UserError
from harnesslearn.settings.base import leaves
from harnesslearn.settings.load import load, parse_value
from harnesslearn.transfer import TransferSettings, collect, land, restore, run
from harnesslearn.transfer import smoke as smoke_mod


def settings_parser(p: argparse.ArgumentParser) -> None:
    """One option per leaf of ``TransferSettings`` (its dotted key), typed by the loader; --config, --set."""
    for path, leaf in leaves(TransferSettings):
        flag = "--" + path.replace("_", "-")
        shown = ",".join(map(str, leaf.default)) if isinstance(leaf.default, tuple) else leaf.default
        flag_only = {"nargs": "?", "const": True} if leaf.annotation is bool else {}  # --force = --force true
        p.add_argument(flag, dest=path, default=None, metavar="V", **flag_only,
                       type=lambda text, ann=leaf.annotation: parse_value(text, ann),
                       help=f"{leaf.help} (default {shown})".replace("%", "%%"))
    p.add_argument("--config", default=None, help="a YAML file of settings (the tree's shape)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="any setting by its dotted key (repeatable)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    settings_parser(sub.add_parser("run", help="run the stages"))
    sm = sub.add_parser("smoke", help="every stage on the CPU with a tiny model and a rule-based solver")
    sm.add_argument("--work", default="/tmp/q12smoke")
    c = sub.add_parser("collect", help="WORK/ret -> a folder the device tool brings back")
    c.add_argument("--work", default="/tmp/q12w")
    c.add_argument("--out", required=True)
    c.add_argument("--skip-adapters", action="store_true")
    r = sub.add_parser("restore", help="a returned folder -> WORK/ret")
    r.add_argument("--work", default="/tmp/q12w")
    r.add_argument("--from", dest="src", required=True)
    r.add_argument("--new-chain", action="store_true",
                   help="keep only the SFT data, for a second chain (--stages sft,grpo) in a fresh --work")
    la = sub.add_parser("land", help="what a stretch brought back (the device tool's files_at) -> the committed state")
    la.add_argument("--from", dest="src", required=True, action="append",
                    help="the folder of returned files (WORKNAME.FILE); repeated where several calls brought back "
                    "parts (a later folder's file replaces an earlier one's)")
    la.add_argument("--state", default="experiments/results/qwen/state", help="the committed ret folder, replaced")
    la.add_argument("--prefix", default="q12w.", help="the work folder's name as watch.sh prefixed the files")
    la.add_argument("--logs", default=None, help="where the raw logs go (the stretch's notes folder)")
    la.add_argument("--keep", default=".keep", help="outside git: jitcache.tar and the SFT adapter")
    la.add_argument("--bench", default="benchmarks/results/gpu_eval.json",
                    help="the committed benchmark file a returned gpu_eval.json's rows go into ('' for none)")
    la.add_argument("--force", action="store_true", help="land a return that is behind the committed state")
    a = p.parse_args(argv)
    out: Any
    with contextlib.redirect_stdout(sys.stderr):  # trainers print their logs: stdout holds the JSON alone
        if a.cmd == "run":
            given = {k: v for k, v in vars(a).items() if k not in ("cmd", "config", "overrides") and v is not None}
            settings = load(TransferSettings, a.config, a.overrides, options=given, label="--{}")
            if not settings.model:
                p.error("run: --model is required (or a --config that names it)")
            out = run(settings)
        elif a.cmd == "smoke":
            out = run(smoke_mod.settings(a.work))
        elif a.cmd == "collect":
            out = collect(a.work, a.out, adapters=not a.skip_adapters)
        elif a.cmd == "land":
            try:
                out = land(a.src, a.state, prefix=a.prefix, logs=a.logs, keep=a.keep, bench=a.bench or None,
                           force=a.force)
            except UserError as e:  # a user's mistake: one line, exit 2 (as the CLI does)
                print(f"qwen12 land: {e}", file=sys.__stderr__)
                sys.exit(2)
        else:
            try:
                out = restore(a.work, a.src, new_chain=a.new_chain)
            except UserError as e:
                print(f"qwen12 restore: {e}", file=sys.__stderr__)
                sys.exit(2)
    json.dump(out, sys.stdout, indent=1, default=str)
    print()


if __name__ == "__main__":
    main()
