# Source on the H200 after setup.sh: the environment the benchmarks and experiments expect there.
export HARNESSLEARN_CACHE_DIR=/tmp/hlcache PYTHONPATH="/tmp/site:$PWD/src" PYTHONUNBUFFERED=1
export HL_MODEL=/tmp/hlcache/models/qwen2.5-coder-1.5b-instruct-hf-bf16
ulimit -n 65536 2>/dev/null || true
