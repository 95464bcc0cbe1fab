"""GEPA (gepa==0.1.4) on a harness: runs in GEPA's own virtual environment (standard library +
gepa only), started by ``run.py``:  ``python gepa_runner.py CONFIG.json OUT.json``.

- The candidate is ``{"harness": <the seed harness source>}``: GEPA optimises the whole program
  as its one text component and replaces it with the text its reflection model writes.
- ``trainset`` = the feedback-split problem ids (minibatches for reflection; the reflective
  dataset shows the question, the harness's answer, the gold answer, status and errors),
  ``valset`` = the score-split ids (GEPA's Pareto tracking and its ``best_candidate``). The test
  split is never given to GEPA; the driver's service refuses it anyway.
- Every evaluation is OUR sandboxed evaluation, through the driver (``POST /eval/gepa``).
- ``reflection_lm`` is a callable posting to the driver's proxy of the one model server;
  GEPA stops when it has made ``budget`` reflection calls (a stopper), with ``max_metric_calls``
  as a safety cap only.
- The reflection prompt is GEPA's own template reworded for a program (GEPA's default asks for
  "a new instruction"), with the same task description and runtime API our proposer gets.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from gepa import optimize
from gepa.core.adapter import EvaluationBatch

IDLE = 10  # iterations in a row without a reflection call before GEPA is stopped

TEMPLATE = """I have a Python program (a "harness") that solves tasks of this kind by calling a language model:
<task>

The harness runtime API (what the program may call):
<api>

The current program:
```
<curr_param>
```

The following are examples of task inputs given to the program, the program's output for each of them, and feedback (with the correct answer):
```
<side_info>
```

Your task is to write an improved version of the whole program, so that it answers such questions correctly. It must define `solve(model, question)` and return the answer as a string.

Provide the complete new program within ``` blocks."""


def post(url: str, body: dict[str, Any], timeout: float = 3600) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


class Recorder:
    """Each reflection call and the candidate GEPA evaluates right after it (its proposal)."""

    def __init__(self) -> None:
        self.calls = 0
        self.failed_calls = 0
        self.proposals: list[dict[str, Any]] = []
        self.pending: dict[str, Any] | None = None
        self.seen: set[str] = set()

    def on_reflection(self, ok: bool) -> None:
        self._close(None)
        if ok:
            self.pending = {"i": len(self.proposals)}
        else:
            self.failed_calls += 1

    def on_evaluate(self, source: str, res: dict[str, Any]) -> None:
        if self.pending is not None:
            self._close({"changed": source not in self.seen, "invalid_reason": res.get("invalid_reason"),
                         "harness_id": res.get("harness_id")})
        self.seen.add(source)

    def _close(self, outcome: dict[str, Any] | None) -> None:
        if self.pending is None:
            return
        p = self.pending
        p.update(outcome or {"evaluated": False})
        p.setdefault("evaluated", True)
        self.proposals.append(p)
        self.pending = None


def main() -> None:
    cfg = json.load(open(sys.argv[1]))
    out_path = sys.argv[2]
    rec = Recorder()
    eval_url = f"{cfg['service']}/eval/gepa"

    class HarnessAdapter:
        propose_new_texts = None  # GEPA's own reflective proposer writes the new text

        def evaluate(self, batch: list[dict[str, str]], candidate: dict[str, str], capture_traces: bool = False
                     ) -> EvaluationBatch:
            splits = {d["split"] for d in batch}
            assert len(splits) == 1, splits
            ids = [d["id"] for d in batch]
            res = post(eval_url, {"source": candidate["harness"], "split": splits.pop(), "ids": ids})
            rec.on_evaluate(candidate["harness"], res)
            by_id = {p["id"]: p for p in res["problems"]}
            rows = [by_id[i] for i in ids]
            return EvaluationBatch(
                outputs=[r.get("answer") if r.get("answer") is not None else f"<{r['status']}>" for r in rows],
                scores=[float(r["score"] or 0.0) for r in rows],
                trajectories=rows if capture_traces else None,
            )

        def make_reflective_dataset(self, candidate: dict[str, str], eval_batch: EvaluationBatch,
                                    components_to_update: list[str]) -> dict[str, list[dict[str, Any]]]:
            recs = []
            for t in eval_batch.trajectories or []:
                out = f"{t.get('answer')!r} (status {t['status']})"
                if t.get("error"):
                    out += f"\nError: {t['error']}"
                for c in t.get("calls") or []:
                    out += f"\nModel call: {c.get('prompt')!r} -> {c.get('completion')!r}"
                fb = f"Score {t['score']}." + (f" The correct answer is {t.get('gold')!r}." if "gold" in t else "")
                recs.append({"Inputs": t.get("question", t["id"]), "Generated Outputs": out, "Feedback": fb})
            return {c: recs for c in components_to_update}

    def reflection_lm(prompt: str | list[dict[str, Any]]) -> str:
        msgs = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        try:
            res = post(f"{cfg['llm_base']}/chat/completions",
                       {"model": cfg["model"], "messages": msgs, "temperature": cfg["temperature"],
                        "max_tokens": cfg["max_tokens"], "seed": cfg["seed"] * 1000 + rec.calls})
        except urllib.error.HTTPError as e:
            rec.on_reflection(False)
            raise RuntimeError(f"reflection call failed: HTTP {e.code} {e.read()[:200]!r}") from e
        rec.calls += 1
        rec.on_reflection(True)
        return str(res["choices"][0]["message"]["content"] or "")

    class ProposerBudget:
        """Stop at the proposer-call budget, or after IDLE iterations in a row that made no
        reflection call (GEPA skips parents whose minibatch is all perfect: with nothing left to
        improve it would otherwise spend solver calls until ``max_metric_calls``)."""

        def __init__(self) -> None:
            self.last, self.idle, self.stopped_idle = -1, 0, False

        def __call__(self, gepa_state: Any) -> bool:
            self.idle = self.idle + 1 if rec.calls == self.last else 0
            self.last = rec.calls
            self.stopped_idle = self.idle >= IDLE
            return rec.calls >= cfg["budget"] or self.stopped_idle

    stopper = ProposerBudget()
    template = TEMPLATE.replace("<task>", cfg["task_description"]).replace("<api>", cfg["api"])
    t0 = time.perf_counter()
    result = optimize(
        seed_candidate={"harness": cfg["seed_source"]},
        trainset=[{"id": i, "split": "feedback"} for i in cfg["feedback_ids"]],
        valset=[{"id": i, "split": "score"} for i in cfg["score_ids"]],
        adapter=HarnessAdapter(),  # type: ignore[arg-type]
        reflection_lm=reflection_lm,
        reflection_prompt_template=template,
        reflection_minibatch_size=cfg["minibatch"],
        max_metric_calls=cfg["max_metric_calls"],
        stop_callbacks=[stopper],
        seed=cfg["seed"],
        raise_on_exception=False,
        run_dir=cfg["run_dir"],
    )
    rec._close(None)
    best = result.best_candidate
    best_src = best["harness"] if isinstance(best, dict) else str(best)
    json.dump({
        "best_source": best_src, "best_idx": result.best_idx,
        "val_aggregate_scores": list(result.val_aggregate_scores), "candidates": len(result.candidates),
        "total_metric_calls": result.total_metric_calls, "reflection_calls": rec.calls,
        "failed_reflection_calls": rec.failed_calls, "proposals": rec.proposals,
        "stopped_idle": stopper.stopped_idle,
        "wall_s": time.perf_counter() - t0,
    }, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
