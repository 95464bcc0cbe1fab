"""Side by side with the peers: harnesslearn (sequential, independent), GEPA and OpenEvolve on the
same tasks, splits, solver, proposer model and proposer-call budget.

    .venv/bin/python benchmarks/peers/run.py --tasks rg:simple_geometry,rg:gcd,rg:basic_arithmetic,musique \\
        --proposer-calls 4 --seeds 1

What it does (one command, from a clean checkout):
1. Creates the peers' own virtual environments if missing (``benchmarks/peers/.venvs/``, pinned
   ``gepa==0.1.4`` and ``openevolve==0.4.0``; their dependencies clash with ours).
2. Starts ONE ``python -m llama_cpp.server`` serving an embedded model (``--model``, default the
   Qwen2.5-Coder 0.5B Instruct GGUF assembled from PyPI): it is both the solver and the proposer
   of every system.
3. Starts the driver's service (``service.py``): our sandboxed evaluation for the peers (feedback
   and score splits only) and a counting proxy of the model server that every system's proposer
   goes through, refusing calls over the budget.
4. For each task and seed, runs every system at ``--proposer-calls`` N: harnesslearn ``adapt``
   sequential (N/K rounds x K candidates) and independent (N proposals from the seed), GEPA
   (N reflection calls), OpenEvolve (N iterations). Each returns one harness, selected on the
   score split. Then the driver evaluates it once on the test split (which no system saw).
5. Writes ``--out``: ``results.json`` (every number), ``results.md`` (the table), ``test_J_vs_proposer_calls.png``.

Small-model figures: with a 0.5B model as proposer and solver they say how the systems behave
at this size, not what they do with the paper's models.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import (  # this folder is on sys.path: the script's own
    DEFAULT_SYSTEMS,
    LABELS,
    SYSTEMS,
    BestTracker,
    Coalesced,
    Ledger,
    gepa_validity,
    hl_system,
    mean_by_system,
    render_table,
    slug,
    style,
    summarise_oe_diff_log,
)

from harnesslearn.models.served import llama_server
from harnesslearn.propose.prompt import packaged_digest

HERE = Path(__file__).resolve().parent

PEERS = {"gepa": "gepa==0.1.4", "openevolve": "openevolve==0.4.0"}
ALIAS = "qwen"  # the model's name on the server we start (--served-name for one already running)


def log(msg: str) -> None:
    sys.stderr.write(f"[peers {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------- environments, server
Peer = tuple[Path, str | None]  # (the interpreter that runs the peer, a folder to put first on its path)


def ensure_venv(name: str, root: Path, wheels: str | None = None) -> Peer:
    """The peer's own environment, created and pinned when missing: a venv from the registry, or, with
    ``wheels`` (a folder of wheels: a machine without the internet, e.g. the GPU machine), a folder
    installed offline with ``pip --target`` that this interpreter runs with (its image may have no venv)."""
    target = root / (f"{name}-site" if wheels else name)
    stamp = target / ".pinned"
    py = Path(sys.executable) if wheels else target / "bin" / "python"
    done = (py.exists() and stamp.exists() and stamp.read_text().strip() == PEERS[name])
    if not done:
        log(f"creating the {name} environment ({PEERS[name]}) in {target}")
        if wheels:
            shutil.rmtree(target, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels,
                            "--target", str(target), PEERS[name]], check=True)
        else:
            base = shutil.which("python3.11") or shutil.which("python3") or sys.executable
            subprocess.run([base, "-m", "venv", "--clear", str(target)], check=True)
            subprocess.run([str(py), "-m", "pip", "install", "-q", PEERS[name]], check=True)
        stamp.write_text(PEERS[name])
    return py, str(target) if wheels else None


def task_spec(name: str) -> str:
    """``musique`` is short for the shared MuSiQue dev file with F1 as the score (partial credit;
    the 0.5B model's exact match is near 0 everywhere)."""
    if name == "musique":
        return "musique:musique_dev_with_paragraphs.jsonl?metric=f1"
    return name if ":" in name else f"rg:{name}"


# ---------------------------------------------------------------------- the driver
class Driver:
    def __init__(self, args: argparse.Namespace, llm_url: str, venvs: dict[str, Peer]) -> None:
        from harnesslearn.models import load_model
        from harnesslearn.runtime import SolverRuntime
        from harnesslearn.sandbox import Budgets

        self.args, self.llm_url, self.venvs = args, llm_url, venvs
        self.budgets = Budgets(timeout_s=args.timeout)
        self.solver = load_model(f"openai:{args.served_name}", base_url=llm_url, cache=False, timeout=1800.0)
        # shards:K: K trusted processes, each with its own client to the same (counting) URL, built from the spec
        sharded = f"openai:{args.served_name}?base_url={llm_url}&timeout=1800"
        self.runtime = SolverRuntime(self.solver if args.executor == "local" else sharded, executor=args.executor,
                                     concurrency=args.concurrency, warm=False)
        self.executor: Any = None
        self.test_cache: dict[tuple[str, int, str], asyncio.Future[Any]] = {}
        self.test_solver_calls = 0
        self.test_s = 0.0
        self.work = Path(args.out) / "work"

    async def start(self) -> None:
        from service import Service

        await self.runtime.__aenter__()
        self.executor = self.runtime.executor
        self.svc = Service(asyncio.get_running_loop(), self.executor, self.llm_url, self.budgets).start()

    async def close(self) -> None:
        self.svc.close()
        await self.runtime.aclose()  # the executor, then the solver

    async def test_eval(self, task: Any, seed: int, h: Any) -> Any:
        """The test-split evaluation of ``h`` (once per harness: it is reporting, not search; runs in parallel
        that ask for the same one share its single evaluation)."""
        from harnesslearn.evaluation import evaluate

        key = (task.spec, seed, h.id)
        if key not in self.test_cache:
            async def once() -> Any:
                ev = await evaluate(h, task, "test", self.args.n_test, seed, self.executor, self.budgets,
                                    progress=False)
                self.test_solver_calls += ev.solver_calls
                self.test_s += ev.wall_s
                return ev
            self.test_cache[key] = asyncio.ensure_future(once())
        return await asyncio.shield(self.test_cache[key])

    def context(self, system: str, task: Any, seed: int) -> Any:
        from service import RunContext

        a = self.args
        splits = {"feedback": task.problems("feedback", a.n_feedback, seed),
                  "score": task.problems("score", a.n_score, seed)}
        return RunContext(system, task, seed, splits, a.proposer_calls, Ledger(system),
                          BestTracker(len(splits["score"])))

    def peer_config(self, system: str, task: Any, seed: int, ctx: Any, seed_src: str, run_dir: Path) -> dict[str, Any]:
        from harnesslearn.harness import runtime_api_doc

        a = self.args
        return {
            "service": self.svc.run_url(ctx), "llm_base": self.svc.llm_base(ctx), "model": self.args.served_name,
            "seed_source": seed_src, "budget": a.proposer_calls, "seed": seed,
            "temperature": a.temperature, "max_tokens": a.max_tokens,
            "task_description": task.description[:1500], "api": runtime_api_doc().strip(),
            "feedback_ids": [p.id for p in ctx.splits["feedback"]], "score_ids": [p.id for p in ctx.splits["score"]],
            "minibatch": min(3, len(ctx.splits["feedback"])),
            "max_metric_calls": 200 * a.proposer_calls * (a.n_score + a.n_feedback),  # a safety cap only
            "run_dir": str(run_dir),
        }

    async def run_peer(self, system: str, task: Any, seed: int, ctx: Any, seed_src: str) -> dict[str, Any]:
        run_dir = self.work / ctx.key
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        cfg_path, out_path = run_dir / "config.json", run_dir / "result.json"
        cfg_path.write_text(json.dumps(self.peer_config(system, task, seed, ctx, seed_src, run_dir / "state"), indent=1))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PEERS_SERVICE"] = self.svc.run_url(ctx)
        env["OPENAI_API_KEY"] = "EMPTY"
        runner = HERE / ("gepa_runner.py" if system == "gepa" else "openevolve_runner.py")
        python, site = self.venvs[system]
        path = [*([site] if site else []), *([str(HERE / "oe_hook")] if system == "openevolve" else [])]
        if path:
            env["PYTHONPATH"] = os.pathsep.join(path)
        if system == "openevolve":
            env["OE_DIFF_LOG"] = str(run_dir / "diffs.jsonl")
        with open(run_dir / "runner.log", "wb") as lf:
            proc = await asyncio.create_subprocess_exec(str(python), str(runner), str(cfg_path),
                                                        str(out_path), stdout=lf, stderr=lf, env=env, cwd=run_dir)
            rc = await proc.wait()
        if rc != 0 or not out_path.exists():
            tail = (run_dir / "runner.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"{system} runner exited {rc}: {' | '.join(tail)[:300]}")
        out: dict[str, Any] = json.loads(out_path.read_text())
        if system == "openevolve":
            p = run_dir / "diffs.jsonl"
            out["diffs"] = summarise_oe_diff_log(p.read_text().splitlines() if p.exists() else [])
        return out

    async def run_hl(self, system: str, task: Any, seed: int, ctx: Any, seed_h: Any) -> dict[str, Any]:
        from harnesslearn.adapt import adapt
        from harnesslearn.models import load_model
        from harnesslearn.settings.adapt import AdaptSettings
        from harnesslearn.settings.groups import (
            MemorySettings,
            ProposerSettings,
            RuntimeSettings,
            Sampling,
            Splits,
        )

        a = self.args
        strategy, with_memory, trained, fmt = hl_system(system)
        run_dir = self.work / ctx.key
        shutil.rmtree(run_dir, ignore_errors=True)
        # off unless +mem, whatever the environment: stretch 13 (session 42) ran with $HARNESSLEARN_CACHE_DIR set, so
        # the default memory was on and the plain systems were shown what earlier runs of the benchmark had stored
        memory = MemorySettings(enabled=False)
        if with_memory:  # a copy of the shipped memory per run: no run reads what another one added
            from harnesslearn.memory import shipped_copy

            path = run_dir.with_name(run_dir.name + ".memory.sqlite")
            shipped_copy(path)
            memory = MemorySettings(enabled=True, k=a.memory_k, path=str(path))
        k = a.candidates if strategy == "sequential" else a.proposer_calls
        rounds = a.proposer_calls // a.candidates if strategy == "sequential" else 1
        settings = AdaptSettings(
            strategy=strategy, rounds=rounds, candidates=k, seed=seed, budgets=self.budgets,
            splits=Splits(n_feedback=a.n_feedback, n_score=a.n_score, n_test=a.n_test),
            proposer=ProposerSettings(format=fmt, sampling=Sampling(temperature=a.temperature, max_tokens=a.max_tokens)),
            runtime=RuntimeSettings(concurrency=a.concurrency), memory=memory)
        name = a.trained_proposer if trained else a.served_name  # a LoRA adapter is served under its own name
        # chat-prefill needs the server to continue the open assistant turn (vLLM's continue_final_message)
        proposer = load_model(f"openai:{name}", base_url=self.svc.llm_base(ctx), cache=False, timeout=1800.0,
                              prefill=fmt == "chat-prefill")

        async def efn(h: Any, t: Any, split: str, n: int, s: int, ex: Any, b: Any, progress: bool) -> Any:
            if split == "test":  # adapt reports the seed and its best on test: the driver's one evaluation
                return await self.test_eval(t, s, h)
            return await self.svc.run_eval(ctx, h, split, t.problems(split, n, s))

        try:
            res = await adapt(task, self.solver, proposer, settings, run_dir=run_dir, seed_harness=seed_h,
                              executor=self.executor, evaluate_fn=efn, progress=False)
        finally:
            await proposer.aclose()
        return {"best_source": None, "best_harness_id": res.best_harness_id, "adapt": res.to_json()}

    async def run_zoo(self, task: Any, ctx: Any, seed: int) -> dict[str, Any]:
        """The zoo harnesses that apply to the task, each on the score split (counted like every system's
        evaluations); the best of them there, whatever the seed scores: what the proposers are set against."""
        from harnesslearn import zoo

        async def score_J(h: Any) -> float | None:
            return (await self.svc.run_eval(ctx, h, "score", ctx.splits["score"])).J  # type: ignore[no-any-return]

        hs, js, top = await zoo.score_all(task, seed, score_J)
        best = hs[top if top is not None else next(iter(hs))]
        return {"best_source": best.source, "picked": best.name, "score_J": {hs[n].name: j for n, j in js.items()}}

    async def one(self, system: str, task: Any, seed: int) -> dict[str, Any]:
        from harnesslearn.harness import Harness
        from harnesslearn.stats import bootstrap_ci
        from harnesslearn.zoo import default_seed, near

        seed_h = default_seed(task)
        ctx = self.context(system, task, seed)
        row: dict[str, Any] = {"task": task.spec, "seed": seed, "system": system,
                               "proposer_budget": self.args.proposer_calls}
        self.svc.begin(ctx)
        t0 = time.perf_counter()
        try:
            if system.startswith("hl-"):
                out = await self.run_hl(system, task, seed, ctx, seed_h)
                best_h = Harness(ctx.tracker.sources.get(out["best_harness_id"]) or seed_h.source)
                if best_h.id != out["best_harness_id"]:  # not a score-split best (cannot happen): the store's file
                    path = Path(out["adapt"]["run_dir"]) / "harnesses" / f"{out['best_harness_id']}.py"
                    best_h = Harness(path.read_text(encoding="utf-8"))
            else:
                out = await (self.run_zoo(task, ctx, seed) if system == "zoo"
                             else self.run_peer(system, task, seed, ctx, seed_h.source))
                best_h = Harness(out["best_source"])
        except Exception as e:  # noqa: BLE001 - the table says why instead of a number
            self.svc.end(ctx)
            log(f"{system} on {task.spec} seed {seed} failed: {e}")
            row.update({"error": str(e)[:300], "ledger": ctx.ledger.to_json(), "wall_s": time.perf_counter() - t0})
            return row
        row["wall_s"] = time.perf_counter() - t0
        self.svc.end(ctx)
        row["ledger"] = ctx.ledger.to_json()
        row["infra_failures"] = ctx.infra_failures
        row["returned_harness_id"] = best_h.id
        row["returned_is_score_best"] = best_h.id == ctx.tracker.best_id
        row["returned_source"] = best_h.source
        row["returned_nearest_zoo"] = near(best_h.source)  # >= 0.8: a near-copy of what the proposer was shown
        row["score_J"] = _score_of(ctx, best_h.id)
        row["validity"] = validity(system, out, ctx, seed_h.id)
        row["peer"] = {k: v for k, v in out.items() if k not in ("best_source",)}
        # the test split, once per harness, after the system has finished
        ev = await self.test_eval(task, seed, best_h)
        sev = await self.test_eval(task, seed, seed_h)
        scores = [p.score for p in ev.problems if p.score is not None]
        row.update({"test_J": ev.J, "test_ci": bootstrap_ci(scores), "seed_test_J": sev.J,
                    "seed_test_ci": bootstrap_ci([p.score for p in sev.problems if p.score is not None]),
                    "test_n": ev.n})
        curve = [(0, sev.J)]
        for calls, _, hid in ctx.tracker.points:
            if hid == seed_h.id or system == "zoo":  # the zoo spends no proposer call: a level, not a curve
                continue
            if self.args.curve or hid == best_h.id:
                cur = await self.test_eval(task, seed, Harness(ctx.tracker.sources[hid]))
                curve.append((calls, cur.J))
        curve.append((ctx.ledger.proposer_calls, ev.J))
        row["curve"] = curve
        row["score_best_points"] = ctx.tracker.points
        row["evaluated_harnesses"] = [{"id": h, "invalid_reason": ctx.sources_seen.get(h), "source": src}
                                      for h, src in ctx.sources.items()]
        log(f"{system} on {task.spec} seed {seed}: test J {ev.J} (seed {sev.J}), {row['validity']}, "
            f"{ctx.ledger.proposer_calls} proposer calls, {ctx.ledger.solver_calls} solver calls, {row['wall_s']:.0f} s")
        return row


def _score_of(ctx: Any, hid: str) -> float | None:
    for _, J, h in ctx.tracker.points:
        if h == hid:
            return float(J)
    return None


def hl_validity(a: dict[str, Any]) -> dict[str, Any]:
    """harnesslearn's proposals: valid under the strict edit rules (an edit that leaves the parent as it
    was is invalid, ``no_change``, so no valid proposal can reproduce its parent), with the invalid reasons."""
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(a["invalid_reasons"].items()))
    return {"proposals": a["proposals"], "valid": a["valid_proposals"], "note": f"invalid: {reasons}" if reasons else ""}


def validity(system: str, out: dict[str, Any], ctx: Any, seed_id: str) -> dict[str, Any]:
    """Proposals and how many were valid, in each system's own terms, with a note."""
    if system.startswith("hl-"):
        return hl_validity(out["adapt"])
    if system == "zoo":
        return {"proposals": 0, "valid": 0, "note": f"no proposer: {len(out['score_J'])} zoo harnesses on the score "
                f"split, picked {out['picked']}"}
    if system == "gepa":
        evaluated = [{"id": h, "source": src, "invalid_reason": ctx.sources_seen.get(h)} for h, src in ctx.sources.items()]
        return gepa_validity(out["proposals"], evaluated, out.get("failed_reflection_calls", 0))
    d = out["diffs"]
    children = {h: r for h, r in ctx.sources_seen.items() if h != seed_id}
    valid = sum(1 for r in children.values() if r is None)
    strict = d["children_all_blocks_matched"]
    note = (f"{d['blocks_skipped']} of {d['blocks']} SEARCH blocks skipped unmatched; "
            f"{d['children_dropped_no_match']} dropped (no block matched), "
            f"{d['children_with_skipped_blocks']} kept with blocks skipped, {d['malformed']} malformed, "
            f"{d['no_blocks']} without blocks; {strict} with every block matched")
    return {"proposals": ctx.ledger.proposer_calls, "valid": valid, "strict_valid": strict, "note": note, **d}


# ---------------------------------------------------------------------- outputs
def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    ncols = min(3, len(tasks))
    nrows = -(-len(tasks) // ncols)
    side = 4.8  # inches beside the panels, for the one legend
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols + side, 3.4 * nrows), squeeze=False)
    dodge = {s: 0.04 * (i - (len(SYSTEMS) - 1) / 2) for i, s in enumerate(SYSTEMS)}  # overlapping lines stay visible
    legend: dict[str, Any] = {}  # one legend for the figure, beside the panels (in each panel it hid the curves)
    for ax, t in zip(list(axes.flat)[:len(tasks)], tasks, strict=True):
        drawn = 0
        for r in rows:
            if r["task"] != t or r.get("error") or not r.get("curve"):
                continue
            xs = [c[0] + dodge[r["system"]] for c in r["curve"]]
            ys = [c[1] if c[1] is not None else float("nan") for c in r["curve"]]
            color, marker = style(r["system"])
            first = r["seed"] == rows[0]["seed"]
            if r["system"] == "zoo":  # no proposer calls: its test J as a level across the plot
                if r.get("test_J") is not None:
                    line = ax.axhline(r["test_J"], color=color, alpha=0.7, linestyle=":" if first else "-.")
                    legend.setdefault(LABELS["zoo"], line)
                    drawn += 1
                continue
            (line,) = ax.step(xs, ys, where="post", color=color, alpha=0.85, linestyle="-" if first else "--",
                              marker=marker, markersize=4)
            legend.setdefault(LABELS[r["system"]], line)
            drawn += 1
        if not drawn:
            ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes, color="0.4")
        ax.set_title(t.split("?")[0], fontsize=9)
        ax.set_xlabel("proposer calls (systems dodged)")
        ax.set_ylabel("test J of the score-split best")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    order = [LABELS[s] for s in SYSTEMS if LABELS[s] in legend]
    fig.legend([legend[k] for k in order], order, loc="center right", fontsize=7,
               title="first seed: solid (zoo: dotted); the others: dashed", title_fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1 - side / (4.2 * ncols + side), 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(rows: list[dict[str, Any]], meta: dict[str, Any], out: Path, draw: bool = True) -> None:
    """``results.json``, ``results.md``, each run's evaluated harnesses and (``draw``) the plot, in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    slim = [{k: v for k, v in r.items() if k not in ("returned_source", "evaluated_harnesses")} for r in rows]
    hdir = out / "harnesses"
    hdir.mkdir(exist_ok=True)
    for r in rows:  # every harness each system had evaluated (its proposals), for reading
        if r.get("evaluated_harnesses"):
            name = f"{slug(r['task'])}-s{r['seed']}-{r['system']}.json"
            (hdir / name).write_text(json.dumps({"returned": r.get("returned_harness_id"),
                                                 "harnesses": r["evaluated_harnesses"]}, indent=1))
    (out / "results.json").write_text(json.dumps({"meta": meta, "runs": slim, "harnesses": {
        f"{r['task']}|{r['seed']}|{r['system']}": r.get("returned_source") for r in rows}}, indent=1, default=str))
    means = mean_by_system(rows)
    server = "the one server given by --server" if " at " in meta["model"] else "one llama_cpp.server"
    lines = [
        "# Peers: harnesslearn vs GEPA vs OpenEvolve (generated by benchmarks/peers/run.py; do not edit)",
        "",
        f"Small-model run: solver and proposer are both `{meta['model']}` "
        f"({server}), "
        f"{meta['proposer_calls']} proposer calls per system, splits feedback/score/test = "
        f"{meta['n_feedback']}/{meta['n_score']}/{meta['n_test']} problems, seeds {meta['seeds']}. "
        "Test J is the returned harness on the test split (no system saw it), 95% bootstrap interval over problems. "
        "Solver calls and tokens are the systems' own evaluations (feedback and score splits); the test "
        "evaluation is the driver's and not counted.",
        "",
        f"Command: `{meta['command']}`",
        (f"Wall time: {meta['wall_s'] / 60:.1f} min on {meta['machine']}" if meta.get("wall_s")
         else f"Wall time: not recorded in these outputs (see benchmarks/peers/README.md); {meta['machine']}")
        + (f"; {meta['stopped']}" if meta.get("stopped") else "")
        + (f"; this invocation only: the runs marked carried were run by an earlier invocation with the same "
           f"settings (`--carry {meta['carry']}`), their own wall time is in their rows." if meta.get("carry") else "."),
        "",
        render_table(rows),
        "",
        "## Per system, over the (task, seed) runs",
        "",
        "| system | runs | mean test J | mean gain over the seed harness | improved / worse runs |"
        " mean minus the best zoo harness (runs above it / runs compared) |",
        "|---|---|---|---|---|---|",
    ]
    for s in SYSTEMS:
        m = means.get(s)
        if m:
            vs = "n/a" if not m["zoo_runs"] or s == "zoo" else \
                f"{m['minus_zoo']:+.3f} ({m['above_zoo']} / {m['zoo_runs']})"
            lines.append(f"| {LABELS[s]} | {m['runs']} | {m['mean_test_J']:.3f} | {m['mean_gain']:+.3f} |"
                         f" {m['improved']} / {m['worse']} | {vs} |")
        else:
            lines.append(f"| {LABELS[s]} | 0 | not run | | | |")
    lines += ["", "## Validity notes", ""]
    for r in rows:
        if not r.get("error") and r.get("validity", {}).get("note"):
            lines.append(f"- {r['task']} seed {r['seed']}, {LABELS[r['system']]}: {r['validity']['note']}")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    if draw:  # the partial outputs skip it (from_partial draws it)
        plot(rows, out / "test_J_vs_proposer_calls.png",
             f"{meta['model']} as solver and proposer (small-model run); step = best harness by score split")


async def amain(args: argparse.Namespace, llm_url: str, venvs: dict[str, Peer]) -> list[dict[str, Any]]:
    """Every (task, seed, system) run of the plan, ``--parallel`` of them at a time (each its own budget, ledger and
    service key; the executor and the model server shared), the finished ones written to ``OUT/partial`` in plan
    order as they end."""
    from harnesslearn.tasks import load_task

    drv = Driver(args, llm_url, venvs)
    await drv.start()
    carried: dict[tuple[str, int, str], dict[str, Any]] = {}
    if args.carry:
        carried = carried_runs(Path(args.carry), meta(args, 0.0), args.rerun)
    plan = [(load_task(task_spec(name.strip())), seed, system) for name in args.tasks.split(",")
            for seed in range(args.seed0, args.seed0 + args.seeds) for system in args.systems.split(",")]
    done: dict[int, dict[str, Any]] = {}
    gate = asyncio.Semaphore(max(1, args.parallel))

    partial = Coalesced(lambda: ([done[i] for i in sorted(done)], meta(args, time.perf_counter() - args.t0)),
                        lambda snap: write_outputs(*snap, Path(args.out) / "partial", draw=False))

    async def cell(i: int, task: Any, seed: int, system: str) -> None:
        async with gate:
            if args.max_minutes and time.perf_counter() - args.t0 > args.max_minutes * 60:
                done[i] = {"task": task.spec, "seed": seed, "system": system,
                           "error": f"not run: --max-minutes {args.max_minutes:g} was spent before it began"}
                return
            log(f"{system} on {task.spec} seed {seed}")
            done[i] = await drv.one(system, task, seed)
            partial.mark()

    try:
        left = []
        for i, (task, seed, system) in enumerate(plan):
            if (task.spec, seed, system) in carried:
                done[i] = {**carried[(task.spec, seed, system)], "carried_from": args.carry}
                log(f"{system} on {task.spec} seed {seed}: carried from {args.carry}")
            else:
                left.append((i, task, seed, system))
        # the gate lets them in in the order they ask, which is this list's
        await asyncio.gather(*(cell(*c) for c in start_order(left, args.first)))
    finally:
        try:
            await partial.close()
        finally:
            await drv.close()
    return [done[i] for i in sorted(done)]


def names(csv: str) -> list[str]:
    """The names of a comma-separated option (``--first``, ``--rerun``), blanks and empty ones left out."""
    return [x.strip() for x in csv.split(",") if x.strip()]


def start_order(cells: list[tuple[Any, ...]], first: str = "") -> list[tuple[Any, ...]]:
    """The order in which the runs left to do start: those of the ``first`` systems (comma-separated) before the
    others, each group in plan order (a cut run then lands them first; the outputs keep the plan's order).
    ``cells`` are ``(index, task, seed, system)``."""
    early = set(names(first))
    return sorted(cells, key=lambda c: (c[3] not in early, c[0]))


SAME_SETTINGS = ("model", "proposer_calls", "candidates", "n_feedback", "n_score", "n_test", "temperature",
                 "max_tokens", "timeout", "versions", "prompts")


def carried_runs(src: Path, now: dict[str, Any], rerun: str = "") -> dict[tuple[str, int, str], dict[str, Any]]:
    """The finished runs of ``src`` that this run may reuse: same result-affecting settings (else
    exit with the differing names), none that was not run, none of the systems in ``rerun``."""
    old_meta, done = load_rows(src)
    diff = [k for k in SAME_SETTINGS if old_meta.get(k) != now[k]]
    if diff:
        raise SystemExit(f"--carry {src}: settings differ from this run: {', '.join(diff)}")
    again = set(names(rerun))
    return {k: r for k, r in done.items() if not str(r.get("error", "")).startswith("not run") and k[2] not in again}


def planned(m: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [(task_spec(t.strip()), seed, system) for t in m["tasks"].split(",") for seed in m["seeds"]
            for system in m["systems"].split(",")]


def proposed_kinds(evaluated: list[dict[str, Any]], seed_id: str | None) -> dict[str, int]:
    """What a run's proposer brought, over every valid, distinct harness it evaluated (the seed left out): zoo
    near-copies and the others by what they do with the solver (``taxonomy.harness_kind``). Not only the returned
    harness: a proposer that writes new programs and one that writes zoo files back differ here even where both
    return the seed. ~0.1 s a harness (difflib), so it is counted when outputs are rebuilt (``--from-partial``),
    never during a run."""
    from harnesslearn.taxonomy import HARNESS_KINDS, harness_kind

    kinds = dict.fromkeys(HARNESS_KINDS, 0)
    for h in evaluated:
        src = h.get("source")
        if h.get("id") == seed_id or h.get("invalid_reason") or not src:
            continue
        kind = harness_kind(src)
        if kind in kinds:  # "invalid" (no solve to read) is not a harness that ran
            kinds[kind] += 1
    return kinds


def load_rows(src: Path, *, proposed: bool = False) -> tuple[dict[str, Any], dict[tuple[str, int, str], dict[str, Any]]]:
    """(meta, finished runs by (task, seed, system)) of the outputs in ``src`` (a ``partial/``
    folder or a finished ``--out``), with the harness sources put back; with ``proposed``, each run of a system
    with a proposer that lacks it gets ``proposed`` (``proposed_kinds``: slow, so only where outputs are rebuilt)."""
    from harnesslearn.zoo import near

    data = json.loads((src / "results.json").read_text())
    done: dict[tuple[str, int, str], dict[str, Any]] = {}
    for r in data["runs"]:
        key = (r["task"], r["seed"], r["system"])
        r = dict(r)
        if r.get("error"):
            done[key] = r
            continue
        if shown_by_mistake(r):
            done[key] = {**{k: r[k] for k in ("task", "seed", "system")}, "error": (
                f"not run: its proposer was shown {len(r['peer']['adapt']['memory_shown'])} harness-memory entries, "
                "which a system without the memory must not see (the driver left the default memory on where "
                "$HARNESSLEARN_CACHE_DIR was set, until session 42); run it again"),
                "discarded": {k: r.get(k) for k in ("test_J", "seed_test_J", "score_J")}}
            continue
        if key[2].startswith("hl-"):  # recount with the current rule
            r["validity"] = hl_validity(r["peer"]["adapt"])
        r["returned_source"] = data["harnesses"].get(f"{key[0]}|{key[1]}|{key[2]}")
        if r["returned_source"]:  # measured again: runs recorded before the measure (or before a change to it)
            r["returned_nearest_zoo"] = near(r["returned_source"])
        hf = src / "harnesses" / f"{slug(key[0])}-s{key[1]}-{key[2]}.json"
        if hf.exists():
            r["evaluated_harnesses"] = json.loads(hf.read_text())["harnesses"]
            if key[2] == "gepa" and not r.get("error"):  # recount with the current rule
                r["validity"] = gepa_validity(r["peer"]["proposals"], r["evaluated_harnesses"],
                                              r["peer"].get("failed_reflection_calls", 0))
            if proposed and "proposed" not in r and key[2] != "zoo":
                points = r.get("score_best_points") or [[0, None, None]]  # the first point is the seed's
                r["proposed"] = proposed_kinds(r["evaluated_harnesses"], points[0][2])
        done[key] = r
    return data["meta"], done


def shown_by_mistake(r: dict[str, Any]) -> bool:
    """A harnesslearn run of a system without the memory whose proposer was shown memory entries."""
    return (r["system"].startswith("hl-") and not hl_system(r["system"]).memory
            and bool(((r.get("peer") or {}).get("adapt") or {}).get("memory_shown")))


def from_partial(src: Path, out: Path) -> None:
    """Rebuild the outputs from the ``partial/`` folder of a run that was stopped: its finished
    runs as they were recorded, every planned run it had not finished marked as not run; each run's proposals
    classified (``proposed_kinds``) where the rows do not hold it yet."""
    m, done = load_rows(src, proposed=True)
    rows = []
    for key in planned(m):
        r = done.get(key)
        if r is None:
            rows.append({"task": key[0], "seed": key[1], "system": key[2],
                         "error": "not run: the command was stopped (time limit of the session) before this run"})
            continue
        rows.append(r)
    m["stopped"] = (f"outputs rebuilt with `--from-partial` from the {sum(1 for r in done.values() if not r.get('error'))}"
                    f" finished runs of {len(planned(m))} planned (validity recounted with the current rules)")
    write_outputs(rows, m, out)


@functools.cache
def machine() -> str:
    """This machine in words, its GPU's name included (asked once: ``meta`` runs for every partial write)."""
    from harnesslearn.gpu import device_name

    gpu = device_name()
    return (f"{os.cpu_count()} CPU cores ({platform.machine()}, load shared with other jobs)"
            + ("" if gpu == "cpu" else f", GPU: {gpu}"))


def meta(args: argparse.Namespace, wall: float) -> dict[str, Any]:
    return {"model": f"{args.served_name} at {args.server}" if args.server else args.model,
            "trained_proposer": args.trained_proposer, "memory_k": args.memory_k, "proposer_calls": args.proposer_calls, "candidates": args.candidates,
            "n_feedback": args.n_feedback, "n_score": args.n_score, "n_test": args.n_test,
            "seeds": list(range(args.seed0, args.seed0 + args.seeds)), "tasks": args.tasks, "systems": args.systems,
            "temperature": args.temperature, "max_tokens": args.max_tokens, "timeout": args.timeout,
            "command": " ".join(["benchmarks/peers/run.py", *sys.argv[1:]]), "wall_s": wall, "carry": args.carry,
            "rerun": args.rerun, "executor": args.executor, "concurrency": args.concurrency,
            "machine": machine(),
            "versions": dict(PEERS), "prompts": packaged_digest()}


def main(argv: list[str] | None = None) -> int:
    from harnesslearn.fsutil import scratch_cache

    scratch_cache("harnesslearn-bench-")  # never the user's cache: a temp one, the models linked
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="rg:gcd,musique,rg:simple_geometry,rg:basic_arithmetic",
                   help="comma-separated task specs (rg:FAMILY, musique = the shared MuSiQue dev file, F1)")
    p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS), help=f"comma-separated subset of {','.join(SYSTEMS)} "
                   "(+mem: shown the shipped harness memory; @trained: the proposer named by --trained-proposer)")
    p.add_argument("--proposer-calls", type=int, default=2, help="proposer calls per system and run (the matched budget)")
    p.add_argument("--candidates", type=int, default=1, help="K of harnesslearn sequential (rounds = N / K)")
    p.add_argument("--seeds", type=int, default=1, help="seeds per task (problems and sampling)")
    p.add_argument("--seed0", type=int, default=0)
    p.add_argument("--n-feedback", type=int, default=3)
    p.add_argument("--n-score", type=int, default=4)
    p.add_argument("--n-test", type=int, default=8)
    p.add_argument("--model", default="qwen2.5-coder-0.5b-instruct", help="embedded model: solver and proposer")
    p.add_argument("--temperature", type=float, default=0.8, help="proposer temperature (all systems)")
    p.add_argument("--max-tokens", type=int, default=512, help="proposer completion tokens (all systems)")
    p.add_argument("--timeout", type=float, default=60.0, help="wall-clock seconds of one solve() call")
    p.add_argument("--concurrency", type=int, default=2, help="harness runs in flight")
    p.add_argument("--executor", default="local", help="the sandbox's trusted side: local (one process) or shards:K "
                   "(K trusted processes, each calling the solver through the counting proxy; on the GPU "
                   "benchmarks/gpu_eval.py measured shards:4 at 256 runs in flight 1.40x local's solver tokens/s, and 19,125 tokens/s "
                   "against a solver server with CUDA graphs for every step)")
    p.add_argument("--n-ctx", type=int, default=8192)
    p.add_argument("--server", metavar="URL", default=None,
                   help="an OpenAI-compatible server already running (e.g. vllm serve on a GPU: http://HOST:8000/v1) "
                        "instead of starting llama.cpp with --model")
    p.add_argument("--served-name", default=ALIAS, help="with --server: the model's name there (solver and proposer)")
    p.add_argument("--trained-proposer", metavar="NAME", default=None,
                   help="the trained proposer's name on --server (a LoRA adapter served by name), for the @trained systems")
    p.add_argument("--memory-k", type=int, default=2, help="memory entries shown to the proposer of a +mem system")
    p.add_argument("--peer-wheels", metavar="DIR", default=None,
                   help="install GEPA and OpenEvolve offline from this folder of wheels (a machine without the internet)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--no-curve", dest="curve", action="store_false",
                   help="test-evaluate only the returned harnesses (not every score-split best along the way)")
    p.add_argument("--out", default=str(HERE / "results"))
    p.add_argument("--parallel", type=int, default=1,
                   help="(task, seed, system) runs in flight at once, each with its own budget and ledger (the "
                        "executor's --concurrency and the model server shared): on a GPU, many runs keep the engine "
                        "full where one sequential run leaves it idle")
    p.add_argument("--max-minutes", type=float, default=0.0,
                   help="start no new run after this many minutes (the rest are marked not run); 0: no limit")
    p.add_argument("--carry", metavar="DIR", default=None,
                   help="reuse the finished runs recorded in DIR (a partial/ folder or an --out of the same "
                        "settings) instead of running them again")
    p.add_argument("--rerun", metavar="SYSTEMS", default="",
                   help="with --carry: comma-separated systems to run again although the carry has them "
                        "(e.g. after a change to that system's code)")
    p.add_argument("--first", metavar="SYSTEMS", default="",
                   help="comma-separated systems whose runs start before the others' (a run cut short lands them "
                        "first); the outputs keep the plan's order, and --carry does not compare it")
    p.add_argument("--from-partial", metavar="DIR", default=None,
                   help="only rebuild the outputs in --out from DIR (the partial/ folder of a stopped run)")
    args = p.parse_args(argv)
    if args.from_partial:
        from_partial(Path(args.from_partial), Path(args.out))
        return 0
    if args.parallel < 1:
        p.error("--parallel must be at least 1")
    if args.proposer_calls % args.candidates:
        p.error("--proposer-calls must be a multiple of --candidates (sequential rounds x K)")
    bad = [s for s in args.systems.split(",") + args.rerun.split(",") if s and s not in SYSTEMS]
    if bad:
        p.error(f"unknown systems {bad}; choose from {SYSTEMS}")
    unplanned = [s for s in names(args.first) if s not in args.systems.split(",")]
    if unplanned:
        p.error(f"--first names systems that --systems does not run: {unplanned}")
    if any(s.endswith("@trained") for s in args.systems.split(",")) and not (args.server and args.trained_proposer):
        p.error("an @trained system needs --server and --trained-proposer (the adapter's name on that server)")
    from harnesslearn.errors import UserError
    from harnesslearn.models import embedded
    from harnesslearn.sandbox.executors import parse_executor

    try:
        if parse_executor(args.executor)[0] not in ("local", "shards"):
            raise UserError(f"--executor must be local or shards:K, not {args.executor!r}")
    except UserError as e:
        p.error(str(e))
    t0 = args.t0 = time.perf_counter()
    venv_root = HERE / ".venvs"
    venv_root.mkdir(exist_ok=True)
    venvs = {s: ensure_venv(s, venv_root, args.peer_wheels) for s in PEERS if s in args.systems.split(",")}
    out = Path(args.out)
    (out / "work").mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HARNESSLEARN_CACHE", "0")
    if args.server:  # a server already running (vLLM on the GPU), serving the model as --served-name
        log(f"model server {args.server} (given; the model {args.served_name} on it)")
        rows = asyncio.run(amain(args, args.server, venvs))
    else:
        gguf = embedded.ensure_gguf(args.model)
        args.served_name = ALIAS
        with llama_server(gguf, n_threads=args.threads, n_ctx=args.n_ctx, log=out / "work" / "llama_server.log",
                          alias=ALIAS, ready_timeout=300) as url:
            log(f"model server {url} ({args.model})")
            rows = asyncio.run(amain(args, url, venvs))
    write_outputs(rows, meta(args, time.perf_counter() - t0), out)
    shutil.rmtree(out / "partial", ignore_errors=True)
    log(f"done in {(time.perf_counter() - t0) / 60:.1f} min: {out / 'results.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
