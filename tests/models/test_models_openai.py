"""The openai: provider against an in-process fake server, behind a fault-injecting proxy: every test runs
with both HTTP clients (openai's, and ``client=aiohttp``), which must give the same answers and faults."""

from __future__ import annotations

import asyncio
import json

import pytest
from fault_proxy import FakeOpenAIServer, FaultProxy, http_response, read_request

from harnesslearn.errors import InfraError
from harnesslearn.models import GenerateRequest, load_model
from harnesslearn.models.openai_compat import RequestRejected
from harnesslearn.models.retry import backoff_delay

FAST = {"base_delay": 0.01, "max_delay": 0.05, "cache": False}


@pytest.fixture(autouse=True, params=["openai", "aiohttp"])
def client(request, monkeypatch):
    """The HTTP client of every openai: backend the test builds without naming one."""
    from harnesslearn.models.openai_compat import OpenAIBackend

    init = OpenAIBackend.__init__

    def with_client(self, name, **kw):
        kw.setdefault("client", request.param)
        init(self, name, **kw)

    monkeypatch.setattr(OpenAIBackend, "__init__", with_client)
    return request.param


@pytest.fixture(scope="module")
def server():
    s = FakeOpenAIServer().start()
    yield s
    s.stop()


def proxy(server, **kw):
    return FaultProxy(("127.0.0.1", server.port), **kw).start()


def run(model, *reqs):
    async def main():
        try:
            return await asyncio.gather(*(model.generate(r) for r in reqs))
        finally:
            await model.aclose()

    return asyncio.run(main())


def test_completions_endpoint_for_text_and_params_passed(server):
    m = load_model("openai:gem", base_url=server.url, cache=False)
    (c,) = run(m, GenerateRequest("Question: 1+1\nAnswer:", n=2, temperature=0.7, top_p=0.9, max_tokens=7,
                                  stop=("\n",), seed=5))
    assert c.texts == ["echo: uestion: 1+1"] * 2  # the fake echoes the last 20 chars; stop cut at "\n"
    req = server.requests[-1]
    assert (req["n"], req["temperature"], req["top_p"], req["max_tokens"], req["stop"], req["seed"]) == (
        2, 0.7, 0.9, 7, ["\n"], 5)
    assert "prompt" in req and c.prompt_tokens == 3 and c.completion_tokens == 4


def test_chat_endpoint_for_messages_and_forced_endpoints(server):
    msgs = [{"role": "user", "content": "hello"}]
    (c,) = run(load_model("openai:gem", base_url=server.url, cache=False), GenerateRequest(msgs))
    assert c.text == "echo: hello" and "messages" in server.requests[-1]
    (c,) = run(load_model("openai:gem?endpoint=completions", base_url=server.url, cache=False), GenerateRequest(msgs))
    assert server.requests[-1]["prompt"] == "User: hello\n\nAssistant:"
    run(load_model("openai:gem?endpoint=chat", base_url=server.url, cache=False), GenerateRequest("plain"))
    assert server.requests[-1]["messages"] == [{"role": "user", "content": "plain"}]


def test_base_url_from_environment(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    (c,) = run(load_model("openai:gem", cache=False), GenerateRequest("x"))
    assert c.text == "echo: x"


@pytest.mark.parametrize("fault", ["500", "drop", "stall"])
def test_each_fault_is_retried_and_counted(server, fault):
    p = proxy(server, schedule=[fault, fault], stall_s=5)
    try:
        m = load_model("openai:gem?timeout=0.5", base_url=p.url, **FAST)
        (c,) = run(m, GenerateRequest("hi"))
        assert c.text == "echo: hi" and c.meta["retries"] == 2
        s = m.stats()
        assert (s["faults"], s["retries"], s["infra_errors"], s["calls"]) == (2, 2, 0, 1)
        assert p.counts[fault] == 2 and p.counts["forwarded"] == 1
    finally:
        p.stop()


def test_faults_beyond_retries_raise_infra_error(server):
    p = proxy(server, schedule=["500"] * 10)
    try:
        m = load_model("openai:gem?max_retries=2", base_url=p.url, **FAST)
        with pytest.raises(InfraError, match="3 attempt"):
            run(m, GenerateRequest("hi"))
        s = m.stats()
        assert (s["faults"], s["retries"], s["infra_errors"], s["calls"]) == (3, 2, 1, 0)
    finally:
        p.stop()


def test_random_faults_under_concurrency_all_complete(server):
    p = proxy(server, fraction=0.4, faults=("500", "drop"), seed=1)
    try:
        m = load_model("openai:gem?max_retries=10", base_url=p.url, concurrency=4, **FAST)
        outs = run(m, *(GenerateRequest(f"q{i}") for i in range(30)))
        assert [c.text for c in outs] == [f"echo: q{i}" for i in range(30)]
        injected = p.counts["500"] + p.counts["drop"]
        assert injected > 0 and m.stats()["faults"] == injected
    finally:
        p.stop()


class _StatusServer(FakeOpenAIServer):
    """Answers every request with a fixed HTTP status."""

    def __init__(self, status: int, headers: str = "") -> None:
        super().__init__()
        self.status, self.hits = status, 0

    async def _handle(self, reader, writer):
        if await read_request(reader) is not None:
            self.hits += 1
            writer.write(http_response(self.status, json.dumps({"error": {"message": "no"}}).encode(), "X"))
            await writer.drain()
        writer.close()


@pytest.mark.parametrize("status,exc", [(400, RequestRejected), (401, InfraError), (404, InfraError)])
def test_client_errors_are_not_retried(status, exc):
    s = _StatusServer(status).start()
    try:
        m = load_model("openai:gem", base_url=s.url, **FAST)
        with pytest.raises(exc):
            run(m, GenerateRequest("hi"))
        assert s.hits == 1 and m.stats()["retries"] == 0
    finally:
        s.stop()


def test_fewer_choices_than_n_asks_again():
    def one_choice(path, req):
        return {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "text": "t", "finish_reason": "stop", "logprobs": None}]}

    s = FakeOpenAIServer(one_choice).start()
    try:
        (c,) = run(load_model("openai:gem", base_url=s.url, cache=False), GenerateRequest("a b", n=3))
        assert c.texts == ["t"] * 3 and len(s.requests) == 3 and c.prompt_tokens == 2
    finally:
        s.stop()


def test_cache_serves_repeat_without_server_call(server, tmp_path):
    m = load_model("openai:gem", base_url=server.url, cache_path=tmp_path / "c.sqlite")
    before = len(server.requests)
    a, b = run(m, GenerateRequest("same"), GenerateRequest("other"))
    (c,) = run(m, GenerateRequest("same"))
    assert c.cached and c.text == a.text and len(server.requests) == before + 2
    assert m.stats()["cache_hits"] == 1


def test_backoff_is_bounded_and_grows():
    import random

    rng = random.Random(0)
    assert all(0 <= backoff_delay(r, 0.5, 8.0, rng) <= min(8.0, 0.5 * 2**r) for r in range(10) for _ in range(20))


def test_prefill_continues_a_last_assistant_message_on_servers_that_take_it(server):
    msgs = [{"role": "user", "content": "write solve"}, {"role": "assistant", "content": "def solve("}]
    m = load_model("openai:gem?prefill=true", base_url=server.url, cache=False)
    assert m.continues_assistant() and m.chat_template()
    run(m, GenerateRequest(msgs))
    req = server.requests[-1]
    assert req["messages"] == msgs and req["continue_final_message"] is True and req["add_generation_prompt"] is False
    run(load_model("openai:gem?prefill=true", base_url=server.url, cache=False), GenerateRequest(msgs[:1]))
    assert "continue_final_message" not in server.requests[-1]  # nothing to continue: an ordinary turn
    plain = load_model("openai:gem", base_url=server.url, cache=False)
    assert not plain.continues_assistant()
    run(plain, GenerateRequest(msgs))
    assert "continue_final_message" not in server.requests[-1]


def test_the_vllm_provider_says_how_to_get_vllm_and_builds_its_server_command(tmp_path):
    import importlib.util

    from harnesslearn.errors import MissingExtraError, UserError
    from harnesslearn.models.served import vllm_argv
    from harnesslearn.models.vllm import parse_lora

    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(MissingExtraError, match="vllm"):
            load_model(f"vllm:{tmp_path}")
    assert parse_lora("sft=/a, rl=/b") == {"sft": "/a", "rl": "/b"} and parse_lora(None) == {}
    with pytest.raises(UserError, match="NAME=DIR"):
        parse_lora("sft")
    argv = vllm_argv("/m", 8123, served_name="model", gpu_memory_utilization=0.3, max_num_seqs=512,
                     lora={"sft": "/a"})
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(argv)
    assert "--model /m" in joined and "--port 8123" in joined and "--gpu-memory-utilization 0.3" in joined
    assert "--enable-lora" in joined and "--lora-modules sft=/a" in joined and "--max-num-seqs 512" in joined


@pytest.mark.parametrize("content_type", ["application/json", "text/html"])
def test_a_200_whose_body_is_not_a_completion_is_an_infrastructure_fault(content_type):
    """Issue 23: a proxy's HTML page (or broken JSON) with HTTP 200 must never become a harness's answer."""

    class Html(FakeOpenAIServer):
        async def _handle(self, reader, writer):
            if await read_request(reader) is not None:
                writer.write(http_response(200, b"<html>gateway says hello</html>", content_type=content_type))
                await writer.drain()
            writer.close()

    s = Html().start()
    try:
        m = load_model("openai:gem", base_url=s.url, **FAST)
        with pytest.raises(InfraError, match="BadResponse"):
            run(m, GenerateRequest("hi"))
        assert m.stats()["retries"] >= 1
    finally:
        s.stop()


def _body(chat: bool, choices, usage=None) -> dict:
    return {"id": "x", "object": "chat.completion" if chat else "text_completion", "created": 0, "model": "m",
            "choices": choices, **({"usage": usage} if usage is not None else {})}


@pytest.mark.parametrize("chat,choices,why", [
    (False, None, "not a completion"),
    (False, "text", "not a completion"),
    (False, [{"index": 0, "finish_reason": "stop"}], "without text"),
    (False, [{"index": 0, "text": 5, "finish_reason": "stop"}], "not a string"),
    (True, [{"index": 0, "finish_reason": "stop"}], "without a message"),
    (True, [{"index": 0, "message": {"role": "assistant", "content": ["a", "b"]}}], "not a string"),
])
def test_a_200_whose_choices_are_not_completions_is_an_infrastructure_fault(chat, choices, why):
    """Issue 33 item 9: no choices list, a choice without text or a message, text that is not a string: a
    fault of the server (retried, then exit 1), never an empty answer scored 0."""
    s = FakeOpenAIServer(lambda path, req: _body(chat, choices)).start()
    try:
        m = load_model("openai:gem", base_url=s.url, endpoint="chat" if chat else "completions", **FAST)
        with pytest.raises(InfraError, match="BadResponse") as e:
            run(m, GenerateRequest("hi"))
        assert why in str(e.value.__cause__ or e.value) or why in str(e.value)
        assert m.stats()["retries"] >= 1
    finally:
        s.stop()


def test_bad_usage_numbers_are_estimated_and_the_text_kept():
    usage = {"prompt_tokens": -5, "completion_tokens": "many", "total_tokens": None}
    s = FakeOpenAIServer(lambda path, req: _body(False, [{"index": 0, "text": "four words of text",
                                                          "finish_reason": "stop"}], usage)).start()
    try:
        (c,) = run(load_model("openai:gem", base_url=s.url, **FAST), GenerateRequest("a b c"))
        assert c.texts == ["four words of text"] and c.prompt_tokens > 0 and c.completion_tokens > 0
    finally:
        s.stop()


def test_an_oversized_reply_is_an_infrastructure_fault_of_its_own_not_retried():
    from harnesslearn.models.openai_compat import MAX_REPLY_CHARS

    big = "x" * (MAX_REPLY_CHARS + 1)
    s = FakeOpenAIServer(lambda path, req: _body(False, [{"index": 0, "text": big, "finish_reason": "stop"}])).start()
    try:
        m = load_model("openai:gem", base_url=s.url, **FAST)
        with pytest.raises(InfraError, match="oversized"):
            run(m, GenerateRequest("hi"))
        assert len(s.requests) == 1
    finally:
        s.stop()
