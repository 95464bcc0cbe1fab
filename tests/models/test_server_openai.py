"""The real thing: a real ``llama_cpp.server`` process serving Gemma 3 270M on a loopback port,
reached through ``openai:``, directly and through a fault-injecting proxy, and through
``harnesslearn run``. One server per module; completions are kept short (2 CPU cores)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys

import pytest
from extras import needs_true
from fault_proxy import FaultProxy
from llama_server import llama_server

from harnesslearn.models import GenerateRequest, load_model

pytestmark = [
    pytest.mark.slow,
    needs_true(importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("fastapi") is not None,
               "llamacpp (llama-cpp-python[server])"),
]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    from harnesslearn.models.embedded import ensure_gguf

    with llama_server(ensure_gguf(), log=tmp_path_factory.mktemp("llama") / "server.log") as url:
        yield url


def host_port(url: str) -> tuple[str, int]:
    hp = url.split("//", 1)[1].split("/", 1)[0]
    host, port = hp.rsplit(":", 1)
    return host, int(port)


def run(model, *reqs):
    async def main():
        try:
            return await asyncio.gather(*(model.generate(r) for r in reqs))
        finally:
            await model.aclose()

    return asyncio.run(main())


def test_real_server_completions(server_url):
    m = load_model("openai:gemma", base_url=server_url, cache=False)
    (c,) = run(m, GenerateRequest("The capital of France is", max_tokens=6, temperature=0.0))
    assert c.text.strip() and any(ch.isalpha() for ch in c.text)
    assert c.prompt_tokens > 0 and 0 < c.completion_tokens <= 6
    s = m.stats()
    assert (s["calls"], s["faults"]) == (1, 0)


def test_real_server_behind_fault_proxy(server_url):
    schedule = ["500", None, "drop", "stall", None, "500"]
    p = FaultProxy(host_port(server_url), schedule=schedule, stall_s=60).start()
    try:
        m = load_model("openai:gemma?timeout=8&base_delay=0.05&max_delay=0.2", base_url=p.url, cache=False,
                       concurrency=2)
        outs = run(m, *(GenerateRequest(f"Count: {i}, {i + 1},", max_tokens=4) for i in range(4)))
        assert all(c.text for c in outs)
        s = m.stats()
        injected = p.counts["500"] + p.counts["drop"] + p.counts["stall"]
        # a forwarded request can also time out when the CPU is busy: that is a fault too
        assert injected == 4 and s["faults"] >= injected and s["retries"] == s["faults"]
        assert s["faults"] == sum(len(c.meta["faults"]) for c in outs)
        assert (s["calls"], s["infra_errors"]) == (4, 0)
    finally:
        p.stop()


def _cli_run(solver_url: str, tmp_path, spec: str = "openai:gemma") -> tuple[dict, str]:
    env = {**os.environ, "HARNESSLEARN_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run(
        [sys.executable, "-m", "harnesslearn.cli", "run", "minimal", "--task", "rg:basic_arithmetic",
         "--solver", spec, "--solver-base-url", solver_url, "--n", "4", "--json"],
        capture_output=True, text=True, env=env, timeout=400,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout), r.stderr


def test_cli_run_against_real_server(server_url, tmp_path):
    out, _ = _cli_run(server_url, tmp_path)
    assert out["n"] == 4 and len(out["problems"]) == 4
    assert all(p["status"] == "ok" and p["calls"] >= 1 and p["tokens"] > 0 for p in out["problems"])
    assert out["completion_rate"] == 1.0


def test_cli_run_through_fault_proxy(server_url, tmp_path):
    """Faults are retried by the backend: the run completes, every problem has a real
    status (never scored 0 because of a fault), and the injected faults were all seen."""
    p = FaultProxy(host_port(server_url), schedule=["500", "drop", None, "stall", "500"], stall_s=60).start()
    try:
        out, _ = _cli_run(p.url, tmp_path, "openai:gemma?timeout=8&base_delay=0.05&max_delay=0.2")
    finally:
        p.stop()
    assert p.counts["500"] == 2 and p.counts["drop"] == 1 and p.counts["stall"] == 1
    assert out["completion_rate"] == 1.0
    assert all(p_["status"] == "ok" and p_["calls"] >= 1 for p_ in out["problems"])
    assert out["infra_failures"] == 0  # every fault was absorbed by the backend's retries
