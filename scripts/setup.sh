#!/usr/bin/env bash
# Set up everything harnesslearn needs on a fresh machine, idempotently, into .venv at the
# repository root. Usage: scripts/setup.sh [--test]   (--test adds what the test suite needs)
set -euo pipefail
cd "$(dirname "$0")/.."
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
# llama-cpp-python builds from source (~12 min on 2 cores); pip caches the built wheel, and a
# wheel left in ~/.cache/harnesslearn/wheels is used as is.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
mkdir -p "$HOME/.cache/harnesslearn/wheels"
echo "[setup] pip install -e .[$extras] (first run: several minutes)" >&2
.venv/bin/python -m pip install -q --disable-pip-version-check \
  --find-links "$HOME/.cache/harnesslearn/wheels" -e ".[$extras]" "torch==2.13.0" >&2
echo "[setup] ready: .venv/bin/harnesslearn" >&2
