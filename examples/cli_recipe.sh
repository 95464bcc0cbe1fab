#!/usr/bin/env bash
# Bring your own task and metric, from the command line: a JSONL task whose scorer is your function
# (FILE.py:FUNCTION or MODULE:FUNCTION), adapted for one round of 2 candidates, then the HTML report.
#
#   bash examples/cli_recipe.sh [RUN_DIR] [extra adapt options, e.g. --unsafe-no-sandbox on macOS]
#
# The models are scripted (examples/models.py); give --solver/--proposer real specs to do it for real.
set -euo pipefail
cd "$(dirname "$0")/.."
read -ra HL <<< "${HL:-.venv/bin/harnesslearn}"  # the command (HL may hold a command line)
RUN=${1:-runs/example-sums}
shift || true
"${HL[@]}" adapt --task "jsonl:examples/data/sums.jsonl?scorer=examples/score.py:grade" \
    --solver python:examples/models.py:solver --proposer python:examples/models.py:proposer \
    --rounds 1 --candidates 2 --n-feedback 4 --n-score 6 --n-test 8 --no-memory \
    --run-dir "$RUN" --json "$@"
"${HL[@]}" report "$RUN" >&2
