"""OpenEvolve (openevolve==0.4.0) on a harness: runs in OpenEvolve's own virtual environment,
started by ``run.py`` (``python openevolve_runner.py CONFIG.json OUT.json``) with
``oe_hook/`` on PYTHONPATH (the diff-counting ``sitecustomize``) and ``PEERS_SERVICE`` set.

Diff-based evolution (OpenEvolve's default) of the whole seed harness file, one iteration = one
model call (the driver's proxy of the one model server), ``cascade_evaluation`` off, one
evaluation at a time. The evaluator (``oe_evaluator.py``) scores on the score split and shows
feedback-split failures as artifacts. The system message carries the same task description and
runtime API our proposer gets.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from openevolve import run_evolution
from openevolve.config import Config

SYSTEM = """You are an expert Python developer improving a program (a "harness") that solves tasks by calling a language model.

The task:
{task}

The harness runtime API (what the program may call):
{api}

The program must keep defining `solve(model, question)` and return the answer as a string. Improve its score: the mean score of its answers."""


def main() -> None:
    cfg = json.load(open(sys.argv[1]))
    out_path = sys.argv[2]
    work = Path(cfg["run_dir"])
    work.mkdir(parents=True, exist_ok=True)
    (work / "initial_program.py").write_text(cfg["seed_source"], encoding="utf-8")
    config = Config.from_dict({
        "max_iterations": cfg["budget"], "random_seed": cfg["seed"], "language": "python",
        "diff_based_evolution": True, "log_level": "INFO", "checkpoint_interval": 1000,
        "llm": {
            "api_base": cfg["llm_base"], "api_key": "EMPTY", "models": [{"name": cfg["model"], "weight": 1.0}],
            "temperature": cfg["temperature"], "max_tokens": cfg["max_tokens"], "timeout": 1800, "retries": 0,
            "retry_delay": 1, "random_seed": cfg["seed"],
        },
        "prompt": {"system_message": SYSTEM.format(task=cfg["task_description"], api=cfg["api"]),
                   "include_artifacts": True},
        "database": {"random_seed": cfg["seed"], "in_memory": True, "population_size": 100},
        "evaluator": {"timeout": 3600, "cascade_evaluation": False, "parallel_evaluations": 1, "max_retries": 0,
                      "enable_artifacts": True},
    })
    t0 = time.perf_counter()
    result = run_evolution(initial_program=str(work / "initial_program.py"),
                           evaluator=str(Path(__file__).with_name("oe_evaluator.py")), config=config,
                           iterations=cfg["budget"], output_dir=str(work / "out"), cleanup=False)
    json.dump({"best_source": result.best_code, "best_score": result.best_score, "metrics": result.metrics,
               "wall_s": time.perf_counter() - t0}, open(out_path, "w"), indent=1, default=str)


if __name__ == "__main__":
    main()
