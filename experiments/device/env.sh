# Source on the H200 after setup.sh: the environment the benchmarks and experiments expect there.
export HARNESSLEARN_CACHE_DIR=/tmp/hlcache PYTHONPATH="/tmp/site:$PWD/src" PYTHONUNBUFFERED=1
export PATH="/tmp/tools:/tmp/site/bin:$PATH"  # py-spy (bundle D, copied out of /tmp/site/bin), the wheels' scripts
export HL_MODEL="${HL_MODEL:-/tmp/hlcache/models/qwen2.5-coder-1.5b-instruct-hf-bf16}"
# vLLM's default top-k/top-p sampler is FlashInfer's, compiled (ninja, nvcc) on first use: 128-170 s of every
# engine start on a fresh machine (stretches 7-8, solver_start.log: the gap after graph capture), paid again by
# GRPO's colocated engine. The PyTorch-native sampler draws from the same distribution without that build.
export VLLM_USE_FLASHINFER_SAMPLER=0
ulimit -n 65536 2>/dev/null || true
