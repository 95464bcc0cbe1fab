"""A PEFT LoRA adapter (what ``harnesslearn train sft|grpo`` saves) as a GGUF LoRA file for llama.cpp, so a trained
proposer runs on the CPU at llama.cpp's speed (``local:NAME?adapter=DIR``) instead of through transformers.

The file is what llama.cpp's own ``convert_lora_to_gguf.py`` writes for a model whose tensors need no reordering
(Qwen2: unlike Llama, no rotary permutation of q and k): ``general.type = adapter``, ``adapter.type = lora``,
``adapter.lora.alpha``, and per adapted weight ``<gguf name>.lora_a`` ([r, in]) and ``.lora_b`` ([out, r]) in f16,
named through gguf's own tensor-name map. That script is not importable from any package (it lives in the
llama.cpp source tree, with the 10,000-line HF converter it imports), so this is the small part of it we need,
with the ``gguf`` package doing the writing. Converted files are kept in the cache folder, named by the adapter's
content, so a second load takes no time.
"""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError

ARCHS = ("qwen2",)  # the tensors of these need no reordering between transformers and GGUF
FORMAT = 1  # in the cached file's name: a change to what ``convert`` writes makes files of the old one stale
KEY = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<ab>[AB])\.weight$")


def read_safetensors(path: Path) -> dict[str, Any]:
    """The tensors of a safetensors file as float32 numpy arrays (F32, F16 and BF16; numpy has no bfloat16, which
    safetensors' own numpy loader therefore refuses, and PEFT saves bf16 adapters from bf16 training)."""
    import numpy as np

    raw = path.read_bytes()
    try:
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        if not isinstance(header, dict):
            raise ValueError("header is not an object")
    except (struct.error, ValueError) as e:
        raise UserError(f"{path}: not a safetensors file ({e})") from None
    body = memoryview(raw)[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        buf = body[a:b]
        if t["dtype"] == "BF16":
            x = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] in ("F16", "F32"):
            x = np.frombuffer(buf, dtype="<f2" if t["dtype"] == "F16" else "<f4").astype(np.float32)
        else:
            raise UserError(f"{path}: tensor {name} is {t['dtype']}; a LoRA adapter's are F32, F16 or BF16")
        out[name] = x.reshape(t["shape"])
    return out


def convert(adapter: Path, out: Path, arch: str) -> Path:
    """Write the GGUF LoRA file of the PEFT adapter folder ``adapter`` for a base model of architecture ``arch``."""
    import gguf
    import numpy as np

    from harnesslearn.fsutil import atomic_path

    if arch not in ARCHS:
        raise UserError(f"adapter: llama.cpp LoRA conversion supports {', '.join(ARCHS)} models, not {arch}")
    try:
        cfg = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
        r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"adapter {adapter}: adapter_config.json does not give the LoRA rank and alpha ({e!r})") from None
    if alpha <= 0:  # llama.cpp reads an alpha of 0 as "no scaling" (scale 1), PEFT as a zero update
        raise UserError(f"adapter {adapter}: lora_alpha {alpha} (llama.cpp would read 0 as scale 1)")
    if not (adapter / "adapter_model.safetensors").is_file():
        raise UserError(f"adapter {adapter}: no adapter_model.safetensors (a .bin adapter: save it with "
                        "safe_serialization, PEFT's default)")
    if cfg.get("use_dora") or cfg.get("modules_to_save") or cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
        raise UserError(f"adapter {adapter}: DoRA, modules_to_save and per-module ranks have no llama.cpp LoRA form")
    if cfg.get("use_rslora"):  # PEFT scales by alpha / sqrt(r); llama.cpp by alpha / r
        alpha *= math.sqrt(r)
    pairs: dict[str, dict[str, Any]] = {}
    for name, x in read_safetensors(adapter / "adapter_model.safetensors").items():
        m = KEY.match(name)
        if m is None:
            raise UserError(f"adapter {adapter}: tensor {name} is not a LoRA A or B weight")
        pairs.setdefault(m["module"], {})[m["ab"]] = x
    blocks = 1 + max((int(b) for b in re.findall(r"layers\.(\d+)\.", " ".join(pairs))), default=0)
    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch.upper()), blocks)
    with atomic_path(out) as tmp:
        w = gguf.GGUFWriter(str(tmp), arch)
        w.add_type(gguf.GGUFType.ADAPTER)
        w.add_string(gguf.Keys.Adapter.TYPE, "lora")
        w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
        for module, ab in sorted(pairs.items()):
            target = names.get_name(module + ".weight", try_suffixes=(".weight",))
            if target is None or set(ab) != {"A", "B"}:
                raise UserError(f"adapter {adapter}: {module} has no {arch} tensor in GGUF, or lacks its A or B "
                                "weight")
            if ab["A"].shape[0] != r or ab["B"].shape[1] != r:
                raise UserError(f"adapter {adapter}: {module}'s weights are not of rank {r}")
            w.add_tensor(target + ".lora_a", np.ascontiguousarray(ab["A"], dtype=np.float16))
            w.add_tensor(target + ".lora_b", np.ascontiguousarray(ab["B"], dtype=np.float16))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return out


def gguf_lora(adapter: str, arch: str, digest: str) -> Path:
    """The cached GGUF LoRA file of ``adapter`` (``digest``: its weights' sha256 prefix), converted on first use."""
    from harnesslearn.fsutil import cache_dir

    out = cache_dir() / "lora" / f"{digest}-{arch}-v{FORMAT}.gguf"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        convert(Path(adapter), out, arch)
    return out


def check_fits(base: Path, lora: Path) -> None:
    """UserError unless the GGUF LoRA file ``lora`` fits the GGUF model ``base``: the same architecture, and for
    every ``X.lora_a`` / ``X.lora_b`` a tensor X of the model with the matching input and output sizes, both halves,
    and A's rank B's (``*_norm.weight`` vectors pass: llama.cpp ignores them). Checked here because llama.cpp's own
    refusal of a LoRA written for a wider model ended this process (a segmentation fault under llama-cpp-python
    0.3.36) instead of an error."""
    import gguf

    def arch(r: Any) -> str:
        f = r.fields.get("general.architecture")
        return "" if f is None else bytes(f.parts[-1]).decode("utf-8", "replace")

    try:
        b, lo = gguf.GGUFReader(str(base)), gguf.GGUFReader(str(lora))
    except (OSError, ValueError) as e:
        raise UserError(f"llamacpp: cannot read {lora} as a GGUF LoRA file ({e})") from None
    if arch(lo) != arch(b):
        raise UserError(f"llamacpp: LoRA {lora.name} is for {arch(lo) or 'no architecture'}, the model is {arch(b)}")
    shapes = {t.name: [int(n) for n in t.shape] for t in b.tensors}  # GGUF order: [in, out]
    ranks: dict[str, dict[str, int]] = {}
    halves: dict[str, set[str]] = {}
    for t in lo.tensors:
        if t.name.endswith("_norm.weight"):  # llama.cpp loads and ignores a LoRA file's norm vectors
            continue
        name, _, part = t.name.rpartition(".")
        got, want = [int(n) for n in t.shape], shapes.get(name)
        if part not in ("lora_a", "lora_b") or want is None:
            raise UserError(f"llamacpp: LoRA {lora.name}: {t.name} adapts no tensor of the model")
        halves.setdefault(name, set()).add(part)
        if name.startswith("token_embd"):  # llama.cpp stores this one's A transposed: its sizes left to llama.cpp
            continue
        if (part == "lora_a" and got[0] != want[0]) or (part == "lora_b" and got[-1] != want[-1]):
            raise UserError(f"llamacpp: LoRA {lora.name}: {t.name} is {got}, the model's {name} is {want}: written "
                            "for another model")
        ranks.setdefault(name, {})[part] = got[1] if part == "lora_a" else got[0]
    for name, h in halves.items():
        if len(h) < 2:
            raise UserError(f"llamacpp: LoRA {lora.name}: {name} has {next(iter(h))} without its "
                            f"{'lora_b' if 'lora_a' in h else 'lora_a'}")
    for name, r in ranks.items():
        if len(set(r.values())) > 1:
            raise UserError(f"llamacpp: LoRA {lora.name}: {name}'s A and B have ranks {r['lora_a']} and {r['lora_b']}")

