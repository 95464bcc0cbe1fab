"""OpenEvolve's evaluator for a harness (``evaluate(program_path)``), loaded by OpenEvolve in its
own environment. Both evaluations are OUR sandboxed evaluation, through the driver's service
(``$PEERS_SERVICE``): the score split gives ``combined_score`` (OpenEvolve's selection); the
feedback split gives the artifacts OpenEvolve shows its model (failed problems with the gold
answer, as our proposer sees them). The test split is never evaluated here."""

import json
import os
import urllib.request

from openevolve.evaluation_result import EvaluationResult

N_TRACES = 4


def _post(split, source):
    body = json.dumps({"source": source, "split": split, "ids": None}).encode()
    req = urllib.request.Request(f"{os.environ['PEERS_SERVICE']}/eval/openevolve", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def evaluate(program_path):
    with open(program_path, encoding="utf-8") as f:
        source = f.read()
    score = _post("score", source)
    fb = _post("feedback", source)
    failed = [p for p in fb["problems"] if (p["score"] or 0.0) < 1.0][:N_TRACES]
    traces = []
    for p in failed:
        t = (f"Question: {p['question']}\nProgram answer: {p['answer']!r} (status {p['status']}, score {p['score']})\n"
             f"Correct answer: {p['gold']!r}")
        if p.get("error"):
            t += f"\nError: {p['error']}"
        for c in p.get("calls") or []:
            t += f"\nModel call: {c['prompt']!r} -> {c['completion']!r}"
        traces.append(t)
    artifacts = {"failed_examples": "\n\n".join(traces) or "none failed"}
    if score.get("invalid_reason"):
        artifacts["invalid_program"] = score["invalid_reason"]
    return EvaluationResult(
        metrics={"combined_score": float(score["J"]), "feedback_score": float(fb["J"])},
        artifacts=artifacts,
    )
