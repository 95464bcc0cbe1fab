"""GRPO of Gemma 3 270M (LoRA) as the proposer, Gemma 3 270M as the frozen solver, on one GPU,
for as many updates as fit in a wall-clock budget; then a step-time breakdown, GPU utilisation
and a solver-throughput micro-benchmark.

    PYTHONPATH=/tmp/site:src python3 experiments/h200_grpo.py --model $MODEL_DIR --out $OUT --minutes 7

Training is ``harnesslearn.training.grpo.run_grpo`` (not a copy): this script builds its config
from ``experiments/configs/h200_grpo.yaml`` and instruments the run through the library's public
``GRPOHooks``: the generation and reward phases of every update (timed by the library), the
solver in use (its token counters around each reward phase), and a transformers callback that
stops training before the budget runs out and logs every update to a JSONL file.

Writes into ``--out`` (at most 5 files, each checked against the 16 MiB limit):
- ``grpo_results.json``: settings, isolation used (and the fallbacks tried), reward parts per
  update, step-time breakdown, GPU utilisation overall and per phase, the overlap estimate,
  solver tokens/s inside the reward vs. the backend and raw batched ``generate``;
- ``grpo_log.jsonl``: one line per update (timings, reward parts) and per TRL log;
- ``rollouts.jsonl.gz``: every group (prompt, completions, rewards) when small enough;
- ``adapter/adapter_model.safetensors`` (bf16) + ``adapter/adapter_config.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gzip
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import exp_runtime as rt  # noqa: E402
import exp_stats as st  # noqa: E402

from harnesslearn.training.grpo import GRPOHooks, GRPORun  # noqa: E402

MAX_FILE = 16 * 2**20 - 64 * 1024  # what comes back from the device: 16 MiB a file (keep a margin)
DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "h200_grpo.yaml"


# ---------------------------------------------------------------------- instrumentation
class Instrument(GRPOHooks):
    """Per-update timings and the wall-clock stop: ``run_grpo(hooks=Instrument(...))``."""

    def __init__(self, timeline: rt.Timeline, deadline: float, log_path: Path) -> None:
        self.timeline, self.deadline, self.log_path = timeline, deadline, log_path
        self.updates: list[dict[str, Any]] = []
        self.cur: dict[str, Any] | None = None
        self.solver: Any = None
        self.rollouts: Any = None
        self.isolation: str | None = None
        self.stopped_by_budget = False
        self._before: dict[str, float] | None = None

    def write(self, row: dict[str, Any]) -> None:
        with self.log_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=str, allow_nan=True) + "\n")

    def on_start(self, run: GRPORun) -> None:
        from transformers import TrainerCallback

        self.solver, self.rollouts, self.isolation = run.solver, run.rollouts, run.isolation
        inst = self

        class Clock(TrainerCallback):  # type: ignore[misc]
            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                inst.cur = {"update": int(state.global_step) + 1, "start": time.time(), "gen_s": 0.0,
                            "reward_s": 0.0}

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
                return inst.end_update(control)

            def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
                inst.write({"event": "log", "step": int(state.global_step), "t": round(time.time() - rt.T0, 2),
                            **(logs or {})})

        run.trainer.add_callback(Clock())

    def on_phase_start(self, name: str) -> None:
        if name == "reward":
            self._before = self._solver_counters()

    def on_phase_end(self, name: str, start: float, end: float) -> None:
        before, self._before = (self._before, None) if name == "reward" else (None, self._before)
        extra = self._solver_delta(before, end - start) if before is not None else {}
        self.timeline.add(name, start, end, **extra)
        if self.cur is not None:
            self.cur["gen_s" if name == "generation" else "reward_s"] += end - start
            if extra:
                self.cur.setdefault("solver", []).append(extra)

    def _solver_counters(self) -> dict[str, float]:
        stats = self.solver.stats() if self.solver is not None else {}
        batches = getattr(self.solver, "batches", None)
        return {"calls": stats.get("calls", 0), "prompt_tokens": stats.get("prompt_tokens", 0),
                "completion_tokens": stats.get("completion_tokens", 0),
                "n_batches": len(batches) if batches is not None else -1}

    def _solver_delta(self, before: dict[str, float], seconds: float) -> dict[str, Any]:
        after = self._solver_counters()
        d = {k: after[k] - before[k] for k in ("calls", "prompt_tokens", "completion_tokens")}
        out: dict[str, Any] = {**d, "completion_tok_s": d["completion_tokens"] / seconds if seconds > 0 else None}
        batches = getattr(self.solver, "batches", None)
        if batches is not None and before["n_batches"] >= 0:
            sizes = list(batches[int(before["n_batches"]):])
            out.update(generate_calls=len(sizes), mean_batch=(sum(sizes) / len(sizes)) if sizes else None,
                       max_batch=max(sizes) if sizes else None)
        return out

    def end_update(self, control: Any) -> Any:
        if self.cur is None:
            return control
        cur, self.cur = self.cur, None
        cur["end"] = time.time()
        hist = self.rollouts.history if self.rollouts is not None else None
        if hist:
            cur["reward_parts"] = hist[-1]
        self.updates.append(cur)
        self.timeline.add("update", cur["start"], cur["end"], update=cur["update"])
        row = {"event": "update", **{k: (round(v - rt.T0, 3) if k in ("start", "end") else v) for k, v in cur.items()}}
        self.write(row)
        took = cur["end"] - cur["start"]
        parts = cur.get("reward_parts", {})
        rt.log(f"update {cur['update']}: {took:.1f}s (gen {cur['gen_s']:.1f}s, reward {cur['reward_s']:.1f}s) "
               f"reward={parts.get('reward', float('nan')):.3f} J={parts.get('J', float('nan')):.3f} "
               f"parse={parts.get('parse_rate', float('nan')):.2f}")
        if time.time() + 1.1 * took > self.deadline:
            rt.log(f"stopping: another update (~{took:.0f}s) would pass the wall-clock budget")
            self.stopped_by_budget = True
            control.should_training_stop = True
        return control


# ---------------------------------------------------------------------- micro-benchmarks
def bench_prompts(families: list[str], n: int) -> list[str]:
    """The seed harness's prompts for score-split questions of the training families."""
    from harnesslearn.training.contexts import load_tasks, task_spec

    tasks = load_tasks([task_spec(f) for f in families])
    out: list[str] = []
    for task in tasks.values():
        out += [f"Question: {p.question[:1500]}\nAnswer:" for p in task.problems("score", n, seed=99)]
    return out


def raw_generate(model_dir: str, prompts: list[str], batch: int, new_tokens: int, device: str,
                 static_cache: bool, compile: bool = False) -> dict[str, Any]:
    """Tokens/s of one batched greedy ``generate`` of ``batch`` prompts x ``new_tokens`` new
    tokens each (``min_new_tokens`` forces the full length), after a warm-up call of the same
    shape. With a static cache on CUDA transformers compiles the forward by default; that is
    turned off unless ``compile`` (compiling takes a minute or more, paid in the warm-up)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    model = model.to(device).eval()
    texts = (prompts * (batch // max(1, len(prompts)) + 1))[:batch]
    enc = tok(texts, return_tensors="pt", padding=True).to(device)
    kw: dict[str, Any] = {"do_sample": False, "pad_token_id": tok.pad_token_id, "temperature": None, "top_p": None,
                          "top_k": None}
    if static_cache:
        kw["cache_implementation"] = "static"
        kw["disable_compile"] = not compile

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    with torch.inference_mode():
        t = time.perf_counter()
        model.generate(**enc, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)
        sync()
        warm = time.perf_counter() - t
        t = time.perf_counter()
        model.generate(**enc, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)
        sync()
        dt = time.perf_counter() - t
    del model
    return {"batch": batch, "new_tokens": new_tokens, "prompt_len_padded": int(enc["input_ids"].shape[1]),
            "static_cache": static_cache, "compiled": compile, "warmup_s": warm, "seconds": dt,
            "completion_tok_s": batch * new_tokens / dt}


async def _backend_burst(solver: Any, prompts: list[str], n: int, max_tokens: int) -> None:
    from harnesslearn.models import GenerateRequest

    reqs = [GenerateRequest(prompts[i % len(prompts)], temperature=0.0, max_tokens=max_tokens, stop=("\n",))
            for i in range(n)]
    await asyncio.gather(*(solver.generate(r) for r in reqs))


def backend_burst(solver: Any, prompts: list[str], n: int, max_tokens: int) -> dict[str, Any]:
    """Tokens/s of the solver backend (its dynamic batcher) given ``n`` seed-harness requests at
    once, with no executor in between: the ceiling the reward's sandboxed runs could reach."""
    before = solver.stats()
    batches = getattr(solver, "batches", None)
    nb = len(batches) if batches is not None else 0
    t = time.perf_counter()
    asyncio.run(_backend_burst(solver, prompts, n, max_tokens))
    dt = time.perf_counter() - t
    after = solver.stats()
    toks = after.get("completion_tokens", 0) - before.get("completion_tokens", 0)
    sizes = list(batches[nb:]) if batches is not None else []
    return {"requests": n, "max_tokens": max_tokens, "seconds": dt, "completion_tokens": toks,
            "completion_tok_s": toks / dt if dt > 0 else None, "generate_calls": len(sizes),
            "mean_batch": sum(sizes) / len(sizes) if sizes else None}


RAW_BENCHES = {"raw_generate_static": (True, False), "raw_generate_dynamic": (False, False),
               "raw_generate_static_compiled": (True, True)}


def raw_bench(args: argparse.Namespace, key: str, prompts: list[str]) -> dict[str, Any]:
    static, compiled = RAW_BENCHES[key]
    try:
        res = raw_generate(args.model, prompts, args.bench_batch, args.bench_tokens, "cpu" if args.cpu else "cuda",
                           static, compiled)
        rt.log(f"{key}: {res['completion_tok_s']:.0f} tok/s (warm-up {res['warmup_s']:.1f}s)")
        return res
    except (RuntimeError, ValueError, TypeError) as e:  # OOM, or an option this transformers lacks
        rt.loud(f"{key} failed: {type(e).__name__}: {str(e)[:300]}")
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def run_benchmarks(args: argparse.Namespace, inst: Instrument, prompts: list[str]) -> dict[str, Any]:
    out = {key: raw_bench(args, key, prompts) for key in ("raw_generate_static", "raw_generate_dynamic")}
    if inst.solver is not None and hasattr(inst.solver, "batches"):
        try:
            out["backend_burst"] = backend_burst(inst.solver, prompts, args.bench_batch, 64)
            rt.log(f"backend_burst: {out['backend_burst']['completion_tok_s']:.0f} tok/s")
        except (RuntimeError, ValueError) as e:
            out["backend_burst"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    return out


# ---------------------------------------------------------------------- outputs
def export_adapter(src: Path, dst: Path) -> dict[str, Any]:
    """The LoRA adapter as one bf16 safetensors file + its config, if under the size limit."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = src / "adapter_model.safetensors"
    if not weights.is_file():
        return {"saved": False, "reason": f"no {weights}"}
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in load_file(str(weights)).items()}
    dst.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(dst / "adapter_model.safetensors"), metadata={"format": "pt"})
    shutil.copy(src / "adapter_config.json", dst / "adapter_config.json")
    size = (dst / "adapter_model.safetensors").stat().st_size
    info = {"saved": True, "bytes": size, "params": sum(t.numel() for t in tensors.values()), "dtype": "bfloat16"}
    if size > MAX_FILE:
        shutil.rmtree(dst)
        rt.loud(f"adapter is {size / 2**20:.1f} MiB in bf16, over the 16 MiB limit: not copied to --out")
        info.update(saved=False, reason="over the 16 MiB limit")
    return info


def export_rollouts(src: Path, dst: Path) -> dict[str, Any]:
    if not src.is_file():
        return {"saved": False, "reason": "no rollouts"}
    with src.open("rb") as f, gzip.open(dst, "wb", compresslevel=6) as g:
        shutil.copyfileobj(f, g)
    size = dst.stat().st_size
    if size > MAX_FILE:
        dst.unlink()
        return {"saved": False, "reason": f"{size} bytes compressed, over the limit"}
    return {"saved": True, "bytes": size}


def analyse(inst: Instrument, sampler: rt.GpuSampler, timeline: rt.Timeline, train_wall: float | None,
            bench: dict[str, Any]) -> dict[str, Any]:
    rows = [{"start": u["start"], "end": u["end"], "gen_s": u["gen_s"], "reward_s": u["reward_s"]}
            for u in inst.updates]
    breakdown = st.step_breakdown(rows, train_wall)
    solver_rows = [s for u in inst.updates for s in u.get("solver", [])]
    secs = sum(p["end"] - p["start"] for p in timeline.named("reward"))
    toks = sum(s["completion_tokens"] for s in solver_rows)
    inside = toks / secs if secs > 0 else None
    sizes = [s["mean_batch"] for s in solver_rows if s.get("mean_batch") is not None]
    raw = bench.get("raw_generate_static", {}).get("completion_tok_s")
    burst = bench.get("backend_burst", {}).get("completion_tok_s")
    return {
        "step_breakdown": breakdown,
        "gpu_utilisation": st.phase_utilisation(sampler.samples, timeline.phases),
        "solver_in_reward": {
            "completion_tokens": toks, "reward_seconds": secs, "completion_tok_s": inside,
            "calls": sum(s["calls"] for s in solver_rows),
            "mean_batch": sum(sizes) / len(sizes) if sizes else None,
            "ratio_to_raw_generate_static": st.throughput_ratio(inside, raw),
            "ratio_to_backend_burst": st.throughput_ratio(inside, burst),
            "note": "tokens/s of the solver while the reward runs (many sandboxed harness runs calling it at "
                    "once) over raw batched generate of the same model on the same GPU; the inside figure "
                    "counts tokens up to each stop string, the raw one forces full-length sequences",
        },
    }


def finish(results: dict[str, Any], inst: Instrument, timeline: rt.Timeline, sampler: rt.GpuSampler
           ) -> dict[str, Any]:
    """The raw material behind the summaries, added to ``results`` (updates, phases, samples)."""
    results["updates"] = [{k: (round(v - rt.T0, 3) if k in ("start", "end") else v) for k, v in u.items()}
                          for u in inst.updates]
    results["timeline"] = list(timeline.phases)
    results["gpu_samples"] = {"source": sampler.source, "interval_s": sampler.interval,
                              "t_util_mem": list(sampler.samples)}
    results["wall_s"] = round(time.time() - rt.T0, 1)
    return results


# ---------------------------------------------------------------------- main
def build_config(args: argparse.Namespace, work: Path) -> Any:
    from harnesslearn.training.config import GRPOTrainConfig, load_config

    cfg = load_config(GRPOTrainConfig, args.config)
    over: dict[str, Any] = {
        "model": f"hf:{args.model}",
        "solver": args.solver or f"hf:{args.model}?max_batch={args.solver_max_batch}",
        "isolation": args.isolation, "worker_python": args.worker_python,
        "output_dir": str(work / "grpo"), "run_dir": str(work / "run"), "rollouts": str(work / "rollouts.jsonl"),
    }
    for name in ("learning_rate", "num_generations", "contexts_per_update", "contexts_per_epoch", "micro_batch",
                 "max_completion_length", "n_score", "n_feedback", "concurrency", "max_steps", "timeout_s"):
        value = getattr(args, name)
        if value is not None:
            over[name] = value
    if args.families:
        over["families"] = args.families.split(",")
    if args.cpu:
        over.update(use_cpu=True, bf16=False)
    return dataclasses.replace(cfg, **over)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="Gemma 3 270M transformers folder (policy and solver)")
    p.add_argument("--out", required=True, help="results folder (the device's $OUT)")
    p.add_argument("--minutes", type=float, default=7.0, help="wall-clock budget of the whole script")
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="GRPOTrainConfig YAML")
    p.add_argument("--isolation", default="auto", choices=rt.ISOLATIONS,
                   help="sandbox isolation (auto: bwrap, else landlock; none only when asked for)")
    p.add_argument("--worker-python", default=None, help="sandbox worker interpreter (default: found)")
    p.add_argument("--work", default="/tmp/h200_grpo_work", help="scratch folder (checkpoints, store)")
    p.add_argument("--solver", default=None, help="solver spec (default: hf:MODEL?max_batch=N)")
    p.add_argument("--solver-max-batch", type=int, default=128, help="solver batcher's largest batch")
    p.add_argument("--families", default=None, help="comma-separated training families (default: the YAML's)")
    for name, typ in (("learning-rate", float), ("num-generations", int), ("contexts-per-update", int),
                      ("contexts-per-epoch", int), ("micro-batch", int), ("max-completion-length", int),
                      ("n-score", int), ("n-feedback", int), ("concurrency", int), ("max-steps", int),
                      ("timeout-s", float)):
        p.add_argument(f"--{name}", type=typ, default=None, help="override the YAML's value")
    p.add_argument("--bench-batch", type=int, default=512, help="micro-benchmark batch size")
    p.add_argument("--bench-tokens", type=int, default=64, help="micro-benchmark new tokens per sequence")
    p.add_argument("--reserve-s", type=float, default=75.0, help="seconds kept for benchmarks and export")
    p.add_argument("--bench-compile", action=argparse.BooleanOptionalAction, default=True,
                   help="also benchmark a torch.compiled static-cache generate, last (GPU only)")
    p.add_argument("--cpu", action="store_true", help="CPU smoke run (no bf16, no CUDA)")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    rt.restart_clock()
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ["HARNESSLEARN_CACHE"] = "0"  # every solver call really runs: the throughput figures are real
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log_path = out / "grpo_log.jsonl"
    log_path.unlink(missing_ok=True)
    deadline = rt.T0 + args.minutes * 60 - args.reserve_s
    timeline, sampler = rt.Timeline(), rt.GpuSampler().start()
    inst = Instrument(timeline, deadline, log_path)
    results: dict[str, Any] = {"label": "Gemma 3 270M proposer + solver, GRPO (LoRA), small-model result",
                               "argv": sys.argv[1:] if argv is None else argv, "status": "started"}
    code = 1
    try:
        fds = rt.raise_fd_limit()
        cfg = build_config(args, work)
        if cfg.concurrency is not None:
            cfg = dataclasses.replace(cfg, concurrency=rt.safe_concurrency(cfg.concurrency, fds["soft"]))
        results["open_files_limit"] = fds
        results["config"] = dataclasses.asdict(cfg)
        rt.log(f"GRPO: {cfg.contexts_per_update} contexts x {cfg.num_generations} candidates an update, "
               f"completions <= {cfg.max_completion_length} tokens, lr {cfg.learning_rate}, budget {args.minutes} min")
        from harnesslearn.training.grpo import run_grpo

        t = time.time()
        summary = run_grpo(cfg, hooks=inst)
        results["isolation"] = rt.isolation_record(args.isolation, inst.isolation, args.worker_python)
        results["train"] = {**summary, "stopped_by_budget": inst.stopped_by_budget}
        train_wall = summary.get("seconds", {}).get("train")
        timeline.add("run_grpo", t, time.time())
        results["files"] = {"adapter": export_adapter(Path(summary["adapter"]), out / "adapter"),
                            "rollouts": export_rollouts(Path(summary["rollouts"]), out / "rollouts.jsonl.gz")}
        prompts = bench_prompts(cfg.families, 8)
        with timeline.phase("benchmark"):
            bench = run_benchmarks(args, inst, prompts)
        results["benchmark"] = bench
        results.update(analyse(inst, sampler, timeline, train_wall, bench))
        results["status"] = "ok"
        code = 0
        # last, after a first write, and only inside the budget: compiling may take a minute or two
        if args.bench_compile and not args.cpu and time.time() < rt.T0 + args.minutes * 60 - 30:
            rt.write_json(out / "grpo_results.json", {**finish(results, inst, timeline, sampler),
                                                       "note": "written before the compiled benchmark"})
            with timeline.phase("benchmark_compiled"):
                bench["raw_generate_static_compiled"] = raw_bench(args, "raw_generate_static_compiled", prompts)
            inside = results["solver_in_reward"]["completion_tok_s"]
            results["solver_in_reward"]["ratio_to_raw_generate_static_compiled"] = st.throughput_ratio(
                inside, bench["raw_generate_static_compiled"].get("completion_tok_s"))
    except Exception as e:  # noqa: BLE001 - write what we have (device time is scarce), then fail loudly
        results["status"] = "error"
        results["error"] = f"{type(e).__name__}: {e}"
        results["traceback"] = traceback.format_exc()[-4000:]
        rt.loud(f"h200_grpo failed: {results['error']}")
        traceback.print_exc()
    finally:
        sampler.stop()
        rt.write_json(out / "grpo_results.json", finish(results, inst, timeline, sampler))
        rt.log(f"wrote {out / 'grpo_results.json'} ({results['status']}, {len(inst.updates)} updates)")
    return code


if __name__ == "__main__":
    sys.exit(main())
