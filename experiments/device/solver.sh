#!/usr/bin/env bash
# On the H200, after setup.sh: one solver server for every job of a stretch (vLLM's start, ~1 min for the 1.5B
# since stretch 9, is paid once), reached as  openai:qwen?base_url=http://127.0.0.1:8000/v1
#     experiments/device/solver.sh start [SHARE] [MODE] [LORA]   # detached: waits for the model's conversion, then
#                              # serves it with SHARE (default 0.3) of GPU memory; MODE eager | graphs | full | compile
#                              # (default full: issue 31's setting, 2.1x graphs' tokens/s in stretch 12;
#                              # serve_solver.py says what each costs and gains; a full server that fails is
#                              # replaced by a graphs one, a graphs or compile one by eager); LORA sft=DIR,rl=DIR: the
#                              # adapters served by name too (the eval and musique stages' arms; one whose folder is
#                              # missing is left out, said so); log /tmp/dev/solver.log
#     HL_SOLVER_PORTS="8001 8002" experiments/device/solver.sh start [SHARE] [MODE]
#                              # more servers of the same model on the one GPU (default port 8000), each with SHARE
#                              # and its own engine core, started one after the other (two vLLM engines profiling
#                              # GPU memory at once misread it); logs /tmp/dev/solver-PORT.log
#     experiments/device/solver.sh wait [SECONDS]  # until every server started answers (default 600 s); exit 1 if not,
#                              # at once where every server started has exited (a bad adapter path, no memory)
#     experiments/device/solver.sh urls            # --solver-base-url URL for each server started that answers
#                              # (gpu_eval.py: the calls spread over them by harnesslearn's endpoint pool, spec
#                              # openai:qwen); a start while an earlier server has not answered yet is refused
#     experiments/device/solver.sh stop [SECONDS]  # every server started here, with its engine processes: TERM,
#                              # then KILL after SECONDS (default 60); the GPU memory is free when it returns, and
#                              # the next start begins afresh (e.g. the eval's server with the adapters after GRPO)
set -euo pipefail
cd "$(dirname "$0")/../.."
. experiments/device/env.sh
D="${HL_DEV_DIR:-/tmp/dev}"  # the device's scratch folder (a test gives its own)
PORTS_FILE="$D/solver_ports"
answers() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$1/v1/models', timeout=3)" 2>/dev/null; }
listed() { awk '!seen[$0]++' "$PORTS_FILE" 2>/dev/null || true; }  # the ports started on this machine, in order
pids() { cat "$D/solver_pids" 2>/dev/null || true; }  # the process group of each start (its detached shell)
# a group counts while one of its processes is not a zombie (an orphan that nothing reaped yet has ended)
alive() {
  local g
  for g in $(pids); do
    ps -eo pgid=,stat= | awk -v g="$g" '$1 == g && $2 !~ /^Z/ {f = 1} END {exit !f}' && return 0
  done
  return 1
}
case "${1:-}" in
  start)
    ports=$(echo ${HL_SOLVER_PORTS:-8000})  # one space between ports
    [ -n "$ports" ] || { echo "solver.sh: HL_SOLVER_PORTS names no port" >&2; exit 2; }
    for p in $ports; do
      case "$p" in *[!0-9]*) echo "solver.sh: HL_SOLVER_PORTS must be port numbers, got '$p'" >&2; exit 2 ;; esac
    done
    mkdir -p "$D"
    # servers already started: each must answer first (two vLLM engines profiling GPU memory at once misread it),
    # and they keep the copy of the code they were started from
    for p in $(listed); do
      answers "$p" || { echo "solver.sh: the server on port $p has not answered yet: solver.sh wait first" >&2; exit 1; }
    done
    if [ ! -s "$PORTS_FILE" ]; then
      rm -rf "$D/solver-src" && cp -r src "$D/solver-src" && cp experiments/device/serve_solver.py "$D/serve_solver.py"
    fi
    # an adapter whose folder is missing (its training stage failed) is left out, said so: vLLM would not start
    lora=""; IFS=, read -ra items <<< "${4:-}"
    for it in "${items[@]}"; do
      if [ -d "${it#*=}" ]; then lora="${lora:+$lora,}$it"
      else echo "solver.sh: no adapter folder ${it#*=}: ${it%%=*} left out" >&2; fi
    done
    for p in $ports; do echo "$p" >> "$PORTS_FILE"; done
    # the arguments go to the detached shell as its own positional parameters, never pasted into its script
    log="$D/solver.log"; [ "$ports" = 8000 ] || log="$D/solver-$(echo $ports | tr ' ' '-').log"
    n=$(pids | wc -w)  # the starts recorded so far
    export -f answers  # the detached shell below waits with the same probe
    (cd "$D" && PYTHONPATH="/tmp/site:$D/solver-src" exec setsid nohup bash -c '
      script=$1 model=$2 share=$3 mode=$4 lora=$5 ports=$6 dir=$7
      echo $$ >> "$dir/solver_pids"  # this shell leads its own session: stop signals the whole group
      while [ ! -f "$model/config.json" ]; do sleep 2; done
      set -- $ports
      if [ $# -eq 1 ]; then exec python3 "$script" "$model" "$share" "$mode" ${lora:+"$lora"} --port "$1"; fi
      for p in "$@"; do
        python3 "$script" "$model" "$share" "$mode" ${lora:+"$lora"} --port "$p" > "$dir/solver-$p.log" 2>&1 &
        pid=$! state=answers
        until answers "$p"; do
          kill -0 $pid 2>/dev/null || { state="exited (log $dir/solver-$p.log)"; break; }
          sleep 2
        done
        echo "solver on port $p $state"
      done
      wait' _ "$D/serve_solver.py" "$HL_MODEL" "${2:-0.3}" "${3:-full}" "$lora" "$ports" "$D") \
      > "$log" 2>&1 < /dev/null &  # every descriptor to the log: nothing holds the caller's output open
    # the detached shell records its group before this returns: a stop right after a start must find it
    for _ in $(seq 50); do [ "$(pids | wc -w)" -gt "$n" ] && break; sleep 0.1; done
    echo "solver server(s) starting on port(s) $ports, mode ${3:-full} (log $log)" ;;
  wait)
    end=$((SECONDS + ${2:-600}))
    ports=$(listed); for p in ${ports:-8000}; do
      until answers "$p"; do
        [ $SECONDS -lt $end ] || { echo "solver on port $p did not answer"; tail -5 "$D"/solver*.log; exit 1; }
        # every server started here has exited (a bad adapter path, no GPU memory): no use waiting out the time
        if [ -n "$(pids)" ] && ! alive; then
          echo "solver on port $p: the server exited before it answered"; tail -5 "$D"/solver*.log; exit 1
        fi
        sleep 3
      done
    done
    echo "solver server ready after ${SECONDS}s of waiting" ;;
  urls)  # the servers started here that answer now (a dead one is left out, and said so on stderr)
    ports=$(listed)
    for p in ${ports:-8000}; do
      if answers "$p"; then printf -- '--solver-base-url http://127.0.0.1:%s/v1 ' "$p"
      else echo "solver.sh: the server on port $p does not answer; left out" >&2; fi
    done
    echo ;;
  stop)
    groups=$(pids)
    for g in $groups; do kill -TERM -- "-$g" 2>/dev/null || true; done
    end=$((SECONDS + ${2:-60}))
    while alive && [ $SECONDS -lt $end ]; do sleep 1; done
    if alive; then
      for g in $groups; do kill -KILL -- "-$g" 2>/dev/null || true; done
      sleep 2
    fi
    alive && { echo "solver.sh: a server's processes outlived SIGKILL (groups: $groups)" >&2; exit 1; }
    rm -f "$PORTS_FILE" "$D/solver_pids"
    echo "solver server(s) stopped: $(echo $groups | wc -w) group(s)" ;;
  *) echo "usage: [HL_SOLVER_PORTS=\"8000 8001\"] solver.sh start [SHARE] [eager|graphs|full|compile] [NAME=DIR,...] | wait [SECONDS] | urls | stop [SECONDS]" >&2
     exit 2 ;;
esac
