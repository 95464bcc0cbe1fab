"""A pool of OpenAI-compatible endpoints (``openai:`` with several base URLs): least-outstanding
routing, failing endpoints drained and their calls retried elsewhere, per-endpoint counts.
Fast: in-process fake servers (the real ``llama_cpp.server`` test is in test_ray_faults.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest
from fault_proxy import FakeOpenAIServer, FaultProxy
from llama_server import free_port

from harnesslearn.errors import InfraError, UserError
from harnesslearn.models import GenerateRequest, load_model
from harnesslearn.models.openai_compat import OpenAIBackend
from harnesslearn.models.pool import EndpointPool

FAST = {"base_delay": 0.05, "max_delay": 0.2, "cache": False}


class SlowServer(FakeOpenAIServer):
    """The fake server, answering each request after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def _handle(self, reader, writer):
        await asyncio.sleep(self.delay)
        await super()._handle(reader, writer)


@pytest.fixture
def servers():
    started: list[FakeOpenAIServer] = []

    def start(delay: float = 0.0) -> FakeOpenAIServer:
        s = SlowServer(delay).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there: connection refused


def run(model, reqs):
    async def main():
        try:
            return await asyncio.gather(*(model.generate(r) for r in reqs))
        finally:
            await model.aclose()

    return asyncio.run(main())


def reqs(n: int) -> list[GenerateRequest]:
    return [GenerateRequest(f"question {i}", max_tokens=4) for i in range(n)]


def test_a_list_of_base_urls_builds_a_pool_and_one_url_does_not(servers):
    a, b = servers(), servers()
    pool = load_model("openai:gem", base_url=[a.url, b.url], cache=False)
    assert isinstance(pool, EndpointPool) and [e.url for e in pool.endpoints] == [a.url, b.url]
    assert isinstance(load_model("openai:gem", base_url=[a.url], cache=False), OpenAIBackend)
    with pytest.raises(UserError):
        load_model(f"openai:gem?base_url={a.url}", base_url=[a.url, b.url], cache=False)
    with pytest.raises(UserError):
        load_model("python:tests/run_cli_solver.py:wrong", base_url=[a.url, b.url])


def test_least_outstanding_routing_sends_most_calls_to_the_fast_server(servers):
    slow, fast = servers(0.4), servers(0.0)
    pool = load_model("openai:gem", base_url=[slow.url, fast.url], concurrency=1, **FAST)
    outs = run(pool, reqs(16))
    assert all(c.text.startswith("echo:") for c in outs)
    per = {e["base_url"]: e["calls"] for e in pool.stats()["endpoints"]}
    assert per[slow.url] + per[fast.url] == 16
    assert per[fast.url] >= 12, per  # the slow server holds one call for 0.4 s while the fast one serves the rest
    assert {c.meta["endpoint"] for c in outs} == {slow.url, fast.url}


def test_a_dead_endpoint_is_drained_and_its_calls_retried_elsewhere(servers):
    live, dead = servers(0.02), dead_url()
    pool = load_model("openai:gem", base_url=[dead, live.url], **FAST)
    outs = run(pool, reqs(12))
    assert len(outs) == 12 and all(c.text.startswith("echo:") for c in outs)
    s = pool.stats()
    ep = {e["base_url"]: e for e in s["endpoints"]}
    assert ep[dead]["calls"] == 0 and ep[dead]["faults"] >= 1 and ep[dead]["drains"] >= 1
    assert not ep[dead]["in_rotation"] and "Connection" in (ep[dead]["last_fault"] or "")
    assert ep[live.url]["calls"] == 12 and ep[live.url]["faults"] == 0
    # every failed attempt is an infrastructure fault retried elsewhere: never a failed call
    assert s["faults"] == ep[dead]["faults"] == s["retries"] and s["infra_errors"] == 0 and s["calls"] == 12
    assert sum(len(c.meta["faults"]) for c in outs) == s["faults"]


def test_a_drained_endpoint_is_probed_again_after_its_cool_down(servers):
    a, b = servers(), servers()
    flaky = FaultProxy(("127.0.0.1", a.port), schedule=["500"]).start()  # its first request fails, then it is fine
    try:
        pool = load_model("openai:gem", base_url=[flaky.url, b.url], **FAST)

        async def main():
            try:
                first = await pool.generate(GenerateRequest("first", max_tokens=4))
                await asyncio.sleep(0.2)  # longer than the first cool-down (base_delay)
                later = [await pool.generate(GenerateRequest(f"later {i}", max_tokens=4)) for i in range(4)]
                return first, later
            finally:
                await pool.aclose()

        first, later = asyncio.run(main())
    finally:
        flaky.stop()
    ep = {e["base_url"]: e for e in pool.stats()["endpoints"]}
    assert first.meta["faults"] and first.meta["endpoint"] == b.url  # retried on the other server
    assert ep[flaky.url]["in_rotation"] and ep[flaky.url]["calls"] >= 1 and ep[flaky.url]["drains"] == 1
    assert {c.meta["endpoint"] for c in later} == {flaky.url, b.url}


def test_every_endpoint_dead_is_an_infra_error_after_the_retries():
    pool = load_model("openai:gem?max_retries=3", base_url=[dead_url(), dead_url()], **FAST)
    t0 = time.monotonic()
    with pytest.raises(InfraError, match="4 attempts over 2 endpoints"):
        run(pool, reqs(1))
    assert time.monotonic() - t0 < 10
    s = pool.stats()
    assert (s["faults"], s["retries"], s["infra_errors"], s["calls"]) == (4, 3, 1, 0)


def test_cli_run_with_repeated_solver_base_url_reports_each_endpoint(servers, tmp_path):
    a, b = servers(0.01), servers(0.01)
    env = {**os.environ, "HARNESSLEARN_CACHE": "0"}
    r = subprocess.run(
        [sys.executable, "-m", "harnesslearn.cli", "run", "minimal", "--task", "rg:basic_arithmetic",
         "--solver", "openai:gem", "--solver-base-url", a.url, "--solver-base-url", b.url, "--n", "6", "--json"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    eps = out["model_stats"]["endpoints"]
    assert [e["base_url"] for e in eps] == [a.url, b.url]
    assert sum(e["calls"] for e in eps) == out["model_stats"]["calls"] == 6
    assert all(p["status"] == "ok" for p in out["problems"]) and out["executor"]["executor"] == "local"


def test_a_spec_can_carry_the_pool_as_a_comma_separated_base_url(servers):
    """Settings trees and shards pass the solver as a string: ``base_url=U1,U2`` in the spec builds the same pool
    as two base URLs given apart; an empty item is a clear error."""
    a, b = servers(), servers()
    pool = load_model(f"openai:gem?base_url={a.url},{b.url}&max_retries=2", **FAST)
    assert isinstance(pool, EndpointPool) and [e.url for e in pool.endpoints] == [a.url, b.url]
    assert pool.max_retries == 2
    done = run(pool, reqs(4))
    assert {c.meta["endpoint"] for c in done} == {a.url, b.url}
    one = load_model(f"openai:gem?base_url={a.url}", **FAST)
    assert isinstance(one, OpenAIBackend)
    with pytest.raises(UserError, match="empty URL"):
        load_model(f"openai:gem?base_url={a.url},", **FAST)


def test_a_pool_takes_every_option_of_one_endpoint():
    """prefill and client reach each endpoint (the transfer stages' proposer arms are built with prefill=true):
    the pool continues an open assistant turn as one endpoint does, and the cache tells the two apart."""
    urls = [dead_url(), dead_url()]
    pool = load_model(f"openai:gem?base_url={','.join(urls)}&prefill=true&client=aiohttp", cache=False)
    assert isinstance(pool, EndpointPool) and pool.continues_assistant()
    assert all(e.backend.prefill and e.backend.client == "aiohttp" for e in pool.endpoints)
    plain = load_model("openai:gem", base_url=urls, cache=False)
    assert not plain.continues_assistant() and plain.identity() != pool.identity()
