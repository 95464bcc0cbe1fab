"""How many sandboxed harness runs per second the trusted side sustains, on this machine's CPU.

The solver is a ``python:`` coroutine that sleeps ``L`` seconds per call (0 and 0.17 s: the H200's
vLLM call p50), so the model is never the limit: what is measured is the executor (spawns, sweeps,
frames, the broker) and the event loop of the one trusted process. ``lanes`` coroutines each run one
problem at a time, as ``benchmarks/gpu_eval.py`` does on the GPU; half the runs are the minimal seed
(one model call), half the zoo's interpreter loop (a model call and a ``model.python`` run in the
slot's second sandbox).

Configurations, measured in the same run, point by point, so the ratio holds on a busy machine:
- ``baseline``: today's default, one slot per lane (a lane frees its slot and then waits while that
  same slot is rebuilt: kill, uid sweeps, spawn);
- ``spare``: ``spare_slots`` = lanes // 2 more pre-started slots (``ExecutorConfig.spare_slots``), so
  a freed slot rebuilds while the next problem starts in another;
- ``shards``: ``--executor shards:K`` (K = the machine's cores by default): K trusted processes, each
  with its own loop, slots (spare ones included) and solver client, the lanes split over them.

Per point: runs/s, model calls per second and in flight (Little's law, calls/s x latency; also sampled
every 20 ms inside the solver when it runs in this process), trusted CPU ms per run (this process and
the shards, all threads) and worker CPU ms per run (the sandboxes, reaped), and each configuration's
ratio to ``baseline``. Writes ``benchmarks/results/harness_throughput.json``.

``--crowd N`` starts N idle processes on the host for the whole run (and ends them after): a busy host,
such as a GPU machine with its serving stack. A slot's sweep once walked all of /proc, so its cost grew
with them; it now lists the slot's cgroup where the slot has one (issue 31).

    .venv/bin/python benchmarks/harness_throughput.py                 # ~4 min on 2 cores
    .venv/bin/python benchmarks/harness_throughput.py --seconds 5 --lanes 8 --latency 0   # a quick look
    .venv/bin/python benchmarks/harness_throughput.py --lanes 32 --latency 0.17 --shards 0 --crowd 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harnesslearn.evaluation import task_tools
from harnesslearn.harness import load_harness
from harnesslearn.models import load_model
from harnesslearn.procstat import proc_cpu
from harnesslearn.sandbox import ExecutorConfig, build_executor
from harnesslearn.sandbox.records import Budgets
from harnesslearn.tasks import load_task
from harnesslearn.zoo import build as zoo_build

OUT = Path(__file__).resolve().parent / "results" / "harness_throughput.json"


class Solver:
    """The stand-in model: sleeps ``latency`` s a call; counts the calls in flight."""

    def __init__(self, latency: float) -> None:
        self.latency, self.in_flight = latency, 0

    async def __call__(self, prompt: Any, **_: Any) -> str:
        self.in_flight += 1
        try:
            await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        text = prompt if isinstance(prompt, str) else "\n".join(str(m.get("content", "")) for m in prompt)
        return "```python\nprint(1)\n```" if "program" in text.lower() else "1"


_SHARD_SOLVER = Solver(float(os.environ.get("HL_BENCH_LATENCY", "0")))


async def stand_in(prompt: Any, **kw: Any) -> str:
    """The stand-in as a ``python:`` spec that each shard loads for itself (latency from $HL_BENCH_LATENCY)."""
    return await _SHARD_SOLVER(prompt, **kw)


def _cpu(pids: list[int]) -> tuple[float, float]:
    """(trusted CPU s, worker CPU s): this process and the shards, and the workers they reaped."""
    t = os.times()
    own, kids = time.process_time(), t.children_user + t.children_system
    for pid in pids:
        a, b = proc_cpu(pid)
        own, kids = own + a, kids + b
    return own, kids


async def point(lanes: int, latency: float, option: str, spare: int, seconds: float,
                isolation: str) -> dict[str, Any]:
    task = load_task("rg:gcd")
    problems = task.problems("test", 64, 0)
    harnesses = [load_harness("minimal").source, zoo_build("interpreter_loop", task, 0).source]
    tools = task_tools(task)
    budgets = Budgets(timeout_s=30, max_calls=16, max_tokens=8192)
    local = Solver(latency)
    solver = load_model("python:stand-in", fn=local, concurrency=4096)
    os.environ["HL_BENCH_LATENCY"] = str(latency)
    cfg = ExecutorConfig(concurrency=lanes, spare_slots=spare, isolation=isolation)
    ex = build_executor(option, solver, cfg, concurrency=lanes,
                        solver_source=(f"python:{Path(__file__).resolve()}:stand_in", {}))
    runs, calls, samples = [0], [0], []
    async with ex:
        await ex.run(harnesses[0], problems[:lanes], tools, budgets)  # warm: every slot used once
        pids = [int(a["pid"]) for a in ex.stats().get("actors", []) if a.get("pid")]
        end = time.perf_counter() + seconds
        counter = iter(range(10**9))

        async def lane() -> None:
            while time.perf_counter() < end:
                i = next(counter)
                recs = await ex.run(harnesses[i % 2], [problems[i % len(problems)]], tools, budgets, settle=False)
                runs[0] += 1
                calls[0] += sum(c.kind == "model" for c in recs[0].calls)

        async def sample() -> None:
            while time.perf_counter() < end:
                samples.append(local.in_flight)
                await asyncio.sleep(0.02)

        (cpu0, kids0), t0 = _cpu(pids), time.perf_counter()
        await asyncio.gather(sample(), *(lane() for _ in range(lanes)))
        span = time.perf_counter() - t0
        cpu1, kids1 = _cpu(pids)
        isolation_used = ex.isolation
    n = runs[0]
    return {"executor": option, "lanes": lanes, "latency_s": latency, "spare_slots": spare, "runs": n,
            "seconds": round(span, 2), "runs_per_s": round(n / span, 2), "model_calls_per_s": round(calls[0] / span, 2),
            # sampled inside the solver where it runs in this process; Little's law (calls/s x latency) for all
            "calls_in_flight_sampled": round(sum(samples) / len(samples), 2) if samples and not pids else None,
            "calls_in_flight_little": round(calls[0] / span * latency, 2),
            "trusted_cpu_ms_per_run": round(1000 * (cpu1 - cpu0) / n, 2) if n else None,
            "worker_cpu_ms_per_run": round(1000 * (kids1 - kids0) / n, 2) if n else None,
            "shards": len(pids) or 1, "isolation": isolation_used}


def main(argv: list[str] | None = None) -> None:
    from harnesslearn.fsutil import scratch_cache

    scratch_cache("harnesslearn-bench-")  # never the user's cache: a temp one, the models linked
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=12.0, help="measured seconds per configuration and point")
    p.add_argument("--lanes", default="8,32,64", help="lanes (problems in flight), comma-separated")
    p.add_argument("--latency", default="0,0.17", help="solver seconds per call, comma-separated")
    p.add_argument("--isolation", default="auto")
    p.add_argument("--shards", type=int, default=os.cpu_count() or 2, help="K of the shards:K configuration "
                   "(0: leave it out)")
    p.add_argument("--crowd", type=int, default=0, help="idle processes to start on the host for the run")
    p.add_argument("--out", default=str(OUT))
    a = p.parse_args(argv)
    crowd = [subprocess.Popen(["sleep", "86400"]) for _ in range(a.crowd)]
    try:
        rows = _measure(a)
        host_processes = sum(name.isdigit() for name in os.listdir("/proc"))  # at the end, the crowd included
    finally:
        for c in crowd:
            c.kill()
            c.wait()
    out = {"benchmark": "harness_throughput", "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0],
                       "uid": os.geteuid(), "load_avg_start": os.getloadavg()},
           "seconds_per_point": a.seconds, "crowd": a.crowd, "host_processes": host_processes, "points": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")


def _measure(a: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for latency in [float(x) for x in a.latency.split(",")]:
        for lanes in [int(x) for x in a.lanes.split(",")]:
            spare = max(2, lanes // 2)
            confs = {"baseline": ("local", 0), "spare": ("local", spare)}
            if a.shards:
                confs["shards"] = (f"shards:{a.shards}", spare // a.shards)
            got = {name: asyncio.run(point(lanes, latency, opt, sp, a.seconds, a.isolation))
                   for name, (opt, sp) in confs.items()}
            base = got["baseline"]["runs_per_s"]
            ratios = {name: round(g["runs_per_s"] / base, 2) if base else None for name, g in got.items()}
            rows.append({**got, "ratio_runs_per_s": ratios})
            print(f"L={latency:<5} lanes={lanes:<3} " + " | ".join(
                f"{name} {g['runs_per_s']:7.2f} runs/s ({g['calls_in_flight_little']} calls in flight, trusted "
                f"{g['trusted_cpu_ms_per_run']} ms/run, workers {g['worker_cpu_ms_per_run']} ms/run) x{ratios[name]}"
                for name, g in got.items()), flush=True)
    return rows


if __name__ == "__main__":
    main()
