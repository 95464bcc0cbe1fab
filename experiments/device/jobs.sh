#!/usr/bin/env bash
# On the H200: run transfer-pipeline jobs one after another, detached, from a copy of the repository made
# now (the device replaces the repository folder on every call). Each argument is the argument string of
# one `qwen12.py run` (with its own --work); the solver is the shared server of solver.sh unless a job
# names another. Log /tmp/dev/jobs.log; /tmp/dev/jobs.done appears when all have ended.
# The sandbox runs with issue 31's engine setting (HL_RUNTIME; a job's own --runtime.* options come later and
# win): 4 trusted shards, 256 runs in flight, no spare slots (benchmarks/gpu_eval.py on an H100: 9,720 solver
# tok/s against 6,940 for one trusted process). HL_RUNTIME="" gives the settings' own (local, 192 + 48 spare).
#     experiments/device/jobs.sh "--work /tmp/w1 --stages grpo ..." "--work /tmp/w2 ..."
set -euo pipefail
cd "$(dirname "$0")/../.."
. experiments/device/env.sh
D=/tmp/dev
rm -rf "$D/jobs-src" "$D/jobs.done" && mkdir -p "$D/jobs-src" && cp -r src experiments "$D/jobs-src/"
SOLVER='openai:qwen?base_url=http://127.0.0.1:8000/v1&timeout=300&prefill=true'
RUNTIME="${HL_RUNTIME---runtime.executor shards:4 --runtime.concurrency 256 --runtime.spare-slots 0}"
{
  for job in "$@"; do
    echo "cd $D/jobs-src && PYTHONPATH=/tmp/site:$D/jobs-src/src python3 experiments/qwen12.py run --model $HL_MODEL --solver '$SOLVER' $RUNTIME $job || true"
  done
  echo "touch $D/jobs.done"
} > "$D/jobs.run"
setsid nohup bash "$D/jobs.run" >> "$D/jobs.log" 2>&1 < /dev/null &
setsid nohup bash "$D/jobs-src/experiments/device/sample.sh" 10 >/dev/null 2>&1 < /dev/null &
echo "started $# job(s) (pid $!); log $D/jobs.log"
