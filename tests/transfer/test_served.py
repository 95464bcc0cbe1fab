"""Proposer arms on a running solver server: what /v1/models says it serves, and which arm may use it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from harnesslearn.transfer.served import served_arm, served_models, server_started, solver_url


def _server(models: list[dict], started: float | None = None) -> ThreadingHTTPServer:
    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/metrics":  # as Prometheus' process collector writes it
                body = (f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {started}\n"
                        if started is not None else "vllm:num_requests_running 0\n").encode()
            else:
                body = json.dumps({"object": "list", "data": models}).encode()
            self.send_response(200 if self.path in ("/v1/models", "/metrics") else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_the_server_serves_the_base_and_this_runs_adapters_by_name(tmp_path: Path) -> None:
    base, sft, old_rl = tmp_path / "model", tmp_path / "ret" / "sft_adapter", tmp_path / "old" / "adapter"
    for d in (base, sft, old_rl):
        d.mkdir(parents=True)
    # as vLLM lists them: the base under its served name, LoRA modules with their folders as root
    srv = _server([{"id": "qwen", "root": str(base)}, {"id": "sft", "root": str(sft), "parent": "qwen"},
                   {"id": "rl", "root": str(old_rl), "parent": "qwen"}])
    try:
        url = f"http://127.0.0.1:{srv.server_port}/v1"
        name_url = solver_url(f"openai:qwen?base_url={url}&timeout=300&prefill=true")
        assert name_url == ("qwen", url)
        models = served_models(url)
        assert models == {"qwen": str(base), "sft": str(sft), "rl": str(old_rl)}
        kw = {"solver_name": "qwen", "base_model": str(base)}
        assert served_arm("base", models, adapter=tmp_path / "x", **kw) == "qwen"
        assert served_arm("sft", models, adapter=sft, **kw) == "sft"
        # an adapter served from another folder is not this run's: the stage must not use it
        assert served_arm("rl", models, adapter=tmp_path / "ret" / "grpo" / "state" / "adapter", **kw) is None
        # a server of another model is not the base proposer
        assert served_arm("base", models, solver_name="qwen", base_model=str(tmp_path / "other"),
                          adapter=tmp_path) is None
    finally:
        srv.shutdown()


def test_no_shared_server_no_listing() -> None:
    assert solver_url(None) is None and solver_url("vllm:/m") is None and solver_url("openai:gpt") is None
    assert served_models("http://127.0.0.1:9/v1", timeout=1.0) == {}


def test_a_stage_takes_its_proposers_from_the_server_that_serves_them(tmp_path: Path) -> None:
    """proposers(): base and sft from the solver's server (openai: clients at its URL); rl, served from another
    folder, falls back to the in-process engine with the adapter merged at load (not loaded here: lazily)."""
    import asyncio

    from harnesslearn.transfer import stages
    from harnesslearn.transfer.settings import TransferSettings

    base, ret = tmp_path / "model", tmp_path / "ret"
    rl = ret / "grpo" / "state" / "adapter"
    for d in (base, ret / "sft_adapter", rl):
        d.mkdir(parents=True)
    (rl / "adapter_config.json").write_text("{}")
    (rl / "adapter_model.safetensors").write_bytes(b"weights")
    srv = _server([{"id": "qwen", "root": str(base)}, {"id": "sft", "root": str(ret / "sft_adapter")},
                   {"id": "rl", "root": str(tmp_path / "elsewhere")}])
    try:
        url = f"http://127.0.0.1:{srv.server_port}/v1"
        s = TransferSettings(model=str(base), solver=f"openai:qwen?base_url={url}&prefill=true", work=str(tmp_path))
        arms = asyncio.run(stages.proposers(s, None, ret, tmp_path, names=("zoo", "base", "sft", "rl")))  # type: ignore[arg-type]
        assert arms["zoo"] is None
        assert arms["base"] is not None and arms["base"].spec == "openai:qwen"
        assert arms["sft"] is not None and arms["sft"].spec == "openai:sft"
        assert getattr(arms["sft"], "base_url", getattr(getattr(arms["sft"], "inner", None), "base_url", None)) == url
        assert arms["rl"] is not None and arms["rl"].spec == f"hf:{base}"
        assert "+adapter:" in arms["rl"].cache_identity  # the cache keys on the adapter's content
    finally:
        srv.shutdown()


def test_an_adapter_rewritten_after_the_server_started_is_not_taken_from_it(tmp_path: Path) -> None:
    """A server loads its LoRA modules once: GRPO updates written after its start would leave it proposing with
    an older adapter, so the arm falls back; an empty root is never a match."""
    import os
    import time

    rl = tmp_path / "adapter"
    rl.mkdir()
    (rl / "adapter_model.safetensors").write_bytes(b"x")
    now = time.time()
    os.utime(rl / "adapter_model.safetensors", (now - 100, now - 100))
    models = {"qwen": str(tmp_path), "rl": str(rl), "sft": ""}
    kw = {"solver_name": "qwen", "base_model": str(tmp_path), "adapter": rl}
    assert served_arm("rl", models, started=now - 200, **kw) is None  # written after the start
    assert served_arm("rl", models, started=now - 50, **kw) == "rl"
    assert served_arm("rl", models, started=None, **kw) == "rl"  # the server does not say: the folder decides
    assert served_arm("sft", models, solver_name="qwen", base_model=str(tmp_path), adapter=Path.cwd()) is None
    for started in (now - 50, None):
        srv = _server([], started)
        try:
            assert server_started(f"http://127.0.0.1:{srv.server_port}/v1") == started
        finally:
            srv.shutdown()


def test_several_servers_serve_an_arm_only_where_every_one_serves_it_and_the_arm_spreads_over_them(
        tmp_path: Path) -> None:
    """A solver pool written into the spec (base_url=URL1,URL2): an adapter counts as served only where every
    server serves it from the same folder, the start is the earliest server's (a server loads its adapters once),
    and the arm's client is a pool over the same servers."""
    import asyncio
    import time

    from harnesslearn.models.pool import EndpointPool
    from harnesslearn.transfer import stages
    from harnesslearn.transfer.settings import TransferSettings

    base, ret = tmp_path / "model", tmp_path / "ret"
    for d in (base, ret / "sft_adapter", ret / "grpo" / "state" / "adapter"):
        d.mkdir(parents=True)
    now = time.time()
    both = [{"id": "qwen", "root": str(base)}, {"id": "sft", "root": str(ret / "sft_adapter")}]
    a = _server([*both, {"id": "rl", "root": str(ret / "grpo" / "state" / "adapter")}], now - 60)
    b = _server(both, now - 30)  # the second server was not given the rl adapter
    try:
        urls = [f"http://127.0.0.1:{s.server_port}/v1" for s in (a, b)]
        pooled = ",".join(urls)
        assert served_models(pooled) == {"qwen": str(base), "sft": str(ret / "sft_adapter")}
        assert server_started(pooled) == now - 60  # the first server's start: an adapter must predate every one
        s = TransferSettings(model=str(base), solver=f"openai:qwen?base_url={pooled}&prefill=true", work=str(tmp_path))
        arms = asyncio.run(stages.proposers(s, None, ret, tmp_path, names=("base", "sft")))  # type: ignore[arg-type]
        for arm in ("base", "sft"):
            inner = getattr(arms[arm], "inner", arms[arm])
            assert isinstance(inner, EndpointPool) and [e.url for e in inner.endpoints] == urls
    finally:
        a.shutdown()
        b.shutdown()
