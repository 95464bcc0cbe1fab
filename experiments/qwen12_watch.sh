#!/usr/bin/env bash
# On the H200: wait up to $1 seconds (default 540) while the detached pipeline runs, packing its results
# into $OUT every $2 seconds (default 60; qwen12.py collect, each file moved in whole) so that a call cut
# short by the device's limits still brings back what finished; then print the log's tail and the
# stages' status.
set -uo pipefail
cd "$(dirname "$0")/.."
. experiments/device/env.sh
T=${1:-540}
EVERY=${2:-60}
end=$((SECONDS + T))
pack() {
  rm -rf /tmp/q12pack
  python3 experiments/qwen12.py collect --work /tmp/q12w --out /tmp/q12pack >/dev/null 2>&1 || return 0
  for f in /tmp/q12pack/*; do
    [ -f "$f" ] && cp "$f" "$OUT/.$(basename "$f")" && mv "$OUT/.$(basename "$f")" "$OUT/$(basename "$f")"
  done
}
next=$((SECONDS + EVERY))
while [ $SECONDS -lt $end ]; do
  grep -q '"all"' /tmp/q12w/ret/status.json 2>/dev/null && break
  sleep 5
  if [ $SECONDS -ge $next ]; then pack; next=$((SECONDS + EVERY)); fi
done
pack
tail -c 3000 /tmp/q12w/log.txt; head -c 3000 /tmp/q12w/ret/status.json 2>/dev/null
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader || true
