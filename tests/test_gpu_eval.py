"""benchmarks/gpu_eval.py on the CPU with a rule-based solver: the code path of the GPU benchmark (the
solver runtime, sandboxed zoo harnesses, the figures it writes), without GPU figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from extras import needs

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("engine", "model", "device", "solver_tokens_per_s", "solver_calls_per_s", "gpu_busy_fraction",
          "call_latency_p50_s", "call_latency_p95_s", "harness_runs_per_min")


def bench(out: Path, label: str, *extra: str) -> dict:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_eval.py"), "--solver",
           f"python:{ROOT / 'tests' / 'zoo_solver.py'}:six", "--minutes", "0.1", "--warmup", "2", "--drain", "5",
           "--concurrency", "4", "--families", "gcd,basic_arithmetic", "--harnesses", "minimal,interpreter_loop",
           "--n-problems", "4", "--label", label, "--out", str(out), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def test_gpu_eval_writes_every_figure_and_keeps_runs_of_other_labels(tmp_path: Path) -> None:
    out = tmp_path / "gpu_eval.json"
    run = bench(out, "a")
    assert all(k in run for k in FIELDS)
    assert run["device"] == "cpu" and run["gpu_busy_fraction"] is None  # no GPU here: said, not invented
    assert run["runs_measured"] > 0 and run["solver_calls_per_s"] > 0 and run["call_latency_p50_s"] is not None
    assert set(run["by_harness"]) == {"minimal", "interpreter_loop"}
    assert run["statuses"].get("ok", 0) == run["runs_measured"]
    # where the CPU went: the trusted side per run, the sandboxes it reaped, the host, the busiest processes
    assert run["trusted_cpu_ms_per_run"] > 0 and run["worker_cpu_ms_per_run"] > 0 and run["trusted_cores"] > 0
    assert 1 <= run["host_cores"] <= (os.cpu_count() or 1) + 0.5 and 0 < run["host_busy_cores"] <= run["host_cores"] + 0.5
    driver = run["trusted_pids"][0]
    assert run["trusted_pids"] == [driver] and any(p["pid"] == driver for p in run["cpu_top"])
    assert run["engine_cores"] == 0  # no inference server here (and the driver never counts as one)
    bench(out, "b", "--py-spy")
    spy = json.loads(out.read_text())[-1]["py_spy"]
    # py-spy is not a dependency: the JSON says it is missing, or holds the dumps where it is on PATH
    assert spy and all(("error" in d and "py-spy" in d["error"]) or "Thread" in d["dump"] or "exit" in d["dump"]
                       for d in spy)
    bench(out, "a")  # replaces the first "a", keeps "b"
    assert sorted(r["label"] for r in json.loads(out.read_text())) == ["a", "b"]


@needs("ray", "ray")
def test_gpu_eval_on_shards_counts_calls_from_the_runs_records(tmp_path: Path) -> None:
    """With shards:K the solver is called from each shard: calls and tokens still count (from the records),
    and the engine sampler says it had nothing to read (a python: solver has no /metrics)."""
    run = bench(tmp_path / "g.json", "s", "--executor", "shards:2", "--spare", "1")
    assert run["executor"] == "shards:2" and run["runs_measured"] > 0 and run["solver_calls_per_s"] > 0
    assert run["solver_stats_calls"] == 0  # the driver's own solver was never called
    assert run["engine_metric_samples"] == 0 and run["engine_running_p50"] is None


def test_gpu_eval_gives_a_served_solver_as_many_calls_in_flight_as_lanes() -> None:
    """The driver builds its own backend (cache off), out of the runtime's reach: without the lanes passed on,
    an openai: solver kept its client default of 32 calls (H200, 256 lanes: call latency p50 19 s)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gpu_eval import build_solver
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    solver = build_solver("openai:qwen?base_url=http://127.0.0.1:9/v1", "local", 256)
    assert solver.concurrency == 256
    assert build_solver("openai:qwen?base_url=http://127.0.0.1:9/v1", "shards:2", 256) == \
        "openai:qwen?base_url=http://127.0.0.1:9/v1"
