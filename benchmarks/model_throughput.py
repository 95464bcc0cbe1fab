"""Model throughput: through the broker vs direct client calls, and the embedded model's tok/s.

1. Broker vs direct. One OpenAI-compatible server (by default a real ``llama_cpp.server``
   serving the embedded Gemma 3 270M on a loopback port; or ``--base-url``). The same
   requests (one per Reasoning Gym problem, greedy, ``--max-tokens``) are sent
   a) through the broker: harness code calling ``model(...)`` in sandboxed workers run by
      the executor (fresh worker per problem, sandbox included), and
   b) directly: ``openai:`` backend calls from one event loop,
   at the same concurrency. Prints requests/s and completion tokens/s of each and the ratio
   broker/direct (target >= 0.9). After one warm-up request: direct, broker, direct; the
   ratio uses the mean of the two direct runs (the machine's load drifts).
2. The embedded model (``local:gemma-3-270m``): tokens/s for one sequence, and for
   ``--batch`` concurrent sequences (llama.cpp serialises them; with ``--hf`` also the
   transformers engine, whose dynamic batcher merges them into one ``generate``).

    python benchmarks/model_throughput.py [--n 16] [--concurrency 4] [--max-tokens 16] [--json]
    python benchmarks/model_throughput.py --fake --n 40 --calls-per-problem 10 --concurrency 8 --skip-local

Caveat: on a small CPU machine the server, the workers and this process share the cores,
so the ratio includes the CPU the sandbox takes from the server; that is the real cost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harnesslearn.evaluation import task_tools
from harnesslearn.models import GenerateRequest, load_model

HARNESS = '''
def solve(model, question):
    for i in range({calls} - 1):
        model("Question: " + question + " (" + str(i) + ")\\nAnswer:", max_tokens={max_tokens}, temperature=0.0)
    return model("Question: " + question + "\\nAnswer:", max_tokens={max_tokens}, temperature=0.0)
'''


def prompts_of(question: str, calls: int) -> list[str]:
    """The prompts the harness above sends for one problem, in order."""
    return [f"Question: {question} ({i})\nAnswer:" for i in range(calls - 1)] + [prompt_of(question)]


def prompt_of(question: str) -> str:
    return f"Question: {question}\nAnswer:"


async def bench_direct(url: str, prompts: list[str], concurrency: int, max_tokens: int) -> dict[str, Any]:
    model = load_model("openai:gemma", base_url=url, cache=False, concurrency=concurrency)
    try:
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(model.generate(GenerateRequest(p, max_tokens=max_tokens)) for p in prompts))
        wall = time.perf_counter() - t0
    finally:
        await model.aclose()
    tokens = sum(c.completion_tokens for c in outs)
    return {"requests": len(outs), "wall_s": wall, "req_per_s": len(outs) / wall, "tok_per_s": tokens / wall,
            "completion_tokens": tokens}


async def bench_broker(url: str, problems: list[Any], task: Any, concurrency: int, max_tokens: int,
                       calls: int) -> dict[str, Any]:
    from harnesslearn.runtime import SolverRuntime
    from harnesslearn.sandbox import Budgets

    model = load_model("openai:gemma", base_url=url, cache=False, concurrency=concurrency)
    source = HARNESS.format(max_tokens=max_tokens, calls=calls)
    # pool start and sandbox preflight happen on entry: they are not part of the measurement
    async with SolverRuntime(model, concurrency=concurrency, warm=False) as rt:
        assert rt.executor is not None
        t0 = time.perf_counter()
        records = await rt.executor.run(source, problems, task_tools(task), Budgets(timeout_s=300, max_tokens=100_000))
        wall = time.perf_counter() - t0
    statuses = sorted({r.status.value for r in records})
    tokens = sum(c.completion_tokens for r in records for c in r.calls if c.kind == "model")
    calls = sum(r.n_calls for r in records)
    return {"requests": calls, "wall_s": wall, "req_per_s": calls / wall, "tok_per_s": tokens / wall,
            "completion_tokens": tokens, "statuses": statuses}


async def bench_local(engine: str, batch: int, max_tokens: int) -> dict[str, Any]:
    model = load_model(f"local:gemma-3-270m?engine={engine}", cache=False, concurrency=batch)
    warm = getattr(model, "warm", None)
    if warm is not None:
        await asyncio.to_thread(warm)
    prompts = [f"Write a short story about the number {i}:" for i in range(batch)]
    out: dict[str, Any] = {"engine": engine}
    try:
        await model.generate(GenerateRequest("Hello", max_tokens=2))
        t0 = time.perf_counter()
        c = await model.generate(GenerateRequest(prompts[0], max_tokens=max_tokens))
        out["single_tok_per_s"] = c.completion_tokens / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        cs = await asyncio.gather(*(model.generate(GenerateRequest(p, max_tokens=max_tokens)) for p in prompts))
        out["batched_tok_per_s"] = sum(x.completion_tokens for x in cs) / (time.perf_counter() - t0)
        out["batch"] = batch
    finally:
        await model.aclose()
    return out


@contextlib.contextmanager
def fake_server() -> Iterator[str]:
    """The echo server of tests/fault_proxy.py in its own process; yields its base URL."""
    script = Path(__file__).resolve().parents[1] / "tests" / "fault_proxy.py"
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(10)


def url_kind(args: argparse.Namespace) -> str:
    return args.base_url or ("fake echo server" if args.fake else "llama_cpp.server (Gemma 3 270M)")


def main() -> None:
    from harnesslearn.fsutil import scratch_cache

    scratch_cache("harnesslearn-bench-")  # never the user's cache: a temp one, the models linked
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", help="use this OpenAI-compatible server (model name 'gemma') instead of starting one")
    ap.add_argument("--fake", action="store_true",
                    help="use an instant echo server (tests/fault_proxy.py, own process): measures the broker's "
                         "own ceiling instead of a real model's speed")
    ap.add_argument("--n", type=int, default=16, help="requests per side")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--calls-per-problem", type=int, default=1, help="model calls the harness makes per problem")
    ap.add_argument("--batch", type=int, default=8, help="concurrent sequences for the embedded model")
    ap.add_argument("--local-max-tokens", type=int, default=32)
    ap.add_argument("--hf", action="store_true", help="also measure the transformers engine (slow to load)")
    ap.add_argument("--skip-local", action="store_true", help="skip part 2 (the embedded model)")
    ap.add_argument("--only-local", action="store_true", help="skip part 1 (broker vs direct)")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = ap.parse_args()

    result: dict[str, Any] = {}
    if not args.only_local:
        result["broker_vs_direct"] = broker_vs_direct(args)
    if not args.skip_local:
        engines = ["llamacpp"] + (["hf"] if args.hf else [])
        result["local"] = [asyncio.run(bench_local(e, args.batch, args.local_max_tokens)) for e in engines]
    if args.json:
        print(json.dumps(result))
        return
    if "broker_vs_direct" in result:
        b = result["broker_vs_direct"]
        for side, r in (("direct", b["direct_runs"][0]), ("broker", b["broker"]), ("direct", b["direct_runs"][1])):
            print(f"{side:>7}: {r['requests']} requests in {r['wall_s']:.2f} s = {r['req_per_s']:.2f} req/s, "
                  f"{r['tok_per_s']:.1f} completion tok/s")
        print(f"ratio broker/direct: {b['ratio_req_per_s']:.3f} (req/s), {b['ratio_tok_per_s']:.3f} (tok/s)"
              f"  [target >= 0.9]  ({b['server']})")
    for r in result.get("local", []):
        print(f"local:gemma-3-270m ({r['engine']}): single {r['single_tok_per_s']:.1f} tok/s, "
              f"{r['batch']} concurrent {r['batched_tok_per_s']:.1f} tok/s")


def broker_vs_direct(args: argparse.Namespace) -> dict[str, Any]:
    """Part 1: one server, the same requests through the broker and directly."""
    from harnesslearn.models.embedded import ensure_gguf
    from harnesslearn.tasks import load_task

    task = load_task("rg:basic_arithmetic")
    problems = task.problems("score", args.n, seed=0)
    prompts = [x for p in problems for x in prompts_of(p.question, args.calls_per_problem)]
    with contextlib.ExitStack() as stack:
        url = args.base_url
        if url is None and args.fake:
            url = stack.enter_context(fake_server())
        if url is None:
            from harnesslearn.models.served import llama_server

            url = stack.enter_context(llama_server(ensure_gguf()))
        asyncio.run(bench_direct(url, ["warm up"], 1, 2))
        # direct, broker, direct: the broker is compared with the mean of the runs around it,
        # so that a drift in the machine's load (shared CPU) does not favour either side
        d1 = asyncio.run(bench_direct(url, prompts, args.concurrency, args.max_tokens))
        broker = asyncio.run(bench_broker(url, problems, task, args.concurrency, args.max_tokens,
                                          args.calls_per_problem))
        d2 = asyncio.run(bench_direct(url, prompts, args.concurrency, args.max_tokens))
    direct = {k: (d1[k] + d2[k]) / 2 for k in ("requests", "wall_s", "req_per_s", "tok_per_s", "completion_tokens")}
    return {"n": args.n, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
            "calls_per_problem": args.calls_per_problem, "server": url_kind(args),
            "broker": broker, "direct_runs": [d1, d2], "direct": direct,
            "ratio_req_per_s": broker["req_per_s"] / direct["req_per_s"],
            "ratio_tok_per_s": broker["tok_per_s"] / direct["tok_per_s"]}

if __name__ == "__main__":
    main()
