"""On the H200 (``solver.sh start``): serve the converted 1.5B as ``qwen`` on port 8000 with vLLM.

    python3 serve_solver.py MODEL_DIR SHARE MODE [LORA]    # MODE: eager | graphs | compile
                                                           # LORA: sft=DIR,rl=DIR (LoRA modules served by name)

- ``eager``: no torch.compile, no CUDA graphs (``--enforce-eager``): the stretches 2-5 server. Its start took
  ~150 s there and its decoding pays a kernel launch per op per step (GRPO's reward phase, stretch 5: 2-5k
  generated tokens/s with up to 184 requests running, the GPU 10-30 % busy).
- ``graphs``: CUDA graphs for decode batches without torch.compile (``mode 0``, ``FULL_DECODE_ONLY``): the
  launch overhead gone at a start close to eager's (the graphs are captured in seconds: TRL's colocated engine
  captured its 11 in ~1 s there).
- ``compile``: vLLM's default (torch.compile + piecewise and full graphs): the slowest start (~3.5 min in
  stretch 1).

With ``LORA``, the adapters are served by name beside the base model (``--enable-lora``): the eval and musique
stages take their proposer arms from the server when it serves this run's adapters (``transfer/served.py``).

If a ``graphs`` or ``compile`` server exits with an error, an eager one is started in its place, so a stretch
keeps its solver (one line in the log says so). A server stopped by a signal is not restarted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence

from harnesslearn.models.served import vllm_argv

MODES = ("eager", "graphs", "compile")


def loras(text: str) -> dict[str, str]:
    """``sft=DIR,rl=DIR`` -> {name: DIR}; every DIR must hold an adapter."""
    out: dict[str, str] = {}
    for part in filter(None, text.split(",")):
        name, sep, path = part.partition("=")
        if not sep or not name or not os.path.isfile(os.path.join(path, "adapter_config.json")):
            raise SystemExit(f"serve_solver: LORA must be NAME=ADAPTER_DIR,...; {part!r} is not")
        out[name] = os.path.abspath(path)  # the server runs elsewhere; the stages compare absolute folders
    return out


def argv(model: str, share: float, mode: str, lora: dict[str, str] | None = None) -> list[str]:
    if mode not in MODES:
        raise SystemExit(f"serve_solver: mode must be one of {', '.join(MODES)}, got {mode!r}")
    extra = (["--compilation-config", json.dumps({"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"})]
             if mode == "graphs" else [])
    return vllm_argv(model, 8000, served_name="qwen", gpu_memory_utilization=share, max_num_seqs=512,
                     enforce_eager=mode == "eager", lora=lora or None, extra=extra)


def serve(model: str, share: float, mode: str, lora: dict[str, str] | None = None, *,
          call: Callable[[Sequence[str]], int] = subprocess.call,
          execv: Callable[[str, Sequence[str]], None] = os.execv) -> None:
    a = argv(model, share, mode, lora)
    if mode == "eager":
        execv(a[0], a)
        return
    rc = call(a)
    if rc > 0:  # an error (a negative code is a signal: stopped on purpose)
        print(f"serve_solver: the {mode} server exited with {rc}; starting an eager one", flush=True)
        e = argv(model, share, "eager", lora)
        execv(e[0], e)


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        raise SystemExit("usage: serve_solver.py MODEL_DIR SHARE eager|graphs|compile [NAME=ADAPTER_DIR,...]")
    serve(sys.argv[1], float(sys.argv[2]), sys.argv[3], loras(sys.argv[4]) if len(sys.argv) == 5 else None)
