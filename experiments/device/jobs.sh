#!/usr/bin/env bash
# On the H200: run transfer-pipeline jobs one after another, detached, from a copy of the repository made
# now (the device replaces the repository folder on every call). Each argument is the argument string of
# one `qwen12.py run` (with its own --work); the solver is the shared server of solver.sh unless a job
# names another. Log /tmp/dev/jobs.log; /tmp/dev/jobs.done appears when all have ended.
# An argument that begins with '!' is a shell command instead, run at its turn in the same copy of the
# repository: a step between stages, such as the solver server restarted with the adapters that the stages
# before it trained, or the peers benchmark (`!python3 benchmarks/peers/run.py ... --out /tmp/peers-b16`). Each
# step's start is logged with its time; a step that fails is logged, and the next runs.
# The sandbox runs with issue 31's engine setting (HL_RUNTIME; a job's own --runtime.* options come later and
# win): 4 trusted shards, 256 runs in flight, no spare slots (benchmarks/gpu_eval.py on an H100: 9,720 solver
# tok/s against 6,940 for one trusted process). HL_RUNTIME="" gives the settings' own (local, 192 + 48 spare).
#     experiments/device/jobs.sh "--work /tmp/w1 --stages grpo ..." "--work /tmp/w2 ..."
#     experiments/device/jobs.sh "--work /tmp/w --stages sft --force" \
#       "!bash experiments/device/solver.sh stop && bash experiments/device/solver.sh start 0.3 graphs sft=DIR" \
#       "--work /tmp/w --stages eval ..."
set -euo pipefail
cd "$(dirname "$0")/../.."
. experiments/device/env.sh
D="${HL_DEV_DIR:-/tmp/dev}"  # the device's scratch folder (a test gives its own)
export HL_DEV_DIR="$D"       # for the steps and sample.sh
rm -rf "$D/jobs-src" "$D/jobs.done" "$D"/step-*.sh && mkdir -p "$D/jobs-src" && cp -r src experiments "$D/jobs-src/"
# the benchmarks too (a step may run benchmarks/peers/run.py, issue 35), without the peers' installed environments
tar cf - --exclude=.venvs benchmarks | tar xf - -C "$D/jobs-src"
Q=$(printf %q "$D")  # the folder as jobs.run spells it
SOLVER='openai:qwen?base_url=http://127.0.0.1:8000/v1&timeout=300&prefill=true'
RUNTIME="${HL_RUNTIME---runtime.executor shards:4 --runtime.concurrency 256 --runtime.spare-slots 0}"
{
  i=0
  for job in "$@"; do
    i=$((i + 1))
    echo "echo \"[jobs \$(date +%T)] step $i of $#\""
    case "$job" in
      # a step's command goes to a file of its own: a typo in it fails that step alone (bash stops a script
      # at a syntax error), and it runs against the copy of the code, as the runs do
      '!'*) printf '%s\n' "${job#!}" > "$D/step-$i.sh"
            echo "(cd $Q/jobs-src && PYTHONPATH=/tmp/site:$Q/jobs-src/src bash $Q/step-$i.sh) || { rc=\$?; echo \"[jobs \$(date +%T)] step $i failed: exit \$rc\"; }" ;;
      *) echo "cd $Q/jobs-src && PYTHONPATH=/tmp/site:$Q/jobs-src/src python3 experiments/qwen12.py run --model $HL_MODEL --solver '$SOLVER' $RUNTIME $job || true" ;;
    esac
  done
  echo "touch $Q/jobs.done"
} > "$D/jobs.run"
setsid nohup bash "$D/jobs.run" >> "$D/jobs.log" 2>&1 < /dev/null &
setsid nohup bash "$D/jobs-src/experiments/device/sample.sh" 10 >/dev/null 2>&1 < /dev/null &
echo "started $# job(s) (pid $!); log $D/jobs.log"
