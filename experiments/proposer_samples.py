"""K samples of trained proposers on one real proposer prompt, on the CPU: how many differ, how many are valid
revisions of the minimal seed, and how near each is to a zoo harness (the transfer table's near-copy test).

The prompt is a chat one with the assistant's SEARCH block started, as ``adapt`` sends it (default: the rg:gcd
prompt of ``benchmarks/data/gcd_proposer_prompt.json``, a held-out family); each proposer is
``local:qwen2.5-coder-1.5b-instruct?adapter=DIR`` (llama.cpp with the adapter as a GGUF LoRA) or, for ``base``, the
model alone.

    .venv/bin/python experiments/proposer_samples.py --arm sft=.keep/sft_adapter_bf16 \
        --arm rl@18=experiments/results/qwen/state/grpo/state/adapter --k 4 --temperature 0.8 --out FILE.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


async def samples(spec: str, messages: list[dict[str, str]], k: int, temperature: float, max_tokens: int,
                  seed0: int) -> list[dict[str, Any]]:
    from harnesslearn.models import GenerateRequest, load_model

    m = load_model(spec, cache=False)
    out = []
    try:
        for i in range(k):
            t = time.perf_counter()
            c = await m.generate(GenerateRequest(messages, max_tokens=max_tokens, temperature=temperature,
                                                 seed=seed0 + i))
            out.append({"text": c.text, "tokens": c.completion_tokens, "s": round(time.perf_counter() - t, 1)})
            print(f"{spec}: sample {i}: {c.completion_tokens} tokens", file=sys.stderr, flush=True)
    finally:
        await m.aclose()
    return out


def judge(prefill: str, text: str) -> dict[str, Any]:
    """The sample as a proposal (the prompt's started assistant turn + the sample) on the minimal seed."""
    from harnesslearn import zoo
    from harnesslearn.harness import load_harness
    from harnesslearn.propose.edits import apply_proposal

    r = apply_proposal(load_harness("minimal").source, prefill + text)
    return {"valid": r.valid, "reason": None if r.reason is None else str(r.reason.value),
            "nearest_zoo": zoo.near(r.source) if r.valid and r.source is not None else None}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arm", action="append", required=True, metavar="LABEL=DIR",
                   help="a proposer: LABEL=ADAPTER_DIR, or base (the model alone)")
    p.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--prompt", default=str(ROOT / "benchmarks" / "data" / "gcd_proposer_prompt.json"))
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--temperature", type=float, default=0.8, help="the eval stage's proposer temperature")
    p.add_argument("--max-tokens", type=int, default=768, help="the eval stage's proposer limit")
    p.add_argument("--seed", type=int, default=10007)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    messages = json.loads(Path(a.prompt).read_text())
    prefill = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
    res: dict[str, Any] = {"model": a.model, "prompt": a.prompt, "k": a.k, "temperature": a.temperature,
                           "max_tokens": a.max_tokens, "arms": {}}
    for arm in a.arm:
        label, _, adapter = arm.partition("=")
        spec = f"local:{a.model}" + (f"?adapter={adapter}" if adapter else "")
        got = asyncio.run(samples(spec, messages, a.k, a.temperature, a.max_tokens, a.seed))
        judged = [{**s, **judge(prefill, s["text"])} for s in got]
        valid = [s for s in judged if s["valid"]]
        res["arms"][label] = {
            "spec": spec, "distinct": len({s["text"] for s in judged}), "valid": len(valid),
            "distinct_valid": len({s["text"] for s in valid}),
            "near_zoo_copies": sum(1 for s in valid if s["nearest_zoo"] and s["nearest_zoo"]["ratio"] >= 0.8),
            "samples": judged}
        r = res["arms"][label]
        print(f"{label}: {r['distinct']} distinct of {a.k}, {r['valid']} valid ({r['distinct_valid']} distinct), "
              f"{r['near_zoo_copies']} near-copies of a zoo harness; nearest: "
              + ", ".join(f"{s['nearest_zoo']['name']} {s['nearest_zoo']['ratio']:.2f}" if s["nearest_zoo"]
                          else f"invalid ({s['reason']})" for s in judged))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    return res


if __name__ == "__main__":
    main()
