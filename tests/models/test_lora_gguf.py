"""A PEFT LoRA adapter as a GGUF LoRA file for llama.cpp (``models/lora_gguf.py``): the safetensors reader (bf16
included), the file's metadata, names and shapes, the refusals, and for real on the embedded Qwen 0.5B: the adapter
changes llama.cpp's greedy text, a zero adapter does not, and ``local:NAME?adapter=DIR`` runs it on llama.cpp."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from extras import needs, needs_true

from harnesslearn.errors import UserError
from harnesslearn.models import GenerateRequest, embedded, load_model
from harnesslearn.models.lora_gguf import convert, read_safetensors

QWEN05 = "qwen2.5-coder-0.5b-instruct"
PREFIX = "base_model.model.model.layers"


def save(path: Path, tensors: dict[str, np.ndarray], dtype: str = "F32") -> None:
    """A safetensors file written by hand (F32, F16 or BF16: numpy has no bfloat16, so its bits are cut here)."""
    header, blobs, at = {}, [], 0
    for name, x in tensors.items():
        x = np.ascontiguousarray(x, dtype=np.float32)
        data = ((x.view(np.uint32) >> 16).astype("<u2").tobytes() if dtype == "BF16"
                else x.astype("<f2" if dtype == "F16" else "<f4").tobytes())
        header[name] = {"dtype": dtype, "shape": list(x.shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def adapter(folder: Path, tensors: dict[str, np.ndarray], r: int, alpha: float = 16.0, dtype: str = "F32",
            **cfg: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": r, "lora_alpha": alpha, "peft_type": "LORA", **cfg}))
    save(folder / "adapter_model.safetensors", tensors, dtype)
    return folder


def test_the_reader_gives_bf16_f16_and_f32_tensors_as_float32(tmp_path: Path) -> None:
    x = np.array([[1.0, -2.5], [0.15625, 3e-3]], dtype=np.float32)  # exact in bf16 except the last
    for dtype, tol in (("F32", 0.0), ("F16", 1e-3), ("BF16", 2e-2)):
        save(tmp_path / f"{dtype}.safetensors", {"w": x}, dtype)
        got = read_safetensors(tmp_path / f"{dtype}.safetensors")["w"]
        assert got.dtype == np.float32 and got.shape == (2, 2)
        assert np.allclose(got, x, rtol=tol, atol=tol) and got[0, 1] == -2.5
    save(tmp_path / "bad.safetensors", {"w": x})
    raw = (tmp_path / "bad.safetensors").read_bytes().replace(b'"F32"', b'"I32"')
    (tmp_path / "bad.safetensors").write_bytes(raw)
    with pytest.raises(UserError, match="is I32"):
        read_safetensors(tmp_path / "bad.safetensors")


def test_the_file_has_llama_cpps_adapter_metadata_names_and_shapes(tmp_path: Path) -> None:
    import gguf

    rng = np.random.default_rng(0)
    t = {f"{PREFIX}.{i}.self_attn.{m}.lora_{ab}.weight": rng.normal(size=shape)
         for i in (0, 1) for m, out in (("q_proj", 8), ("v_proj", 4))
         for ab, shape in (("A", (2, 8)), ("B", (out, 2)))}
    out = convert(adapter(tmp_path / "a", t, r=2, alpha=4.0, dtype="BF16"), tmp_path / "a.gguf", "qwen2")
    r = gguf.GGUFReader(str(out))
    assert str(bytes(r.fields["general.type"].parts[-1]), "utf-8") == "adapter"
    assert str(bytes(r.fields["adapter.type"].parts[-1]), "utf-8") == "lora"
    assert str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8") == "qwen2"
    assert float(r.fields["adapter.lora.alpha"].parts[-1][0]) == 4.0
    shapes = {x.name: list(x.shape) for x in r.tensors}  # GGUF order: [in, rank] and [rank, out]
    assert shapes == {f"blk.{i}.attn_{m}.weight.lora_{ab}": s for i in (0, 1)
                      for m, out in (("q", 8), ("v", 4)) for ab, s in (("a", [8, 2]), ("b", [2, out]))}
    assert all(x.tensor_type == gguf.GGMLQuantizationType.F16 for x in r.tensors)
    # rsLoRA scales by alpha / sqrt(r), llama.cpp by alpha / r: the alpha written makes them agree
    rs = convert(adapter(tmp_path / "rs", t, r=2, alpha=4.0, use_rslora=True), tmp_path / "rs.gguf", "qwen2")
    assert float(gguf.GGUFReader(str(rs)).fields["adapter.lora.alpha"].parts[-1][0]) == pytest.approx(4.0 * 2 ** 0.5)


@pytest.mark.parametrize(("tensors", "cfg", "arch", "why"), [
    ({f"{PREFIX}.0.self_attn.q_proj.lora_A.weight": np.zeros((2, 8))}, {"use_dora": True}, "qwen2", "DoRA"),
    ({f"{PREFIX}.0.mlp.weird.lora_A.weight": np.zeros((2, 8)), f"{PREFIX}.0.mlp.weird.lora_B.weight": np.zeros((8, 2))},
     {}, "qwen2", "no qwen2 tensor"),
    ({f"{PREFIX}.0.self_attn.q_proj.lora_A.weight": np.zeros((2, 8))}, {}, "qwen2", "lacks its A or B"),
    ({"base_model.model.lm_head.weight": np.zeros((2, 8))}, {}, "qwen2", "not a LoRA A or B weight"),
    ({f"{PREFIX}.0.self_attn.q_proj.lora_A.weight": np.zeros((2, 8))}, {}, "gemma3", "supports qwen2"),
])
def test_what_has_no_llama_cpp_lora_form_is_one_line_and_leaves_no_file(
        tmp_path: Path, tensors: dict, cfg: dict, arch: str, why: str) -> None:
    with pytest.raises(UserError, match=why):
        convert(adapter(tmp_path / "a", tensors, r=2, **cfg), tmp_path / "a.gguf", arch)
    assert not (tmp_path / "a.gguf").exists() and not list(tmp_path.glob(".a.gguf*"))


def test_an_adapter_without_safetensors_or_with_a_non_positive_alpha_is_one_line(tmp_path: Path) -> None:
    t = {f"{PREFIX}.0.self_attn.q_proj.lora_A.weight": np.zeros((2, 8)),
         f"{PREFIX}.0.self_attn.q_proj.lora_B.weight": np.zeros((8, 2))}
    with pytest.raises(UserError, match="llama.cpp would read 0 as scale 1"):
        convert(adapter(tmp_path / "zero", t, r=2, alpha=0.0), tmp_path / "zero.gguf", "qwen2")
    folder = adapter(tmp_path / "bin", t, r=2)
    (folder / "adapter_model.safetensors").rename(folder / "adapter_model.bin")
    with pytest.raises(UserError, match="no adapter_model.safetensors"):
        convert(folder, tmp_path / "bin.gguf", "qwen2")


@pytest.mark.slow
@needs_true(embedded.installed(QWEN05), "qwen")
@needs("llama_cpp", "llamacpp")
def test_on_the_embedded_qwen_the_adapter_changes_llama_cpps_text_and_a_zero_one_does_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    import gguf

    monkeypatch.setenv("HARNESSLEARN_CACHE_DIR", str(tmp_path / "cache"))
    base_gguf = embedded.ensure_gguf(QWEN05)  # assembled into the fresh cache from the installed parts
    shapes = {x.name: [int(n) for n in x.shape] for x in gguf.GGUFReader(str(base_gguf)).tensors}
    rng = np.random.default_rng(0)

    def lora(scale: float) -> dict[str, np.ndarray]:
        out = {}
        for i in range(24):
            for m, g in (("q_proj", "attn_q"), ("v_proj", "attn_v")):
                n_in, n_out = shapes[f"blk.{i}.{g}.weight"]
                out[f"{PREFIX}.{i}.self_attn.{m}.lora_A.weight"] = rng.normal(0, 0.05, (8, n_in))
                out[f"{PREFIX}.{i}.self_attn.{m}.lora_B.weight"] = rng.normal(0, 1.0, (n_out, 8)) * scale
        return out

    strong, zero = adapter(tmp_path / "strong", lora(1.0), r=8), adapter(tmp_path / "zero", lora(0.0), r=8)
    tiny = adapter(tmp_path / "tiny", lora(1.0), r=8, alpha=1e-6)  # llama.cpp scales by alpha / r: ~1e-7, nothing
    req = GenerateRequest([{"role": "user", "content": "What is 12 + 30? Reply with the number only."}],
                          max_tokens=8, temperature=0.0)

    def text(spec: str) -> tuple[str, str]:
        async def main() -> tuple[str, str]:
            m = load_model(spec, cache=False)
            try:
                assert m.engine == "llamacpp"  # type: ignore[attr-defined]
                return (await m.generate(req)).text, m.identity()
            finally:
                await m.aclose()
        return asyncio.run(main())

    base, base_id = text(f"local:{QWEN05}")
    tuned, tuned_id = text(f"local:{QWEN05}?adapter={strong}")
    same, _ = text(f"local:{QWEN05}?adapter={zero}")
    scaled_away, _ = text(f"local:{QWEN05}?adapter={tiny}")
    assert "42" in base and tuned != base and same == base and scaled_away == base
    assert "+adapter:" in tuned_id and "+adapter:" not in base_id
    assert len(list((tmp_path / "cache" / "lora").glob("*.gguf"))) == 3  # converted once each, kept by content
    assert "lora for" not in capfd.readouterr().err  # llama.cpp's per-tensor load warnings stay out of the terminal
    # a LoRA whose shapes do not fit the model (written for a wider one): llama.cpp refuses it, in one line
    wide = {k: np.concatenate([v, v], axis=1) if "lora_A" in k else v for k, v in lora(1.0).items()}
    with pytest.raises(UserError, match="blk.0.attn_q.weight.lora_a is .* written for another model"):
        text(f"local:{QWEN05}?adapter={adapter(tmp_path / 'wide', wide, r=8)}")
    tall = {k: np.concatenate([v, v], axis=0) if "lora_B" in k else v for k, v in lora(1.0).items()}
    with pytest.raises(UserError, match="blk.0.attn_q.weight.lora_b is .* written for another model"):
        text(f"local:{QWEN05}?adapter={adapter(tmp_path / 'tall', tall, r=8)}")


def test_a_lora_file_of_another_architecture_or_inconsistent_ranks_is_refused_before_llama_cpp_loads_it(
        tmp_path: Path) -> None:
    """``check_fits`` (llama.cpp's own refusal ended the process): architecture, a tensor the model lacks, half a
    pair, ranks; norm vectors pass, as llama.cpp ignores them."""
    import gguf

    from harnesslearn.models.lora_gguf import check_fits

    def write(path: Path, arch: str, tensors: dict[str, np.ndarray]) -> Path:
        w = gguf.GGUFWriter(str(path), arch)
        for name, x in tensors.items():
            w.add_tensor(name, x.astype(np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path

    base = write(tmp_path / "base.gguf", "qwen2", {"blk.0.attn_q.weight": np.zeros((8, 8)),
                                                   "token_embd.weight": np.zeros((16, 8))})
    a, b = np.zeros((2, 8)), np.zeros((8, 2))
    check_fits(base, write(tmp_path / "ok.gguf", "qwen2", {"blk.0.attn_q.weight.lora_a": a,
                                                          "blk.0.attn_q.weight.lora_b": b}))
    check_fits(base, write(tmp_path / "norm.gguf", "qwen2", {"blk.0.attn_q.weight.lora_a": a,  # as llama.cpp: ignored
                                                            "blk.0.attn_q.weight.lora_b": b,
                                                            "blk.0.attn_norm.weight": np.ones(8)}))
    for name, arch, tensors, why in (
            ("llama", "llama", {"blk.0.attn_q.weight.lora_a": a}, "is for llama, the model is qwen2"),
            ("lacks", "qwen2", {"blk.0.attn_k.weight.lora_a": a}, "adapts no tensor of the model"),
            ("half", "qwen2", {"blk.0.attn_q.weight.lora_a": a}, "has lora_a without its lora_b"),
            ("half_embd", "qwen2", {"token_embd.weight.lora_b": np.zeros((16, 2))}, "has lora_b without its lora_a"),
            ("ranks", "qwen2", {"blk.0.attn_q.weight.lora_a": a, "blk.0.attn_q.weight.lora_b": np.zeros((8, 3))},
             "ranks 2 and 3")):
        with pytest.raises(UserError, match=why):
            check_fits(base, write(tmp_path / f"{name}.gguf", arch, tensors))
