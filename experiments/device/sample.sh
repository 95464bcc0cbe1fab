#!/usr/bin/env bash
# On the H200: every $1 seconds (default 10) append one line to /tmp/dev/metrics.log while the jobs of
# jobs.sh run: unix time, the solver server's requests running and waiting and its generated tokens so far
# (vLLM's /metrics), the host's 1-minute load, GPU utilization %. It tells which side caps a stage: an
# engine with few requests running while the load is near the core count is capped by the trusted side.
set -uo pipefail
EVERY=${1:-10}; D="${HL_DEV_DIR:-/tmp/dev}"; LOG="$D/metrics.log"
echo "# t running waiting gen_tokens load1 gpu_util" >> "$LOG"
while [ ! -f "$D/jobs.done" ]; do
  m=$(python3 - <<'PY' 2>/dev/null
import re, urllib.request
t = urllib.request.urlopen("http://127.0.0.1:8000/metrics", timeout=3).read().decode()
def s(name):
    return sum(float(x) for x in re.findall(rf"^vllm:{name}(?:{{[^}}]*}})?\s+([0-9.eE+-]+)", t, re.M))
print(int(s("num_requests_running")), int(s("num_requests_waiting")), int(s("generation_tokens_total")))
PY
)
  g=$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits 2>/dev/null | head -1)
  echo "$(date +%s) ${m:-- - -} $(cut -d' ' -f1 /proc/loadavg) ${g:--}" >> "$LOG"
  sleep "$EVERY"
done
