#!/usr/bin/env bash
# On the H200 (from the repository copy the device tool runs in), after experiments/device/setup.sh
# ours + vllm: wait for the model's conversion, restore a returned $OUT carried as .dev/ret (if any),
# and start the transfer pipeline detached (log in /tmp/q12w/log.txt). Extra arguments go to
# `qwen12.py run` (for example --minutes-eval 6).
set -euo pipefail
cd "$(dirname "$0")/.."
. experiments/device/env.sh
W=/tmp/q12w
mkdir -p "$W"
while [ ! -f "$HL_MODEL/config.json" ]; do sleep 2; done
if [ -d .dev/ret ]; then python3 experiments/qwen12.py restore --work "$W" --from .dev/ret >/dev/null; fi
setsid nohup python3 experiments/qwen12.py run --model "$HL_MODEL" --work "$W" "$@" >> "$W/log.txt" 2>&1 < /dev/null &
echo "started the pipeline (pid $!); log $W/log.txt"
