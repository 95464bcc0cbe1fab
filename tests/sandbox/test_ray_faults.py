"""Faults mid-run on a real local Ray cluster (``ray.cluster_utils.Cluster``: a head and a second
node, each its own raylet process) and real ``llama_cpp.server`` endpoints:

- a Ray worker node killed mid-run: its problems run again on the other node, the run completes
  with the same J and answers as the local executor, and nothing is scored as an infra error;
- a model endpoint killed mid-run (one of a pool of two): its calls are retried on the other
  server and counted as faults, and the answers equal those of a run with no fault.

Both drive the real command (``harnesslearn run --executor ray:ADDRESS --json``) in a subprocess.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from extras import needs, needs_true
from llama_server import ServerProcess, free_port, llamacpp_argv

HERE = Path(__file__).resolve().parents[1]  # tests/: the helper modules
NEEDS_RAY = needs("ray", "ray")
pytestmark = [NEEDS_RAY]

FAST_HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 2, "health_check_timeout_ms": 500}


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    client_port = free_port()
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "include_dashboard": False, "object_store_memory": 80 << 20, "_system_config": FAST_HEALTH,
        "ray_client_server_port": client_port})
    c.client_address = f"ray://127.0.0.1:{client_port}"  # type: ignore[attr-defined]
    yield c
    c.shutdown()


def start_run(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "harnesslearn.cli", "run", *args, "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "HARNESSLEARN_CACHE": "0", **env})


def finish(p: subprocess.Popen[str], timeout: float = 300) -> dict:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err[-3000:]
    lines = out.splitlines()
    assert len(lines) == 1, out[:2000]  # stdout is exactly one JSON object, whatever Ray says meanwhile
    result = json.loads(lines[0])
    result["_stderr"] = err
    return result


def wait_for(cond, what: str, p: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert p.poll() is None, f"the run ended before {what}: {p.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def answers(result: dict) -> list[tuple]:
    return [(q["id"], q["status"], q["answer"], q["score"]) for q in result["problems"]]


def test_ray_client_address_gives_the_same_answers(cluster):
    args = ["minimal", "--task", "rg:basic_arithmetic", "--solver", f"python:{HERE / 'ray_solvers.py'}:arith", "--n", "4"]
    reference = finish(start_run(args, {}))
    out = finish(start_run([*args, "--executor", cluster.client_address], {}))
    assert answers(out) == answers(reference) and out["J"] == reference["J"]
    assert out["executor"]["address"] == cluster.client_address and out["executor"]["actors"][0]["problems"] == 4


def test_a_worker_node_killed_mid_run_its_problems_run_elsewhere_with_the_same_j(cluster, tmp_path):
    node = cluster.add_node(num_cpus=1, object_store_memory=80 << 20)
    cluster.wait_for_nodes()
    args = ["minimal", "--task", "rg:basic_arithmetic", "--solver", f"python:{HERE / 'ray_solvers.py'}:slow_arith",
            "--n", "12", "--concurrency", "2"]
    reference = finish(start_run(args, {"HL_SOLVER_DELAY": "0"}))  # the local executor, no fault
    progress = tmp_path / "progress"
    progress.write_text("")
    p = start_run([*args, "--executor", f"ray:{cluster.address}"],
                  {"HL_SOLVER_DELAY": "0.5", "HL_PROGRESS": str(progress)})
    # every node holds two problems for 0.5 s a call: after the first four calls, both are mid-run
    wait_for(lambda: len(progress.read_text().splitlines()) >= 4, "the first model calls", p)
    cluster.remove_node(node, allow_graceful=False)  # SIGKILL its raylet: the node and its actor die
    out = finish(p)

    assert out["J"] == reference["J"] and 0 < out["J"] < 1
    assert answers(out) == answers(reference)
    assert out["infra_failures"] == 0 and out["completion_rate"] == 1.0
    ex = out["executor"]
    assert ex["executor"] == "ray" and ex["nodes"] == 2 and ex["redispatched"] >= 1, ex
    lost = [a for a in ex["actors"] if a["lost"]]
    assert len(lost) == 1 and "its problems are dispatched again" in out["_stderr"], out["_stderr"][-3000:]
    assert sum(a["problems"] for a in ex["actors"]) == 12


TWO_CALLS = '''
def solve(model, question):
    first = model("Question: " + question + "\\nAnswer:", max_tokens=8, temperature=0.0, stop=["\\n"])
    second = model("Question: " + question + "\\nDraft: " + first.strip() + "\\nFinal answer:", max_tokens=6,
                   temperature=0.0, stop=["\\n"])
    return second.strip()
'''


def llama(gguf: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A real server that answers a prompt the same whatever it served before: one thread, and one
    token per evaluation (llama.cpp reuses the longest cached prefix of the previous prompt, and
    evaluating the rest in a batch of another size can flip a greedy choice)."""
    port = free_port()
    server = ServerProcess(llamacpp_argv(str(gguf), port, alias="gemma", n_ctx=1024, n_threads=1,
                                         extra=["--n_batch", "1", "--n_ubatch", "1"]), port, log=log)
    server.wait_ready(120.0)
    assert server.proc is not None
    return server.proc, server.base_url


@pytest.mark.slow
@needs_true(importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("fastapi") is not None,
               "llamacpp (llama-cpp-python[server])")
def test_a_model_endpoint_killed_mid_run_its_calls_go_to_the_other_with_the_same_answers(cluster, tmp_path):
    from harnesslearn.models.local import ensure_gguf

    gguf = ensure_gguf()
    (a, url_a), (b, url_b) = llama(gguf, tmp_path / "a.log"), llama(gguf, tmp_path / "b.log")
    try:
        harness = tmp_path / "two_calls.py"
        harness.write_text(TWO_CALLS)
        args = [str(harness), "--task", "rg:basic_arithmetic", "--n", "6", "--solver",
                "openai:gemma?endpoint=completions&timeout=60&base_delay=0.2&max_delay=1"]
        reference = finish(start_run([*args, "--solver-base-url", url_a], {}))  # one server, no fault
        p = start_run([*args, "--solver-base-url", url_a, "--solver-base-url", url_b,
                       "--executor", f"ray:{cluster.address}"], {})
        # the server logs a call when its response starts, and one server thread answers one call at a time:
        # after three logged calls, at least the first two have reached the run (the third may be in transit)
        wait_for(lambda: (tmp_path / "b.log").read_text(errors="replace").count("POST /v1/completions") >= 3,
                 "server B to answer three calls", p, timeout=240)
        b.kill()  # mid-run: B has calls in flight or gets the next ones
        b.wait()
        out = finish(p)
    finally:
        for proc in (a, b):
            proc.kill()
            proc.wait()

    assert answers(out) == answers(reference) and out["J"] == reference["J"]
    assert out["infra_failures"] == 0 and all(q["status"] == "ok" for q in out["problems"])
    ms = out["model_stats"]
    eps = {e["base_url"]: e for e in ms["endpoints"]}
    assert eps[url_b]["calls"] >= 2 and eps[url_b]["faults"] >= 1 and eps[url_b]["drains"] >= 1
    assert not eps[url_b]["in_rotation"] and eps[url_a]["faults"] == 0
    assert ms["faults"] == ms["retries"] == eps[url_b]["faults"] and ms["infra_errors"] == 0
    assert eps[url_a]["calls"] + eps[url_b]["calls"] == ms["calls"] == 12
