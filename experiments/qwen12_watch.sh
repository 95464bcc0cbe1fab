#!/usr/bin/env bash
# On the H200: wait up to $1 seconds (default 540) while the detached pipeline runs, then pack its
# results into $OUT (qwen12.py collect) and print the log's tail and the stages' status.
set -uo pipefail
cd "$(dirname "$0")/.."
. experiments/device/env.sh
T=${1:-540}
end=$((SECONDS + T))
while [ $SECONDS -lt $end ]; do
  grep -q '"all"' /tmp/q12w/ret/status.json 2>/dev/null && break
  sleep 5
done
python3 experiments/qwen12.py collect --work /tmp/q12w --out "$OUT" >/dev/null
tail -c 3000 /tmp/q12w/log.txt; head -c 3000 /tmp/q12w/ret/status.json 2>/dev/null
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader || true
