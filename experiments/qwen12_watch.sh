#!/usr/bin/env bash
# Wait up to $1 seconds (default 540) while the detached pipeline runs, then pack its results into
# $OUT (experiments/qwen12.py collect) and print the log's tail and the stage status.
T=${1:-540}; shift || true
export PYTHONPATH=/tmp/site:/tmp/q12code/src
end=$((SECONDS + T))
while [ $SECONDS -lt $end ]; do
  grep -q '"all"' /tmp/q12w/ret/status.json 2>/dev/null && break
  sleep 5
done
cd /tmp/q12code && python3 experiments/qwen12.py collect --work /tmp/q12w --out "$OUT" "$@"
cp /tmp/q12w/log.txt "$OUT/log.txt" 2>/dev/null || true
tail -c 4000 /tmp/q12w/log.txt; cat /tmp/q12w/ret/status.json 2>/dev/null | head -c 2000
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader || true
