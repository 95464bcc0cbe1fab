#!/usr/bin/env bash
# Issue 12 on the H200 (run from the device's repository copy): gather the 18 carried chunks of the
# Qwen2.5-Coder-1.5B-Instruct GGUF (.dev12/cNN/chunk.NN, one device call each, kept in /tmp/qc),
# install the carried wheels (.dev12/whl) into /tmp/site, unpack the code (.dev12/code.tgz) into
# /tmp/q12code, assemble + sha256-check the GGUF, convert it once to a bf16 transformers folder, and
# start the pipeline (experiments/qwen12.py run ...) detached, logging to /tmp/q12w/log.txt.
# Extra arguments go to `qwen12.py run`. A returned $OUT carried as .dev12/ret is restored first.
set -euo pipefail
export HARNESSLEARN_CACHE_DIR=/tmp/hlcache PYTHONUNBUFFERED=1
mkdir -p /tmp/qc /tmp/q12w
for d in .dev12/c*; do cp -n "$d"/chunk.* /tmp/qc/ 2>/dev/null || true; done
if [ ! -d /tmp/site/trl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .dev12/whl/*.whl
  printf 'def solve(*a, **k):\n    raise ImportError("pycosat stub")\nitersolve = solve\n' > /tmp/site/pycosat.py
fi
rm -rf /tmp/q12code && mkdir -p /tmp/q12code && tar xzf .dev12/code.tgz -C /tmp/q12code
export PYTHONPATH=/tmp/site:/tmp/q12code/src
G=/tmp/hlcache/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
if [ ! -f "$G" ]; then
  mkdir -p "$(dirname "$G")"
  cat /tmp/qc/chunk.* > "$G.tmp"
  echo "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046  $G.tmp" | sha256sum -c -
  mv "$G.tmp" "$G"
fi
cd /tmp/q12code
MODEL=$(python3 -c "from harnesslearn.models.embedded import ensure_hf_copy; print(ensure_hf_copy('qwen2.5-coder-1.5b-instruct'))" 2>/tmp/q12w/convert.log | tail -1)
echo "model: $MODEL"
if [ -d "$OLDPWD/.dev12/ret" ]; then python3 experiments/qwen12.py restore --work /tmp/q12w --from "$OLDPWD/.dev12/ret"; fi
setsid nohup python3 experiments/qwen12.py run --model "$MODEL" --work /tmp/q12w "$@" >> /tmp/q12w/log.txt 2>&1 < /dev/null &
echo "started pipeline pid $!"
