"""``harnesslearn demo``: the main job on the embedded models, ending in a report and a plain verdict.

By default (``make demo``): the embedded Qwen2.5-Coder-1.5B-Instruct is the solver, and the proposer is the
GRPO-trained one shipped with the package (``local:qwen2.5-coder-1.5b-instruct?adapter=rl``, see
``harnesslearn.adapters``), revising the minimal seed once (K candidates) on :data:`DEMO_FAMILY`, a Reasoning Gym
family outside the proposer's training families (``paper-train``), without any harness memory. Settings:
:data:`RL_SETTINGS`, sized for 2 CPU cores. ``--compare`` runs the untrained model as the proposer on the same
problems beside it (a second run directory inside the first, ``untrained/``).

The last lines (:func:`verdict_lines`) say test J before and after with 95 % bootstrap intervals, whether the
family was among the proposer's training families, and what the winning revision is: the nearest known source
(``harnesslearn.sources``: the zoo files, the runtime API's programs, the prompt's example) and whether it is a
copy of it. The report shows the same lines and the seed-vs-winner diff at its top (``headline.json``).

Other models: ``--model local:gemma-3-270m`` is the one-minute smoke (Gemma as solver and proposer,
:data:`DEMO_SETTINGS`: it shows the machinery, a 270M base model rarely writes a useful edit). ``--memory`` shows
the proposer the harness memory shipped with the package (``seeds/memory/paper_train.jsonl``: the zoo harnesses
that beat the minimal seed on simple_geometry, maze and tower_of_hanoi), loaded into a temporary memory so that
the user's own memory is neither shown nor changed; it is the default only for the 0.5B Qwen, whose profile is
the memory job on gcd.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnesslearn.adapt import adapt
from harnesslearn.errors import UserError
from harnesslearn.memory import SHIPPED
from harnesslearn.sandbox.records import Budgets
from harnesslearn.settings.adapt import AdaptSettings
from harnesslearn.settings.groups import MemorySettings, ProposerSettings, RuntimeSettings, Sampling, Splits

# rounds x candidates proposals; split sizes; proposer completion length; per-problem limits.
DEMO_SETTINGS = AdaptSettings(
    strategy="sequential", rounds=3, candidates=3, seed=0, splits=Splits(n_feedback=4, n_score=6, n_test=12),
    proposer=ProposerSettings(format="plain-rewrite", sampling=Sampling(temperature=0.7, max_tokens=160)),
    budgets=Budgets(timeout_s=60.0, max_calls=4, max_tokens=4096), runtime=RuntimeSettings(concurrency=2),
)
# the instruction-tuned coder: chat prompts with the assistant-turn start (proposer format auto), longer
# bodies, fewer and smaller evaluations (it generates 12-20 tokens/s here, 10x slower than Gemma)
# (with the shipped memory it writes whole files, about 600 tokens for an interpreter loop)
QWEN_SETTINGS = AdaptSettings(
    strategy="sequential", rounds=1, candidates=3, seed=0, splits=Splits(n_feedback=3, n_score=6, n_test=12),
    proposer=ProposerSettings(sampling=Sampling(temperature=0.8, max_tokens=768)),
    budgets=Budgets(timeout_s=120.0, max_calls=4, max_tokens=4096), runtime=RuntimeSettings(concurrency=2),
)
# the default job: one greedy revision by the trained proposer (at temperature 0.8 its 3 samples were one and the
# same program on fraction_simplification and on prime_factorization: it is that sure of itself), no memory; greedy also puts the revision in
# the response cache, so the same demo again gives the same revision
RL_SETTINGS = QWEN_SETTINGS.with_(candidates=1, **{"proposer.sampling.temperature": 0.0})
SHIPPED_MEMORY = SHIPPED  # the paper-train memory that --memory shows (memory.SHIPPED)
DEMO_MODEL = "local:qwen2.5-coder-1.5b-instruct"
RL_PROPOSER = f"{DEMO_MODEL}?adapter=rl"  # the GRPO-trained proposer shipped with the package
SMOKE_MODEL = "local:gemma-3-270m"
# outside paper-train (the RL proposer's training families) and outside paper-eval (its transfer table): never
# trained or evaluated on. Chosen among the candidates measured on 2 CPU cores (docs/RESULTS.md, "The demo")
DEMO_FAMILY = "count_bits"


@dataclass(frozen=True)
class Profile:
    """A model's demo: its family and settings, its default proposer (None: the model itself), whether the
    shipped memory is shown by default, and the settings for any other proposer (None: ``settings``)."""

    family: str
    settings: AdaptSettings
    proposer: str | None = None
    memory: bool = False
    other: AdaptSettings | None = None


PROFILES: dict[str, Profile] = {
    SMOKE_MODEL: Profile("basic_arithmetic", DEMO_SETTINGS),
    # another proposer (the untrained model shown the memory, say) gets the 3 sampled candidates it was measured with
    DEMO_MODEL: Profile(DEMO_FAMILY, RL_SETTINGS, proposer=RL_PROPOSER, other=QWEN_SETTINGS),
    "local:qwen2.5-coder-0.5b-instruct": Profile("gcd", QWEN_SETTINGS, memory=True),
}


def profile(model_spec: str) -> Profile:
    """The demo's profile for a model (the Gemma one, without a default proposer, for any other model)."""
    return PROFILES.get(model_spec, PROFILES[SMOKE_MODEL])


def prepare() -> list[str]:
    """Make the one-time files of the default demo and the smoke now: the embedded models assembled into the cache
    and the shipped adapter converted to a GGUF LoRA (both checked, and skipped when already there); loading the
    weights is left to the demo. ``scripts/setup.sh`` calls this, so that the first ``harnesslearn demo`` does not pay
    for it. Returns the specs prepared."""
    from harnesslearn import aio
    from harnesslearn.models import load_model

    specs = [DEMO_MODEL, RL_PROPOSER, SMOKE_MODEL]
    for spec in specs:
        aio.run(load_model(spec).aclose())
    return specs


def _report(run_dir: Path) -> str | None:
    """Write the HTML report if the report module is installed; its path, or None."""
    try:
        from harnesslearn.report import write_report
    except ImportError as e:
        sys.stderr.write(f"[demo] report unavailable: {e}\n")
        return None
    return str(write_report(run_dir))


def _shipped_memory(folder: Path) -> Path:
    """A memory file in ``folder`` holding the shipped paper-train entries."""
    from harnesslearn.memory import shipped_copy

    path = folder / "memory.sqlite"
    n = shipped_copy(path)
    sys.stderr.write(f"[demo] memory: the {n} harnesses shipped with harnesslearn (paper-train families); "
                     "your own memory is not used or changed\n")
    return path


def split_intervals(run_dir: Path, run_id: str, seed_id: str, best_id: str) -> dict[str, Any]:
    """The test-split scores of the seed and the best harness in a finished run, as 95 % bootstrap intervals over
    the problems (``stats.bootstrap_ci``) and their paired difference (``stats.bootstrap_paired_diff``): ``{seed,
    best, diff}``, each ``{mean, lo, hi}`` rounded to 3 places (``diff`` None when the problem lists differ)."""
    from harnesslearn.stats import bootstrap_ci, bootstrap_paired_diff
    from harnesslearn.store import Store

    store = Store.open_readonly(run_dir)
    try:
        scores: dict[str, list[tuple[str, float]]] = {}
        for e in store.evaluations(run_id, split="test"):
            if e.harness_id in (seed_id, best_id):
                scores[e.harness_id] = [(r.problem_id, float(r.score or 0.0)) for r in store.problem_records(e.id)]
    finally:
        store.close()
    seed, best = scores.get(seed_id, []), scores.get(best_id, [])

    def r(d: dict[str, float]) -> dict[str, float]:
        return {k: round(v, 3) for k, v in d.items()}

    same = [p for p, _ in seed] == [p for p, _ in best]
    return {"seed": r(bootstrap_ci([s for _, s in seed])), "best": r(bootstrap_ci([s for _, s in best])),
            "diff": r(bootstrap_paired_diff([s for _, s in seed], [s for _, s in best])) if same else None}


def _j(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _ci(d: dict[str, float] | None, sign: bool = False) -> str:
    if not d:
        return ""
    f = "{:+.3f}" if sign else "{:.3f}"
    return f"{f.format(d['mean'])} [{f.format(d['lo'])}, {f.format(d['hi'])}]"


def verdict_lines(out: dict[str, Any]) -> list[str]:
    """The demo's last lines, in plain words, from its result (``run_demo``'s dict): whether the family was
    among the proposer's training families, test J before and after with the intervals, what the winning
    revision is (its nearest known source, and whether it is a copy), and the untrained proposer beside it
    (``--compare``). The report shows the same lines."""
    fam, trained = out.get("family", "?"), out.get("training_families")
    prop = out.get("proposer", "the proposer")
    if trained is None:
        lines = [f"rg:{fam}, proposer {prop}: not a proposer trained by harnesslearn (no training families)"]
    elif fam in trained:
        lines = [f"rg:{fam} IS one of the proposer's training families ({', '.join(trained)}): not an unseen family"]
    else:
        lines = [f"rg:{fam} was unseen in training: the proposer {prop} was trained on {', '.join(trained)} only"]
    a, b, n = out.get("seed_test_J"), out.get("test_J"), out.get("n_test", "?")
    ci = out.get("intervals") or {}
    if a is None or b is None:
        lines.append(f"test J could not be measured (seed {a}, adapted {b})")
    elif b > a:
        diff = ci.get("diff")
        line = (f"test J rose: {_ci(ci.get('seed')) or _j(a)} -> {_ci(ci.get('best')) or _j(b)} on {n} held-out test "
                f"problems (95 % bootstrap intervals over the problems)")
        if diff:
            line += f"; the gain {_ci(diff, sign=True)}" + (
                ", an interval that includes 0: not clearly a gain on this small split" if diff["lo"] <= 0 else "")
        if any(d and d["lo"] == d["hi"] for d in (ci.get("seed"), ci.get("best"))):
            line += f" (an interval of no width: all {n} problems scored alike, which is all that so few can show)"
        lines.append(line)
    else:
        lines.append(f"test J did not rise: {_ci(ci.get('seed')) or _j(a)} -> {_j(b)} on {n} held-out test problems "
                     "(the seed stayed best or the revision did not transfer)")
    win = (out.get("provenance") or {}).get("winner")
    if win and a is not None and b is not None and b > a:
        if win.get("copy"):
            learned = (" (the zoo harnesses were in its training data)"
                       if trained is not None and str(win["nearest"]).startswith("zoo:") else "")
            lines.append(f"the winning revision is a near-copy of {win['nearest']} (difflib ratio {win['ratio']:.2f}, "
                         f"{win['contained']:.0%} of it held): a known program written back{learned}, not a new one")
        else:
            lines.append(f"the winning revision is the proposer's own: its nearest known source, {win['nearest']}, is "
                         f"at difflib ratio {win['ratio']:.2f} (a copy is >= 0.80)")
    c = out.get("untrained")
    if c:
        lines.append(f"untrained proposer ({c['proposer']}) on the same problems: test J {_j(c['seed_test_J'])} -> "
                     f"{_j(c['test_J'])}, {c['valid_proposals']}/{c['proposals']} valid proposals, {c['wall_s']:.0f} s")
    return lines


def _headline(run_dir: Path, lines: list[str], seed_id: str, best_id: str) -> None:
    """``headline.json`` in the run directory: the verdict lines and the seed's and winner's ids, which the report
    shows at its top with the diff between the two."""
    from harnesslearn.fsutil import atomic_write_text

    atomic_write_text(run_dir / "headline.json", json.dumps({"lines": lines, "seed": seed_id, "best": best_id},
                                                            indent=1) + "\n")


async def run_demo(run_dir: str | Path | None = None, family: str | None = None, *, resume: bool = False,
                   model_spec: str = DEMO_MODEL, memory: bool | None = None, isolation: str | None = None,
                   proposer_spec: str | None = None, compare: bool = False) -> dict[str, Any]:
    """Run the demo; returns adapt's JSON plus ``family``, ``proposer``, ``training_families`` (None for a proposer
    not trained here), ``intervals`` (``split_intervals``), ``untrained`` (with ``compare``: the untrained run's
    summary), ``lines`` (``verdict_lines``), ``report`` (the HTML path) and ``wall_s``. ``proposer_spec``: another
    proposer than the profile's (default: the profile's, else the solver itself); ``memory``: show the shipped
    memory (default: the profile's). The user's own harness memory is never read or written."""
    from harnesslearn.adapters import training_families
    from harnesslearn.models import load_model
    from harnesslearn.tasks import load_task

    t0 = time.perf_counter()
    if resume and run_dir is None:
        raise UserError("--resume needs --run-dir (the demo directory to continue)")
    rd = Path(run_dir) if run_dir is not None else Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    prof = profile(model_spec)
    proposer_spec = proposer_spec or prof.proposer or model_spec
    settings = prof.other if prof.other is not None and proposer_spec != prof.proposer else prof.settings
    if compare and proposer_spec == model_spec:
        raise UserError(f"--compare runs the untrained model beside another proposer, but the proposer is already "
                        f"the model itself ({model_spec})")
    if isolation is not None:  # --isolation / --unsafe-no-sandbox (how harness runs are confined, not what they do)
        settings = settings.with_(**{"runtime.isolation": isolation})
    family = family or prof.family
    task = load_task(f"rg:{family}")
    model = load_model(model_spec)
    proposer = load_model(proposer_spec) if proposer_spec != model_spec else model
    # the shipped memory goes into a folder of this run directory's own, rebuilt the same on every start: a
    # --resume sees the same path and the same entries, and the user's memory is never read or written
    tmp = Path(tempfile.gettempdir()) / f"harnesslearn-demo-{hashlib.sha256(str(rd.resolve()).encode()).hexdigest()[:12]}"
    untrained: dict[str, Any] | None = None
    try:
        if prof.memory if memory is None else memory:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            settings = settings.with_(memory=MemorySettings(enabled=True, path=str(_shipped_memory(tmp))))
        else:
            settings = settings.with_(memory=MemorySettings(enabled=False))
        result = await adapt(task, model, proposer, settings, run_dir=rd, resume=resume)
        if compare:  # the same job and problems, the untrained model as the proposer
            sys.stderr.write(f"[demo] --compare: the same job with the untrained proposer {model_spec}\n")
            u = await adapt(task, model, model, settings, run_dir=rd / "untrained", resume=resume)
            untrained = {**{k: u.to_json()[k] for k in ("seed_test_J", "test_J", "valid_proposals", "proposals",
                                                       "run_dir")},
                         "proposer": model_spec, "wall_s": round(u.wall_s, 1), "report": _report(rd / "untrained")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        await model.aclose()
        if proposer is not model:
            await proposer.aclose()
    out = result.to_json()
    out.update(family=family, n_test=settings.splits.n_test, proposer=proposer_spec,
               training_families=training_families(proposer_spec),
               intervals=split_intervals(rd, result.strategy, result.seed_harness_id, result.best_harness_id))
    if untrained is not None:
        out["untrained"] = untrained
    out["lines"] = verdict_lines(out)
    _headline(rd, out["lines"], result.seed_harness_id, result.best_harness_id)
    out["report"] = _report(rd)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out
