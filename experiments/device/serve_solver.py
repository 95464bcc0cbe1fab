"""On the H200 (``solver.sh start``): serve the converted 1.5B as ``qwen`` on port 8000 (or
``--port``) with vLLM.

    python3 serve_solver.py MODEL_DIR SHARE MODE [LORA] [--port N]  # MODE: eager | graphs | full | compile
                                                           # LORA: sft=DIR,rl=DIR (LoRA modules served by name)
                                                           # --port: default 8000 (replicas: 8001, ...)

- ``eager``: no torch.compile, no CUDA graphs (``--enforce-eager``): the stretches 2-5 server. Its start took
  ~150 s there and its decoding pays a kernel launch per op per step (GRPO's reward phase, stretch 5: 2-5k
  generated tokens/s with up to 184 requests running, the GPU 10-30 % busy).
- ``graphs``: CUDA graphs for decode batches without torch.compile (``mode 0``, ``FULL_DECODE_ONLY``): the
  launch overhead gone at a start close to eager's (the graphs are captured in seconds: TRL's colocated engine
  captured its 11 in ~1 s there).
- ``full``: CUDA graphs for every batch up to 1,024 tokens, mixed prefill-decode batches included (``mode 0``,
  ``FULL``; FlashAttention 3, the Hopper backend, supports it), with a step capped at those 1,024 tokens
  (``--max-num-batched-tokens``) so that no step runs eager. Why: with ``graphs`` under the harness load (stretch 9),
  most steps mix a prefill chunk into the decodes and ran eager, the engine-core process at a full core and the GPU
  21 % busy. If it fails to start, a ``graphs`` server takes its place.
- ``compile``: vLLM's default (torch.compile + piecewise and full graphs): the slowest start (~3.5 min in
  stretch 1).

With ``LORA``, the adapters are served by name beside the base model (``--enable-lora``): the eval and musique
stages take their proposer arms from the server when it serves this run's adapters (``transfer/served.py``).

Several servers (``HL_SOLVER_PORTS="8001" solver.sh start SHARE MODE``): more of these on the one GPU, one per port,
each with SHARE of its memory and its own engine-core process (stretch 9: one ``VLLM::EngineCore`` at a full core
capped the decode loop with the GPU 21 % busy); clients spread their calls over them with the endpoint pool.

If a ``graphs`` or ``compile`` server exits with an error, an eager one is started in its place (a ``full`` one: a
``graphs`` one, then eager), so a stretch keeps its solver (one line in the log says so). A server stopped by a signal is not restarted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence

from harnesslearn.models.served import vllm_argv

MODES = ("eager", "graphs", "full", "compile")
FULL_TOKENS = 1024  # the ``full`` mode's largest graph and largest step
FALLBACK = {"full": "graphs", "graphs": "eager", "compile": "eager"}  # the server that replaces one that failed


def loras(text: str) -> dict[str, str]:
    """``sft=DIR,rl=DIR`` -> {name: DIR}; every DIR must hold an adapter."""
    out: dict[str, str] = {}
    for part in filter(None, text.split(",")):
        name, sep, path = part.partition("=")
        if not sep or not name or not os.path.isfile(os.path.join(path, "adapter_config.json")):
            raise SystemExit(f"serve_solver: LORA must be NAME=ADAPTER_DIR,...; {part!r} is not")
        out[name] = os.path.abspath(path)  # the server runs elsewhere; the stages compare absolute folders
    return out


def argv(model: str, share: float, mode: str, lora: dict[str, str] | None = None, port: int = 8000) -> list[str]:
    if mode not in MODES:
        raise SystemExit(f"serve_solver: mode must be one of {', '.join(MODES)}, got {mode!r}")
    extra: list[str] = []
    if mode == "graphs":
        extra = ["--compilation-config", json.dumps({"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"})]
    elif mode == "full":
        extra = ["--compilation-config", json.dumps({"mode": 0, "cudagraph_mode": "FULL",
                                                     "max_cudagraph_capture_size": FULL_TOKENS}),
                 "--max-num-batched-tokens", str(FULL_TOKENS)]
    return vllm_argv(model, port, served_name="qwen", gpu_memory_utilization=share, max_num_seqs=512,
                     enforce_eager=mode == "eager", lora=lora or None, extra=extra)


def serve(model: str, share: float, mode: str, lora: dict[str, str] | None = None, *, port: int = 8000,
          call: Callable[[Sequence[str]], int] = subprocess.call,
          execv: Callable[[str, Sequence[str]], None] = os.execv) -> None:
    a = argv(model, share, mode, lora, port)
    if mode == "eager":
        execv(a[0], a)
        return
    rc = call(a)
    if rc > 0:  # an error (a negative code is a signal: stopped on purpose)
        print(f"serve_solver: the {mode} server exited with {rc}; starting a {FALLBACK[mode]} one", flush=True)
        serve(model, share, FALLBACK[mode], lora, port=port, call=call, execv=execv)


def main(args: Sequence[str]) -> None:
    rest, port = list(args), 8000
    if "--port" in rest:
        i = rest.index("--port")
        if i + 1 >= len(rest) or not rest[i + 1].isdigit():
            raise SystemExit("serve_solver: --port needs a number")
        port = int(rest[i + 1])
        del rest[i:i + 2]
    if len(rest) not in (3, 4):
        raise SystemExit("usage: serve_solver.py MODEL_DIR SHARE eager|graphs|full|compile [NAME=ADAPTER_DIR,...] [--port N]")
    serve(rest[0], float(rest[1]), rest[2], loras(rest[3]) if len(rest) == 4 else None, port=port)


if __name__ == "__main__":
    main(sys.argv[1:])
