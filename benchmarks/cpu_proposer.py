"""A trained proposer on the CPU: llama.cpp with the LoRA adapter converted to GGUF (``local:NAME?adapter=DIR``, the
default engine) against the baseline of transformers with the adapter merged (``engine=hf``), one real proposer
prompt (``benchmarks/data/gcd_proposer_prompt.json``: what ``adapt`` sent for rg:gcd, chat messages with the
assistant's SEARCH block started), greedy, in the same run, alternating.

Without ``--adapter`` the adapter is a random one of the trained proposer's shape (LoRA r32 on q/k/v/o, written by
this script): the same compute, so the timings hold, but the texts mean nothing. With a trained adapter (for example
``.keep/sft_adapter_bf16``, the stretch-4 SFT proposer, not in git) the two engines' texts are compared too.

    .venv/bin/python benchmarks/cpu_proposer.py [--adapter DIR] [--model qwen2.5-coder-1.5b-instruct] \
        [--max-tokens 200] [--repeats 2] [--out benchmarks/results/cpu_proposer.json]

Each repeat marks the system message with its number, so every engine reads the whole prompt anew (``cold``);
then one more proposal on the last prompt (``same prompt``): llama.cpp keeps the previous prompt's KV cache and
reads only what differs, as for the K candidates of one round, while transformers reads it all again. Prints per
engine the load seconds (llama.cpp's includes the one-time conversion, transformers' the bf16 copy if it is missing),
the seconds of a cold proposal (the fastest repeat) and of one on the same prompt, prompt and generated tokens, and
the ratios transformers / llama.cpp for one cold proposal and for a round of 4 candidates on one prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def random_adapter(folder: Path, model: str, r: int = 32) -> Path:
    """A PEFT LoRA folder of random weights for ``model``'s attention projections (shapes from its GGUF)."""
    import gguf
    import numpy as np

    from harnesslearn.models.embedded import ensure_gguf

    shapes = {x.name: [int(n) for n in x.shape] for x in gguf.GGUFReader(str(ensure_gguf(model))).tensors}
    rng = np.random.default_rng(0)
    header: dict[str, Any] = {}
    blobs: list[bytes] = []
    at = 0
    blocks = 1 + max(int(n.split(".")[1]) for n in shapes if n.startswith("blk."))
    for i in range(blocks):
        for m, g in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
            n_in, n_out = shapes[f"blk.{i}.{g}.weight"]
            for ab, shape in (("A", (r, n_in)), ("B", (n_out, r))):
                data = rng.normal(0, 0.01, shape).astype("<f4").tobytes()
                header[f"base_model.model.model.layers.{i}.self_attn.{m}.lora_{ab}.weight"] = {
                    "dtype": "F32", "shape": list(shape), "data_offsets": [at, at + len(data)]}
                blobs.append(data)
                at += len(data)
    folder.mkdir(parents=True, exist_ok=True)
    head = json.dumps(header).encode()
    (folder / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    (folder / "adapter_config.json").write_text(json.dumps({"r": r, "lora_alpha": 2 * r, "peft_type": "LORA",
                                                            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}))
    return folder


async def one(model: Any, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    from harnesslearn.models import GenerateRequest

    t = time.perf_counter()
    c = await model.generate(GenerateRequest(messages, max_tokens=max_tokens, temperature=0.0))
    s = time.perf_counter() - t
    return {"s": s, "prompt_tokens": c.prompt_tokens, "tokens": c.completion_tokens, "text": c.text}


async def main(a: argparse.Namespace) -> dict[str, Any]:
    from harnesslearn.models import load_model

    messages = json.loads((HERE / "data" / "gcd_proposer_prompt.json").read_text())
    adapter = Path(a.adapter) if a.adapter else random_adapter(Path(tempfile.mkdtemp()) / "adapter", a.model)
    engines = {"llama.cpp + GGUF LoRA": f"local:{a.model}?adapter={adapter}",
               "transformers + merged adapter (baseline)": f"local:{a.model}?adapter={adapter}&engine=hf"}
    models: dict[str, Any] = {}
    rows: dict[str, dict[str, Any]] = {}
    for label, spec in engines.items():  # load (and convert) first, outside the timings of a proposal
        t = time.perf_counter()
        models[label] = load_model(spec, cache=False)
        await asyncio.to_thread(models[label].warm)  # type: ignore[attr-defined]
        rows[label] = {"spec": spec, "load_s": round(time.perf_counter() - t, 1), "runs": [], "same": []}
        print(f"{label}: loaded in {rows[label]['load_s']} s", file=sys.stderr, flush=True)
    try:
        for i in range(a.repeats + 1):  # the last pass: the same prompt as the one before it
            marked = [{**messages[0], "content": f"[run {min(i, a.repeats - 1)}] {messages[0]['content']}"},
                      *messages[1:]]
            for label in (engines if i % 2 == 0 else reversed(list(engines))):
                r = await one(models[label], marked, a.max_tokens)
                rows[label]["runs" if i < a.repeats else "same"].append(r)
                print(f"{label}: {r['s']:.1f} s, {r['prompt_tokens']} + {r['tokens']} tokens"
                      + (" (same prompt again)" if i == a.repeats else ""), file=sys.stderr, flush=True)
    finally:
        for m in models.values():
            await m.aclose()
    out: dict[str, Any] = {"model": a.model, "adapter": "given" if a.adapter else "random (r32 q/k/v/o)",
                           "max_tokens": a.max_tokens, "repeats": a.repeats, "machine": platform.platform(),
                           "engines": {}}
    for label, row in rows.items():
        s, same = min(r["s"] for r in row["runs"]), row["same"][0]["s"]
        toks = row["runs"][0]["tokens"]
        out["engines"][label] = {"load_s": row["load_s"], "cold_s_min": round(s, 1),
                                 "cold_s": [round(r["s"], 1) for r in row["runs"]], "same_prompt_s": round(same, 1),
                                 "round_of_4_s": round(s + 3 * same, 1),
                                 "prompt_tokens": row["runs"][0]["prompt_tokens"], "generated_tokens": toks}
    fast, base = (out["engines"][k] for k in engines)
    out["ratio_cold"] = round(base["cold_s_min"] / fast["cold_s_min"], 2)
    out["ratio_round_of_4"] = round(base["round_of_4_s"] / fast["round_of_4_s"], 2)
    texts = [rows[k]["runs"][0]["text"] for k in engines]
    out["same_text"] = texts[0] == texts[1] if a.adapter else None
    out["texts"] = texts if a.adapter else None
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--adapter", default=None, help="a trained PEFT LoRA folder (default: a random one of its shape)")
    p.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default=None, help="also write the JSON here")
    args = p.parse_args()
    res = asyncio.run(main(args))
    for label, e in res["engines"].items():
        print(f"{label}: load {e['load_s']} s, a cold proposal {e['cold_s_min']} s, one more on the same prompt "
              f"{e['same_prompt_s']} s, a round of 4 {e['round_of_4_s']} s ({e['prompt_tokens']} prompt + "
              f"{e['generated_tokens']} generated tokens)")
    print(f"ratio transformers / llama.cpp: {res['ratio_cold']}x a cold proposal, {res['ratio_round_of_4']}x a round "
          "of 4 on one prompt" + ("" if res["same_text"] is None else f"; same greedy text: {res['same_text']}"))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
