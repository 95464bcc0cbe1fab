"""Seconds per phase of a GRPO update with the project's trainer and reward, new settings against today's (issue 63).

Runs N updates of C contexts x G candidates twice, each in its own process (so peak memory is that run's):
``baseline`` with today's settings and ``new`` with ``--new KEY=VALUE`` on top (default: ``grpo.stream_reward=true
grpo.reward_cap_s=30``); ``--set KEY=VALUE`` applies to both. Per run, from ``state/updates.jsonl``: the median
and total seconds of generation, reward and update per update (``update``: from the reward's end to the optimizer
step's end), the tokens of each update (TRL's ``num_tokens``, prompt + completion, padding left out), the peak
memory (CUDA's ``max_memory_allocated`` when a GPU trains, else the process's max RSS) and the update pass's
achieved TFLOP/s. FLOPs are counted as 6 x (trainable + frozen parameters) x the update's tokens (forward and
backward of a dense model): attention's own FLOPs, the recomputed forward of gradient checkpointing and the frozen
weights' skipped weight gradients are not counted, so it is model FLOPs, not the card's. Ratios: new / baseline.

Without ``--model``, a tiny random Qwen2 (``transfer/smoke.tiny_qwen2``) and the rule-based ``python:`` gcd solver:
that run proves the script on the CPU and measures nothing of the GPU's speed.

    .venv/bin/python benchmarks/grpo_update.py --updates 2 --contexts 2 --generations 2 --label cpu-tiny
    python3 benchmarks/grpo_update.py --model hf:/models/qwen --solver 'openai:qwen?base_url=...' \\
        --family rg:gcd --updates 3 --contexts 40 --generations 8 --set vllm.use=true --label h100-paper
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "results" / "grpo_update.json"
NEW = ("grpo.stream_reward=true", "grpo.reward_cap_s=30")


def _pairs(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One run of ``run_grpo`` with ``spec['config']``; its row."""
    from harnesslearn.training.config import GRPOTrainConfig, build_config
    from harnesslearn.training.grpo import GRPOHooks, GRPORun, run_grpo

    params: dict[str, int] = {}

    class Count(GRPOHooks):
        def on_start(self, run: GRPORun) -> None:
            ps = list(run.trainer.model.parameters())
            params["total"] = sum(p.numel() for p in ps)
            params["trainable"] = sum(p.numel() for p in ps if p.requires_grad)

    cfg = build_config(GRPOTrainConfig, spec["config"])
    t0 = time.perf_counter()
    summary = run_grpo(cfg, hooks=Count())
    wall = time.perf_counter() - t0
    recs = [json.loads(line) for line in (Path(summary["state"]) / "updates.jsonl").read_text().splitlines()]
    seen = [float(r.get("trl", {}).get("num_tokens", 0.0)) for r in recs]
    tokens = [b - a for a, b in zip([0.0, *seen], seen, strict=False)]
    phases = {k: [float(r["seconds"].get(k, 0.0)) for r in recs] for k in ("generation", "reward", "update", "step")}
    flops = [6 * params.get("total", 0) * t for t in tokens]
    try:
        import torch

        cuda = torch.cuda.is_available() and not cfg.trainer.use_cpu
    except ImportError:
        cuda = False
    peak = (max((float(r.get("peak_gb_this_process", 0.0)) for r in recs), default=0.0), "cuda_max_allocated") \
        if cuda else (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "max_rss")
    return {"updates": len(recs), "wall_s": round(wall, 2), "params": params,
            "seconds_median": {k: round(statistics.median(v), 3) for k, v in phases.items() if v},
            "seconds_total": {k: round(sum(v), 3) for k, v in phases.items()},
            "tokens_per_update": tokens, "peak_gb": round(peak[0], 3), "peak_kind": peak[1],
            "update_tflops": round(sum(flops) / max(1e-9, sum(phases["update"])) / 1e12, 6),
            "reward_parts": [r.get("reward_parts") for r in recs]}


def config(a: argparse.Namespace, work: Path, name: str, extra: dict[str, Any]) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "model": a.model, "solver": a.solver, "families": a.family, "seed": a.seed,
        "splits.n_feedback": 2, "splits.n_score": a.n_score, "proposer.n_traces": 1,
        "proposer.sampling.max_tokens": a.max_tokens, "grpo.num_generations": a.generations,
        "grpo.contexts_per_update": a.contexts, "grpo.contexts_per_epoch": a.contexts * a.updates,
        "trainer.micro_batch": a.generations, "trainer.max_steps": a.updates, "trainer.report_to": "none",
        "trainer.save_steps": 10**6, "output_dir": str(work / name), "rollouts": str(work / name / "rollouts.jsonl"),
    }
    return {**cfg, **_pairs(a.set), **extra}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--updates", type=int, default=2, help="N updates per run")
    p.add_argument("--contexts", type=int, default=2, help="C contexts per update")
    p.add_argument("--generations", type=int, default=2, help="G candidates per context")
    p.add_argument("--n-score", type=int, default=2, help="score-split problems per candidate")
    p.add_argument("--max-tokens", type=int, default=16, help="completion length limit")
    p.add_argument("--model", default=None, help="the policy (default: a tiny random Qwen2 built here)")
    p.add_argument("--solver", default=None, help="solver spec (default: the smoke's rule-based python: solver)")
    p.add_argument("--family", action="append", default=None, help="training family (repeatable; default rg:gcd)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], help="KEY=VALUE for both runs (the GRPO config's keys)")
    p.add_argument("--new", action="append", default=None, help=f"KEY=VALUE of the new run (default: {' '.join(NEW)})")
    p.add_argument("--label", default="run")
    p.add_argument("--work", default=None, help="working folder (default: a temporary one)")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        row = child(json.loads(Path(a.child).read_text()))
        Path(a.child).with_suffix(".out.json").write_text(json.dumps(row))
        return

    from harnesslearn.transfer import smoke

    work = Path(a.work or tempfile.mkdtemp(prefix="grpo-update-"))
    tiny = a.model is None
    if tiny:
        a.model = str(smoke.tiny_qwen2(work / "model")) if not (work / "model" / "config.json").is_file() \
            else str(work / "model")
    a.solver = a.solver or smoke.SOLVER
    a.family = a.family or [f"rg:{smoke.FAMILY}"]
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        gpu = None
    if gpu is None:
        a.set = ["trainer.use_cpu=true", *a.set]
    new = _pairs(list(a.new) if a.new is not None else list(NEW))
    rows: dict[str, Any] = {}
    for name, extra in (("baseline", {}), ("new", new)):
        spec = work / f"{name}.json"
        spec.write_text(json.dumps({"config": config(a, work, name, extra)}))
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(spec)], check=True,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
        rows[name] = json.loads(spec.with_suffix(".out.json").read_text())
        r = rows[name]
        print(f"{name}: median s/update " + " ".join(f"{k} {v}" for k, v in r["seconds_median"].items())
              + f" | tokens/update {r['tokens_per_update']} | peak {r['peak_gb']} GB ({r['peak_kind']}) | update "
              f"{r['update_tflops']} TFLOP/s", flush=True)

    def ratio(x: float, y: float) -> float | None:
        return round(x / y, 3) if y else None

    b, n = rows["baseline"], rows["new"]
    ratios = {f"seconds_{k}": ratio(n["seconds_total"][k], b["seconds_total"][k]) for k in b["seconds_total"]}
    ratios |= {"update_tflops": ratio(n["update_tflops"], b["update_tflops"]), "peak_gb": ratio(n["peak_gb"], b["peak_gb"])}
    print("new / baseline: " + " ".join(f"{k} {v}" for k, v in ratios.items()), flush=True)
    row = {"benchmark": "grpo_update", "label": a.label, "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "what": ("a tiny random Qwen2 on the CPU: proves the script, measures nothing of the GPU's speed" if tiny
                    else "the model given"),
           "machine": {"cpus": os.cpu_count(), "gpu": gpu, "platform": platform.platform(),
                       "python": sys.version.split()[0], "load_avg_start": os.getloadavg()},
           "shape": {"updates": a.updates, "contexts": a.contexts, "generations": a.generations, "n_score": a.n_score,
                     "max_tokens": a.max_tokens, "model": a.model if not tiny else "tiny-qwen2 (transfer/smoke)",
                     "solver": a.solver, "families": a.family},
           "settings": {"both": _pairs(a.set), "new": new},
           "flops": "6 x (trainable + frozen params) x update tokens; no attention, no checkpointing recompute",
           "baseline": b, "new": n, "ratio_new_over_baseline": ratios}
    out = Path(a.out)
    old = json.loads(out.read_text()) if out.is_file() else []
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([*old, row], indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
