"""Throughput of the real workload: sandboxed harness runs against one solver engine.

The minimal seed and the reasoning zoo harnesses, on 4 Reasoning Gym families, with ``--concurrency``
(192 by default) harness runs in flight at all times for ``--minutes``: the shape of SFT-data
generation, GRPO rewards and evaluation (short, dependent solver calls from many programs). Each
engine runs in the same invocation or is appended to the same JSON file, so engines compare under
the same workload:

    # on the H200 (experiments/results/qwen/COMMANDS.md: the model and wheels there, the solver server)
    python3 benchmarks/gpu_eval.py --engine vllm --model DIR --minutes 3
    python3 benchmarks/gpu_eval.py --engine hf --model DIR --minutes 3
    # against the running solver server, the trusted side in K Ray shards (bundle D: setup.sh ray)
    python3 benchmarks/gpu_eval.py --solver 'openai:qwen?base_url=http://127.0.0.1:8000/v1' --executor shards:4 \
        --concurrency 256 --minutes 3 --label h200-shards4
    # several servers of the model on the one GPU (HL_SOLVER_PORTS="8000 8001" solver.sh start ...), the calls
    # spread over them by harnesslearn's endpoint pool (least outstanding requests), their /metrics summed
    python3 benchmarks/gpu_eval.py --solver openai:qwen $(bash experiments/device/solver.sh urls) --executor shards:4 \
        --concurrency 256 --minutes 3 --label h200-shards4-2servers
    # anywhere, as a dry run of the code path (a rule-based solver; no GPU figures)
    python3 benchmarks/gpu_eval.py --solver python:tests/zoo_solver.py:six --minutes 0.2 --concurrency 8 --out /tmp/g.json

Writes (or updates: one run per engine, model, device and ``--label``) ``benchmarks/results/gpu_eval.json``, a list
of runs with ``engine``, ``model``, ``device``, ``solver_tokens_per_s`` (generated tokens),
``solver_calls_per_s``, ``gpu_busy_fraction`` (mean utilisation sampled every second),
``call_latency_p50_s``/``p95_s`` (one solver call as the harness sees it, queueing included),
``harness_runs_per_min``, the engine's own count of requests running and waiting (vLLM's ``/metrics``,
sampled every second: p50 and max), and the mean score of each harness (a check that the solver answers).
Where the CPU went in the measured window (``harnesslearn.procstat``, two snapshots of /proc; rows written since
2026-12-05): ``trusted_cpu_ms_per_run`` and ``trusted_cores`` (this process and the shards, ``trusted_pids``,
all threads), ``worker_cpu_ms_per_run`` (the sandboxes they reaped), ``engine_cores`` (the inference server's
processes on this host, found by command line: ``ENGINE_CMD``), ``host_busy_cores`` of ``host_cores``, and
``cpu_top``, the processes alive at both ends that used the most; ``--py-spy`` adds a ``py-spy dump`` of each
trusted and server process halfway through, and a 10-second ``py-spy record`` of each engine-core process summed
up by function (its own CPU then counts as a worker's).
Token and call counts come from the runs' call records, so ``--executor shards:K`` (the solver called
from each shard) counts the same way as ``local``.
The response cache is off: every call reaches the engine. The first ``--warmup`` seconds are not
measured (an engine's first batches compile kernels).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harnesslearn import procstat
from harnesslearn.evaluation import score_records, task_tools
from harnesslearn.fsutil import atomic_write_text
from harnesslearn.gpu import GpuSampler, PeriodicSampler, device_name
from harnesslearn.harness import load_harness
from harnesslearn.models import load_model
from harnesslearn.models.common import split_spec
from harnesslearn.runtime import SolverRuntime, served_limit
from harnesslearn.sandbox import Budgets, ExecutorConfig
from harnesslearn.tasks import load_task
from harnesslearn.zoo import build as zoo_build

FAMILIES = ("gcd", "basic_arithmetic", "word_sorting", "letter_counting")
HARNESSES = ("minimal", "interpreter_loop", "reason_extract", "self_consistency", "verify_retry", "few_shot")
ENGINES = {  # engine -> solver spec for a transformers folder
    "vllm": "vllm:{model}?max_num_seqs=512&gpu_memory_utilization=0.85&log={log}",
    "hf": "hf:{model}?max_batch=256",  # the in-process dynamic batcher (static batches)
    "hf-static-cache": "hf:{model}?max_batch=256&static_cache=true",
}


def log(msg: str) -> None:
    print(f"[gpu_eval {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def build_solver(spec: str, executor: str, lanes: int, base_urls: list[str] | None = None) -> Any:
    """The driver's solver: its spec for shards (each builds its own), else a backend built here with the cache
    off, so the runtime's ``served_limit`` does not reach it: a served solver gets as many calls in flight as
    there are lanes (the openai: default of 32 held the H200 run of 2026-12-05 at 256 lanes to p50 19 s).
    ``base_urls``: several servers of one model (an endpoint pool; each of them gets that many calls)."""
    if executor != "local":
        return spec
    return load_model(spec, base_url=base_urls or None, cache=False, concurrency=served_limit(spec, lanes))


async def measure(a: argparse.Namespace, spec: str,
                  save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The figures of one measurement. ``save`` gets them as soon as the drain ends, before the runtime closes:
    closing 200-odd sandbox slots can take longer than what is left of a caller's ``timeout`` (stretch 11 lost
    two rows that way)."""
    tasks = {f: load_task(f"rg:{f}") for f in a.families}
    problems = {f: t.problems("test", a.n_problems, a.seed) for f, t in tasks.items()}
    harnesses = {(h, f): (load_harness("minimal") if h == "minimal" else zoo_build(h, tasks[f], a.seed))
                 for h in a.harnesses for f in a.families}
    jobs = [(h, f, p) for (h, f) in harnesses for p in problems[f]]
    random.Random(a.seed).shuffle(jobs)
    budgets = Budgets(timeout_s=a.timeout, max_calls=16, max_tokens=8192)
    # shards:K rebuild the solver in each shard from its spec; their response cache is off through the environment
    os.environ["HARNESSLEARN_CACHE"] = "0"
    solver = build_solver(spec, a.executor, a.concurrency, a.base_urls)
    sampler = GpuSampler(1.0).start()
    done: list[dict[str, Any]] = []
    t_open = time.time()
    pool = {"base_url": a.base_urls} if a.base_urls and a.executor != "local" else {}  # the shards build the pool
    async with SolverRuntime(solver, executor=a.executor, concurrency=a.concurrency, verbose=True,
                             config=ExecutorConfig(isolation=a.isolation, spare_slots=a.spare), **pool) as rt:
        solver = rt.solver
        engine = EngineSampler(metrics_urls(rt.solver), 1.0).start()
        assert rt.executor is not None
        opened_s = time.time() - t_open
        log(f"runtime open in {opened_s:.1f} s ({rt.timings}); {len(jobs)} distinct runs, cycling")
        t_start = time.time()
        t_warm, t_end = t_start + a.warmup, t_start + a.warmup + a.minutes * 60
        stats0: dict[str, Any] = {}
        next_job = iter(range(10**9))
        trusted = trusted_pids(rt.executor.stats())
        cpu: dict[str, procstat.Snapshot] = {}
        dumps: list[asyncio.Task[list[dict[str, Any]]]] = []

        async def lane() -> None:
            while time.time() < t_end:
                h, f, p = jobs[next(next_job) % len(jobs)]
                t0 = time.time()
                recs = await rt.executor.run(harnesses[h, f].source, [p], task_tools(tasks[f]), budgets,  # type: ignore[union-attr]
                                             settle=False)
                res = score_records(tasks[f], [p], recs)[0]
                done.append({"harness": h, "family": f, "t0": t0, "t1": time.time(), "status": res.status,
                             "score": res.score, "calls": [(c.latency_s, c.completion_tokens, c.prompt_tokens)
                                                           for c in recs[0].calls if c.kind == "model"]})

        async def snapshot() -> None:
            await asyncio.sleep(max(0.0, t_warm - time.time()))
            stats0.update(solver.stats())
            cpu["0"] = procstat.snapshot()  # ~10 ms of /proc; on the loop, so that it is taken now
            log(f"warm-up over ({len(done)} runs done); measuring for {a.minutes:g} min")
            t_dump = t_warm + a.minutes * 30 if a.py_spy else float("inf")
            while time.time() < t_end:
                if time.time() >= t_dump:  # in a thread, beside the lanes: the window goes on meanwhile
                    t_dump = float("inf")
                    dumps.append(asyncio.ensure_future(asyncio.to_thread(py_spy, trusted, t_end)))
                await asyncio.sleep(min(30.0, max(0.0, t_end - time.time()), max(0.0, t_dump - time.time())))
                window = [r for r in done if r["t1"] >= t_warm]
                log(f"{len(window)} runs measured, {len(done)} in all")

        lanes = [asyncio.ensure_future(lane()) for _ in range(a.concurrency)]
        await snapshot()
        stats1 = solver.stats()
        t_stop = time.time()
        cpu["1"] = procstat.snapshot()
        _, pending = await asyncio.wait(lanes, timeout=a.drain)
        for t in pending:
            t.cancel()
        await asyncio.gather(*lanes, return_exceptions=True)
        log(f"stopped: {len(pending)} runs in flight cancelled after a {a.drain:g} s drain")
        engine.stop()
        sampler.stop()
        span = t_stop - t_warm
        window = [r for r in done if t_warm <= r["t1"] <= t_stop]
        lat = [c[0] for r in window for c in r["calls"]]
        # counted from the runs' own call records (the driver's solver does not see a shard's calls)
        gen = sum(c[1] or 0 for r in window for c in r["calls"])
        calls = sum(len(r["calls"]) for r in window)
        prompt = sum(c[2] or 0 for r in window for c in r["calls"])
        by_h: dict[str, Any] = {}
        for h in a.harnesses:
            rs = [r for r in done if r["harness"] == h and r["score"] is not None]
            by_h[h] = {"runs": len(rs), "mean_score": round(statistics.fmean(r["score"] for r in rs), 3) if rs else None,
                       "ok": sum(r["status"] == "ok" for r in rs)}
        statuses: dict[str, int] = {}
        for r in window:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        figures = {
            "solver_tokens_per_s": round(gen / span, 1), "prompt_tokens_per_s": round(prompt / span, 1),
            "solver_calls_per_s": round(calls / span, 2),
            **sampler.busy(t_warm, t_stop),
            "call_latency_p50_s": pct(lat, 0.5), "call_latency_p95_s": pct(lat, 0.95),
            "harness_runs_per_min": round(len(window) / span * 60, 1),
            "runs_measured": len(window), "runs_total": len(done), "statuses": statuses,
            "measured_s": round(span, 1), "warmup_s": a.warmup, "runtime_open_s": round(opened_s, 1),
            "solver_calls_measured": calls, "generated_tokens_measured": gen,
            "by_harness": by_h, "executor": a.executor, "spare_slots": a.spare,
            "solver_stats_calls": stats1.get("calls", 0) - stats0.get("calls", 0),  # the driver's solver only
            **engine.summary(t_warm, t_stop),
            **cpu_summary(cpu["0"], cpu["1"], trusted, len(window)),
            **({"py_spy": [d for task in dumps for d in await task]} if a.py_spy else {}),
        }
        if save is not None:
            save(figures)
    return figures


# the inference server's processes (vLLM's API server, its EngineCore; the device's serve_solver.py), by command line
ENGINE_CMD = ("vllm.entrypoints", "vllm serve", "serve_solver.py", "VLLM::", "EngineCore")


def trusted_pids(stats: dict[str, Any]) -> list[int]:
    """This process and the executor's actors on this host (the shards), whose CPU is the trusted side's."""
    import socket

    here = socket.gethostname()
    return [os.getpid(), *(int(x["pid"]) for x in stats.get("actors", [])
                           if x.get("pid") and x.get("host", here) == here)]


def cpu_summary(c0: procstat.Snapshot, c1: procstat.Snapshot, trusted: list[int], runs: int) -> dict[str, Any]:
    """Where the CPU went between the snapshots: the trusted processes per run (their own threads; the sandboxes
    they reaped, and py-spy when asked for), the inference server's processes (the trusted ones never), the host,
    and the busiest processes."""
    own, reaped = procstat.used(c0, c1, trusted)
    span = max(c1.t - c0.t, 1e-9)

    def per_run(s: float) -> float | None:
        return round(1000 * s / runs, 2) if runs else None

    return {"trusted_pids": trusted, "trusted_cpu_ms_per_run": per_run(own), "worker_cpu_ms_per_run": per_run(reaped),
            "trusted_cores": round(own / span, 2), "cpu_window_s": round(span, 1),
            **procstat.between(c0, c1, top=20, groups={"engine": ENGINE_CMD}, exclude=tuple(trusted))}


def collapsed_top(raw: str, top: int = 15) -> dict[str, Any]:
    """py-spy's ``--format raw`` (one ``frame;frame;...;leaf COUNT`` line per distinct stack) -> the samples, and
    the functions that held the most of them: ``self`` (the leaf, where the time is spent) and ``total`` (anywhere
    on the stack), each as (frame, share of the samples)."""
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    n = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        frames = stack.split(";")
        n += c
        own[frames[-1]] = own.get(frames[-1], 0) + c
        for f in set(frames):
            incl[f] = incl.get(f, 0) + c

    def best(d: dict[str, int]) -> list[tuple[str, float]]:
        return [(f, round(k / n, 3)) for f, k in sorted(d.items(), key=lambda x: -x[1])[:top]] if n else []
    return {"samples": n, "self": best(own), "total": best(incl)}


def py_spy(trusted: list[int], t_end: float) -> list[dict[str, Any]]:
    """``py-spy dump --nonblocking`` (the process is not paused) of the trusted processes and the inference
    server's, the first 40 lines of each, each bounded by what is left of the window (at least 5 s); and, beside
    them, a ``py-spy record`` of each engine-core process (vLLM's ``EngineCore``: one core of it capped the
    decode loop in stretch 9) for up to 10 s at 100 Hz, summarised by ``collapsed_top``; one entry with the
    reason where py-spy is missing."""
    import shutil
    import subprocess
    import tempfile

    beside = Path(sys.executable).parent / "py-spy"  # installed into this interpreter's environment (the dev extra)
    exe = shutil.which("py-spy") or (str(beside) if beside.is_file() else None)
    if exe is None:
        return [{"error": "py-spy is not installed (bundle D: experiments/device/pack.sh)"}]
    snap = procstat.snapshot()

    def cmd_of(pid: int) -> str:
        k = snap.key(pid)
        return snap.cmd.get(k, "") if k else ""
    engine = [k[0] for k, cmd in snap.cmd.items()
              if k[0] not in trusted and any(n in cmd for n in ENGINE_CMD) and "py-spy" not in cmd]
    cores = [pid for pid in engine if "EngineCore" in cmd_of(pid)]
    seconds = int(max(3.0, min(10.0, t_end - time.time() - 2)))
    tmp = Path(tempfile.mkdtemp(prefix="pyspy-"))
    records: dict[int, subprocess.Popen[str]] = {}
    out: list[dict[str, Any]] = []
    try:
        for pid in cores:  # stderr to a file: a chatty py-spy never blocks on a full pipe while the dumps run
            with open(tmp / f"{pid}.err", "w") as err_file:
                records[pid] = subprocess.Popen([exe, "record", "--pid", str(pid), "--duration", str(seconds), "--rate",
                                                 "100", "--format", "raw", "--nonblocking", "--output",
                                                 str(tmp / f"{pid}.txt")],
                                                stdout=subprocess.DEVNULL, stderr=err_file, text=True)
        for pid in [*trusted, *engine]:
            try:
                p = subprocess.run([exe, "dump", "--nonblocking", "--pid", str(pid)], capture_output=True, text=True,
                                   timeout=max(5.0, min(30.0, t_end - time.time())))
                text = p.stdout if p.returncode == 0 else f"exit {p.returncode}: {p.stderr.strip()[-300:]}"
            except (OSError, subprocess.TimeoutExpired) as e:
                text = f"failed: {e}"
            out.append({"pid": pid, "cmd": cmd_of(pid)[:160], "dump": "\n".join(text.splitlines()[:40])})
        for pid, proc in records.items():
            try:
                proc.wait(timeout=seconds + 20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            f = tmp / f"{pid}.txt"
            err = (tmp / f"{pid}.err").read_text(errors="replace").strip()[-300:]
            rec = collapsed_top(f.read_text()) if f.is_file() else {"error": f"exit {proc.returncode}: {err}"}
            out.append({"pid": pid, "cmd": cmd_of(pid)[:160], "record_s": seconds, **rec})
    finally:
        for proc in records.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def metrics_urls(solver: Any) -> list[str]:
    """The engines' Prometheus endpoints (vLLM serves ``/metrics`` beside ``/v1``): the solver's URL, or each
    endpoint's of a pool; none where the solver has no URL."""
    inner = getattr(solver, "inner", solver)  # a cached backend wraps the client
    bases = ([e.url for e in inner.endpoints] if hasattr(inner, "endpoints")
             else [getattr(inner, "base_url", None)])
    return [b.rstrip("/").removesuffix("/v1") + "/metrics" for b in bases if isinstance(b, str)]


class EngineSampler(PeriodicSampler):
    """Reads vLLM's ``vllm:num_requests_running`` and ``..._waiting`` every ``every`` seconds in a thread, summed
    over the servers (several engines behind an endpoint pool); a tick where one does not answer is dropped."""

    def __init__(self, urls: list[str], every: float) -> None:
        super().__init__(every, "engine-sampler")
        self.urls = list(urls)
        self.samples: list[tuple[float, float, float]] = []  # (time, running, waiting)

    def ready(self) -> bool:
        return bool(self.urls)

    def _run(self) -> None:
        import http.client
        import re
        import urllib.request

        pat = {k: re.compile(rf"^vllm:num_requests_{k}(?:{{[^}}]*}})?\s+([0-9.eE+-]+)", re.M)
               for k in ("running", "waiting")}
        while not self._stop.wait(self.interval):
            try:
                texts = [urllib.request.urlopen(u, timeout=2).read().decode()  # noqa: S310 - our own servers
                         for u in self.urls]
            except (OSError, http.client.HTTPException, UnicodeDecodeError):  # a cut answer too: not the thread's end
                continue
            got = {k: sum(float(x) for t in texts for x in p.findall(t)) for k, p in pat.items()}
            self.samples.append((time.time(), got["running"], got["waiting"]))

    def summary(self, t0: float, t1: float) -> dict[str, Any]:
        run = [r for t, r, _ in self.samples if t0 <= t <= t1]
        wait = [w for t, _, w in self.samples if t0 <= t <= t1]
        return {"engine_running_p50": pct(run, 0.5), "engine_running_max": max(run) if run else None,
                "engine_waiting_p50": pct(wait, 0.5), "engine_metric_samples": len(run), "engine_servers": len(self.urls)}


def versions() -> dict[str, str]:
    out = {}
    for mod in ("torch", "transformers", "vllm"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - absent engines are simply not listed
            pass
    return out


def main(argv: list[str] | None = None) -> None:
    from harnesslearn.fsutil import scratch_cache

    scratch_cache("harnesslearn-bench-")  # never the user's cache: a temp one, the models linked
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=sorted(ENGINES), help="engine for --model (a transformers folder)")
    p.add_argument("--model", help="transformers folder of the solver (Qwen2.5-Coder-1.5B-Instruct)")
    p.add_argument("--model-name", default="qwen2.5-coder-1.5b-instruct", help="how the model is named in the results")
    p.add_argument("--solver", help="any solver spec instead of --engine/--model (dry runs)")
    p.add_argument("--solver-base-url", dest="base_urls", action="append", default=None, metavar="URL",
                   help="repeated: several servers of the --solver openai: model, the calls spread over them "
                   "(harnesslearn's endpoint pool; experiments/device/solver.sh urls)")
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--warmup", type=float, default=20.0, help="seconds before measuring starts")
    p.add_argument("--drain", type=float, default=20.0, help="seconds to let runs in flight finish at the end")
    p.add_argument("--concurrency", type=int, default=192, help="harness runs in flight")
    p.add_argument("--families", type=lambda s: s.split(","), default=list(FAMILIES))
    p.add_argument("--harnesses", type=lambda s: s.split(","), default=list(HARNESSES))
    p.add_argument("--n-problems", type=int, default=48, help="test-split problems per family (cycled)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0, help="solve() limit, not counting model waits")
    p.add_argument("--isolation", default="auto")
    p.add_argument("--executor", default="local", help="local | shards:K (K trusted processes; needs an openai: or "
                   "python: --solver, e.g. the server of experiments/device/solver.sh)")
    p.add_argument("--spare", type=int, default=0, help="spare sandbox slots beyond --concurrency (per shard: split)")
    p.add_argument("--log-dir", default="/tmp", help="where an engine's server writes its log")
    p.add_argument("--py-spy", action="store_true", help="halfway through, a py-spy dump of the trusted processes "
                   "and the inference server's, and a 10 s profile of each engine core, into the JSON (py-spy from "
                   "bundle D on the device)")
    p.add_argument("--label", default="", help="tells apart runs of one engine, model and device (kept side by side)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "gpu_eval.json"))
    a = p.parse_args(argv)
    if a.solver:
        spec, engine = a.solver, a.solver.partition(":")[0]
    elif a.engine and a.model:
        spec, engine = ENGINES[a.engine].format(model=a.model, log=f"{a.log_dir}/vllm-server.log"), a.engine
    else:
        p.error("give --engine and --model, or --solver")
    if a.base_urls and not (a.solver and engine == "openai" and "base_url" not in split_spec(a.solver)[2]):
        p.error("--solver-base-url goes with an openai: --solver (no base_url= in it)")
    log(f"engine {engine}: {spec}")
    t0, out, row = time.time(), Path(a.out), {}

    def save(figures: dict[str, Any]) -> None:  # the row, on disk before the runtime closes
        row.update({"engine": engine, "label": a.label, "model": a.model_name if not a.solver else a.solver,
                    "device": device_name(), "solver_spec": spec, "solver_base_urls": a.base_urls,
                    "concurrency": a.concurrency, "minutes": a.minutes, "families": a.families,
                    "harnesses": a.harnesses, "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                    "versions": versions(), **figures, "wall_s": round(time.time() - t0, 1)})
        runs = json.loads(out.read_text()) if out.is_file() else []
        key = ("engine", "model", "device", "label")  # a run per engine, model, device and label (older rows stay)
        runs = [r for r in runs if tuple(r.get(k, "") for k in key) != tuple(row[k] for k in key)]
        atomic_write_text(out, json.dumps([*runs, row], indent=1) + "\n")
        keys = ("solver_tokens_per_s", "solver_calls_per_s", "gpu_busy_fraction", "call_latency_p50_s",
                "call_latency_p95_s", "harness_runs_per_min")
        log("result: " + ", ".join(f"{k} {row[k]}" for k in keys) + f" -> {out} (closing the runtime)")

    asyncio.run(measure(a, spec, save))
    print(json.dumps(row))


if __name__ == "__main__":
    main()
