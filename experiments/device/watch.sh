#!/usr/bin/env bash
# On the H200: wait up to $1 seconds while the jobs of jobs.sh run, packing each work folder's results into
# $OUT every $2 seconds (qwen12.py collect; files are named WORKNAME.FILE and each is moved in whole, so a
# call cut short still brings back what finished), then print the log's tail. A folder that is not a work
# folder (no ret/: the peers benchmark's --out) comes back whole as NAME.tgz, its work/ subfolder left out.
#     experiments/device/watch.sh 500 60 /tmp/w1 /tmp/w2 /tmp/peers-b16
set -uo pipefail
cd "$(dirname "$0")/../.."
. experiments/device/env.sh
D="${HL_DEV_DIR:-/tmp/dev}"  # the device's scratch folder, as jobs.sh's (a test gives its own)
T=${1:-500}; EVERY=${2:-60}; shift 2
end=$((SECONDS + T))
pack() {
  for w in "$@"; do
    n=$(basename "$w"); rm -rf "/tmp/pack-$n"
    if [ -d "$w" ] && [ ! -d "$w/ret" ]; then  # a plain output folder (the peers'): its results, not its work
      tar czf "/tmp/pack-$n.tgz" --exclude=./work -C "$w" . 2>/dev/null \
        && mv "/tmp/pack-$n.tgz" "$OUT/.$n.tgz" && mv "$OUT/.$n.tgz" "$OUT/$n.tgz"
      continue
    fi
    python3 experiments/qwen12.py collect --work "$w" --out "/tmp/pack-$n" >/dev/null 2>&1 || continue
    for f in "/tmp/pack-$n"/*; do
      [ -f "$f" ] && cp "$f" "$OUT/.$n.$(basename "$f")" && mv "$OUT/.$n.$(basename "$f")" "$OUT/$n.$(basename "$f")"
    done
  done
  cp "$D"/jobs.log "$OUT/.jobs.log" 2>/dev/null && mv "$OUT/.jobs.log" "$OUT/jobs.log"
  cp "$D"/metrics.log "$OUT/.metrics.log" 2>/dev/null && mv "$OUT/.metrics.log" "$OUT/metrics.log"
  # the solver server's start (where its ~150 s went; its request log after that is not needed)
  [ -f "$D"/solver.log ] && head -c 300000 "$D"/solver.log > "$OUT/.solver_start.log" \
    && mv "$OUT/.solver_start.log" "$OUT/solver_start.log"
}
next=$((SECONDS + EVERY))
while [ $SECONDS -lt $end ] && [ ! -f "$D"/jobs.done ]; do
  sleep 5
  if [ $SECONDS -ge $next ]; then pack "$@"; next=$((SECONDS + EVERY)); fi
done
pack "$@"
# the kernels compiled this stretch, for the next one (jitcache.sh), once a machine, at the end of its first watch
# (the solver server compiles them as it starts; until session 45 this waited for every job to end, and a stretch
# cut before that, like 44's and 45's, brought none back): compressing the caches takes seconds to tens of seconds
# after the wait, so the call's limit needs that much beyond T; and only where it fits what a call brings back
# (8 files, 64 MiB): the results come first, and the last cache (.keep/jitcache.tar here) serves again when this
# one stays behind
if [ -f "$D"/solver.log ] && [ ! -f "$D"/jitcache.sent ] && [ ! -f "$OUT/jitcache.tar" ]; then
  bash experiments/device/jitcache.sh out "$D"/jitcache-out.tar
  if [ -f "$D"/jitcache-out.tar ]; then
    files=$(find "$OUT" -maxdepth 1 -type f | wc -l)
    bytes=$(( $(du -cb "$OUT" | tail -1 | cut -f1) + $(stat -c %s "$D"/jitcache-out.tar) ))
    if [ "$files" -lt 8 ] && [ "$bytes" -lt $((62 * 1024 * 1024)) ]; then
      mv "$D"/jitcache-out.tar "$OUT/jitcache.tar" && touch "$D"/jitcache.sent
    else
      echo "jitcache.tar left on the machine: \$OUT holds $files files, $bytes bytes with it (8 files, 64 MiB)"
    fi
  fi
fi
tail -c 4000 "$D"/jobs.log
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader || true
