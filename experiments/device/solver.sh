#!/usr/bin/env bash
# On the H200, after setup.sh: one solver server for every job of a stretch (vLLM's start, ~3.5 min for
# the 1.5B, is paid once), reached as  openai:qwen?base_url=http://127.0.0.1:8000/v1
#     experiments/device/solver.sh start [SHARE] [MODE] [LORA]   # detached: waits for the model's conversion, then
#                              # serves it with SHARE (default 0.3) of GPU memory; MODE eager | graphs | compile
#                              # (default compile; serve_solver.py says what each costs and gains; a graphs or
#                              # compile server that fails is replaced by an eager one); LORA sft=DIR,rl=DIR: the
#                              # adapters served by name too (the eval and musique stages' arms); log /tmp/dev/solver.log
#     experiments/device/solver.sh wait [SECONDS]  # until it answers (default 600 s); exit 1 if it did not
set -euo pipefail
cd "$(dirname "$0")/../.."
. experiments/device/env.sh
D=/tmp/dev
case "${1:-}" in
  start)
    rm -rf "$D/solver-src" && cp -r src "$D/solver-src" && cp experiments/device/serve_solver.py "$D/serve_solver.py"
    # the arguments go to the detached shell as its own positional parameters, never pasted into its script
    (cd "$D" && PYTHONPATH="/tmp/site:$D/solver-src" setsid nohup bash -c '
      while [ ! -f "$2/config.json" ]; do sleep 2; done
      exec python3 "$1" "${@:2}"' _ "$D/serve_solver.py" "$HL_MODEL" "${2:-0.3}" "${3:-compile}" ${4:+"$4"} \
      > "$D/solver.log" 2>&1 < /dev/null &)
    echo "solver server starting, mode ${3:-compile} (log $D/solver.log)" ;;
  wait)
    end=$((SECONDS + ${2:-600}))
    until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/v1/models', timeout=3)" 2>/dev/null; do
      [ $SECONDS -lt $end ] || { tail -5 "$D/solver.log"; exit 1; }
      sleep 3
    done
    echo "solver server ready after ${SECONDS}s of waiting" ;;
  *) echo "usage: solver.sh start [SHARE] [eager|graphs|compile] [NAME=DIR,...] | wait [SECONDS]" >&2; exit 2 ;;
esac
