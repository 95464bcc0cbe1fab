"""Any program as the proposer: a `python:` model that hands the prompt to a command (a coding-agent CLI, a
script, a service client) on stdin and returns what it prints: its revision (SEARCH/REPLACE blocks, or a
whole file when asked for one).

    export HL_AGENT_CMD='my-agent --print'      # the command; it reads the prompt on stdin
    .venv/bin/harnesslearn adapt --task rg:gcd --solver local:gemma-3-270m \\
        --proposer python:examples/agent_proposer.py:propose --rounds 2 --candidates 2

The command runs in the trusted process with your rights (it is your agent, not harness code): give it the
tools and sandbox you would give it anyway. A command that fails is an infrastructure failure of the
proposer (exit 1, resumable with --resume), never a proposal.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess


def propose(prompt, **kw) -> str:
    cmd = os.environ.get("HL_AGENT_CMD")
    if not cmd:
        raise RuntimeError("set HL_AGENT_CMD to the command that writes the revision")
    text = prompt if isinstance(prompt, str) else json.dumps(prompt)  # a chat prompt: its messages as JSON
    done = subprocess.run(shlex.split(cmd), input=text, capture_output=True, text=True,
                          timeout=float(os.environ.get("HL_AGENT_TIMEOUT", "600")))
    if done.returncode != 0:
        raise RuntimeError(f"{cmd} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout
