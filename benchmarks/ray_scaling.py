"""Problems per second against the number of Ray executor actors (1, 2, 4, 8), latency-bound.

    .venv/bin/python benchmarks/ray_scaling.py [--delay 2.0] [--slots 1] [--waves 3] [--json]

The solver is a ``python:`` model (``wait_then_answer`` below) that waits a fixed time and answers,
so the rate should grow with the number of sandbox slots in use as long as the CPU keeps up. A
problem still costs about 0.12 s of CPU on these 2 cores (a fresh bwrap worker, the broker, the
uid sweeps, Ray's calls), so the defaults keep the CPU demand at 8 actors near half a core:
8 slots x 0.12 s per 2 s. The waves are synchronised (every call waits the same time), the worst
case for bursts of worker spawns. Each actor has ``--slots`` slots (and, as always, one spare
pre-started slot: ``RayConfig.spare_slots``), and each configuration runs
``--waves`` full waves (actors x slots x waves problems of ``rg:basic_arithmetic`` through the
``minimal`` seed, every problem in its own fresh sandboxed worker), after one unmeasured warm-up
wave. It prints every rate as a ratio to the 1-actor rate measured in the same run, and the
efficiency at 8 actors, rate(8) / (8 x rate(1)); the goal is at least 0.85.

One local Ray instance (``--cpus`` CPUs) holds all the actors; each reserves 0.1 CPU so that 8 fit.
Only the public API is used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

DELAY_ENV = "HL_BENCH_DELAY"


async def wait_then_answer(prompt, **params):
    """The latency-bound solver: wait ``$HL_BENCH_DELAY`` seconds (default 1), answer "0"."""
    await asyncio.sleep(float(os.environ.get(DELAY_ENV, "1.0")))
    return "0"


async def measure(actors: int, slots: int, waves: int, solver, harness, task) -> dict:
    from harnesslearn import evaluate
    from harnesslearn.sandbox import Budgets, ExecutorConfig, RayConfig, RayExecutor

    ex = RayExecutor(solver, ExecutorConfig(), RayConfig(actors=actors, slots_per_actor=slots, actor_cpus=0.1))
    budgets = Budgets(timeout_s=30)
    async with ex:
        await evaluate(harness, task, "feedback", actors * slots, 1, ex, budgets=budgets, progress=False)  # warm-up
        n = actors * slots * waves
        t0 = time.perf_counter()
        ev = await evaluate(harness, task, "score", n, 0, ex, budgets=budgets, progress=False)
        wall = time.perf_counter() - t0
    bad = {k: v for k, v in ev.status_counts().items() if k != "ok"}
    if bad:
        raise SystemExit(f"runs did not complete: {bad}")
    return {"actors": actors, "slots": actors * slots, "problems": n, "wall_s": round(wall, 3),
            "rate": n / wall, "nodes": ex.stats()["nodes"]}


async def main(args: argparse.Namespace) -> dict:
    from harnesslearn import load_harness, load_model, load_task

    os.environ[DELAY_ENV] = str(args.delay)
    solver = load_model(f"python:{Path(__file__).resolve()}:wait_then_answer", concurrency=4096)
    harness, task = load_harness("minimal"), load_task("rg:basic_arithmetic")
    rows = []
    try:
        for actors in (1, 2, 4, 8):
            row = await measure(actors, args.slots, args.waves, solver, harness, task)
            rows.append(row)
            base = rows[0]["rate"]
            row["ratio"] = row["rate"] / base
            row["efficiency"] = row["ratio"] / actors
            sys.stderr.write(f"{actors} actor(s), {row['slots']:>2} slots: {row['problems']:>3} problems in "
                             f"{row['wall_s']:6.2f} s = {row['rate']:6.2f} problems/s, x{row['ratio']:.2f} "
                             f"the 1-actor rate (efficiency {row['efficiency']:.0%})\n")
    finally:
        await solver.aclose()
    return {"delay_s": args.delay, "slots_per_actor": args.slots, "waves": args.waves, "cpus": args.cpus,
            "load_average": os.getloadavg(), "rows": rows, "efficiency_at_8": rows[-1]["efficiency"]}


if __name__ == "__main__":
    from harnesslearn.fsutil import scratch_cache

    scratch_cache("harnesslearn-bench-")  # never the user's cache: a temp one, the models linked
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay", type=float, default=2.0, help="seconds the solver waits per call")
    ap.add_argument("--slots", type=int, default=1, help="sandbox slots per actor")
    ap.add_argument("--waves", type=int, default=3, help="measured waves per configuration")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = ap.parse_args()
    import ray

    ray.init(num_cpus=args.cpus, include_dashboard=False, object_store_memory=100 << 20, log_to_driver=False,
             logging_level="ERROR")
    try:
        out = asyncio.run(main(args))
    finally:
        ray.shutdown()
    eff = out["efficiency_at_8"]
    line = (f"efficiency at 8 actors: {eff:.1%} of linear (goal >= 85%); "
            f"machine load average {out['load_average'][0]:.1f} on {os.cpu_count()} cores")
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stderr.write(line + "\n")
    else:
        sys.stdout.write(line + "\n")
