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


def _gpu_eval():  # the benchmark module, imported from its folder
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_eval
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return gpu_eval


def test_gpu_eval_spreads_calls_over_several_servers_and_sums_their_engine_counts() -> None:
    """--solver-base-url, repeated: the driver's solver is an endpoint pool over the servers (each given the
    lanes' calls), the engine sampler reads every server's /metrics and sums the running and waiting requests."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    ge = _gpu_eval()
    counts = [(3, 1), (5, 0)]

    def server(running: int, waiting: int) -> ThreadingHTTPServer:
        class H(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the handler's name
                body = (f'# HELP x\nvllm:num_requests_running{{model_name="qwen"}} {running}.0\n'
                        f'vllm:num_requests_waiting{{model_name="qwen"}} {waiting}.0\n').encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: object) -> None:
                pass
        s = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=s.serve_forever, daemon=True).start()
        return s
    servers = [server(*c) for c in counts]
    try:
        urls = [f"http://127.0.0.1:{s.server_address[1]}/v1" for s in servers]
        pool = ge.build_solver("openai:qwen", "local", 64, urls)
        assert [e.url.rstrip("/") for e in pool.endpoints] == urls and all(e.backend.concurrency == 64
                                                                           for e in pool.endpoints)
        assert ge.metrics_urls(pool) == [u.removesuffix("/v1") + "/metrics" for u in urls]
        assert ge.build_solver("openai:qwen", "shards:2", 64, urls) == "openai:qwen"  # the shards build their own
        sampler = ge.EngineSampler(ge.metrics_urls(pool), 0.05).start()
        import time
        t0 = time.time()
        while len(sampler.samples) < 3 and time.time() - t0 < 20:
            time.sleep(0.05)
        sampler.stop()
        summary = sampler.summary(t0 - 1, time.time() + 1)
        assert summary["engine_running_p50"] == 8.0 and summary["engine_waiting_p50"] == 1.0
        assert summary["engine_servers"] == 2 and summary["engine_metric_samples"] >= 3
    finally:
        for s in servers:
            s.shutdown()


def test_gpu_eval_refuses_base_urls_without_an_openai_solver(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_eval.py"), "--solver", "python:tests/zoo_solver.py:six",
           "--solver-base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "g.json")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--solver-base-url goes with an openai: --solver" in p.stderr
    assert not (tmp_path / "g.json").exists()


def test_collapsed_top_ranks_functions_by_own_and_total_samples() -> None:
    raw = ("main (a.py:1);step (core.py:10);schedule (sched.py:5) 60\n"
           "main (a.py:1);step (core.py:10);sample (sampler.py:7) 30\n"
           "main (a.py:1);idle (core.py:20) 10\n"
           "garbage line\n")
    top = _gpu_eval().collapsed_top(raw, top=3)
    assert top["samples"] == 100
    assert top["self"] == [("schedule (sched.py:5)", 0.6), ("sample (sampler.py:7)", 0.3), ("idle (core.py:20)", 0.1)]
    assert top["total"][:2] == [("main (a.py:1)", 1.0), ("step (core.py:10)", 0.9)]
    assert _gpu_eval().collapsed_top("") == {"samples": 0, "self": [], "total": []}


def test_py_spy_dumps_an_engine_core_and_profiles_where_its_time_goes() -> None:
    """--py-spy on a stand-in for vLLM's engine core (a process whose command line names it, spinning in one
    function): its dump, and a profile of a few seconds whose top function is the spin. Needs py-spy (the dev
    extra installs it; the device's bundle D carries it)."""
    import shutil
    import time

    ge = _gpu_eval()
    beside = Path(sys.executable).parent / "py-spy"
    if shutil.which("py-spy") is None and not beside.is_file():
        import pytest
        pytest.skip("py-spy is not installed (pip install -e .[dev])")
    spin = subprocess.Popen([sys.executable, "-c", "# EngineCore stand-in\ndef spin():\n    while True:\n"
                             "        pass\nspin()"])
    try:
        time.sleep(0.5)
        out = ge.py_spy([], time.time() + 5)
    finally:
        spin.kill()
        spin.wait()
    mine = [d for d in out if d.get("pid") == spin.pid]
    dump, rec = (next(d for d in mine if "dump" in d), next(d for d in mine if "record_s" in d))
    if dump["dump"].startswith("exit ") and ("ermission" in dump["dump"] or "ptrace" in dump["dump"]):
        import pytest
        pytest.skip(f"py-spy may not attach to a process on this machine (no ptrace): {dump['dump'][:200]}")
    assert "spin (<string>:" in dump["dump"]
    # py-spy names a frame by its line: the loop's samples fall on its two lines ("while" and "pass")
    in_spin = sum(share for frame, share in rec["self"] if frame.startswith("spin (<string>:"))
    assert rec["samples"] > 50 and rec["self"][0][0].startswith("spin (<string>:") and in_spin > 0.9


def test_gpu_eval_refuses_a_base_url_in_the_spec_beside_solver_base_url(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_eval.py"), "--solver", "openai:qwen?base_url=http://a:1/v1",
           "--solver-base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "g.json")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "no base_url= in it" in p.stderr and "Traceback" not in p.stderr


def test_gpu_eval_writes_its_row_before_the_runtime_closes(tmp_path: Path, monkeypatch, capsys) -> None:
    """Closing a couple of hundred sandbox slots can outlast what is left of a caller's ``timeout``: stretch 11's
    ``timeout 62`` ended two runs after their drain and before their rows were written. The row is on disk when
    the runtime begins to close, and the JSON printed at the end is that row."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_eval

    out, seen = tmp_path / "g.json", []
    close = gpu_eval.SolverRuntime.__aexit__

    async def aexit(self, *exc):
        seen.append(json.loads(out.read_text()) if out.is_file() else None)
        return await close(self, *exc)

    monkeypatch.setattr(gpu_eval.SolverRuntime, "__aexit__", aexit)
    gpu_eval.main(["--solver", f"python:{ROOT / 'tests' / 'zoo_solver.py'}:six", "--minutes", "0.05", "--warmup", "1",
                   "--drain", "3", "--concurrency", "2", "--families", "gcd", "--harnesses", "minimal",
                   "--n-problems", "2", "--label", "early", "--out", str(out)])
    assert len(seen) == 1 and seen[0] is not None, "no row on disk when the runtime began to close"
    assert [r["label"] for r in seen[0]] == ["early"] and seen[0][0]["runs_measured"] > 0
    assert json.loads(out.read_text()) == seen[0] and json.loads(capsys.readouterr().out) == seen[0][0]
