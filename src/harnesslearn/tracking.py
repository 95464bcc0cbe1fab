"""Experiment tracking: an adaptation's per-round figures (J on the score split, validity, tokens, spend)
and its final J, logged to MLflow and/or Weights & Biases (``--track mlflow,wandb``; the ``tracking``
extra installs both clients). Training logs to the same services through transformers' ``report_to``
(``trainer.report_to: [tensorboard, mlflow, wandb]``).

Where the figures go is the services' own configuration: ``MLFLOW_TRACKING_URI`` (default: a file store in
``./mlruns``), ``WANDB_MODE`` / ``WANDB_API_KEY`` (default without a key: offline, under ``./wandb``).
A tracker that fails mid-run warns once and is dropped: the run and its store do not depend on it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harnesslearn.errors import UserError

BACKENDS = ("mlflow", "wandb")


def check(backends: Sequence[str]) -> None:
    """Every backend asked for is installed (a UserError before anything runs, otherwise)."""
    for b in backends:
        if importlib.util.find_spec(b) is None:
            raise UserError(f"--track {b}: the {b} client is not installed (pip install 'harnesslearn[tracking]')")


class Tracker:
    """One tracked run on each backend asked for; ``log`` fans out, ``close`` ends them."""

    def __init__(self, backends: Sequence[str], project: str, run_name: str, params: Mapping[str, Any]) -> None:
        self._live: dict[str, Any] = {}
        for b in backends:
            try:
                self._live[b] = _START[b](project, run_name, params)
            except Exception as e:  # noqa: BLE001 - a tracking service must never stop a run
                _warn(b, e)

    def log(self, metrics: Mapping[str, float | int | None], step: int) -> None:
        values = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        for b, run in list(self._live.items()):
            try:
                _LOG[b](run, values, step)
            except Exception as e:  # noqa: BLE001
                _warn(b, e)
                self._live.pop(b, None)

    def close(self) -> None:
        for b, run in list(self._live.items()):
            try:
                _END[b](run)
            except Exception as e:  # noqa: BLE001
                _warn(b, e)
        self._live.clear()


def _warn(backend: str, e: BaseException) -> None:
    sys.stderr.write(f"harnesslearn: warning: {backend} tracking stopped ({type(e).__name__}: {str(e)[:200]}); the "
                     "run goes on\n")


def _flat(params: Mapping[str, Any]) -> dict[str, str]:
    return {str(k)[:250]: str(v)[:500] for k, v in params.items()}


def _mlflow_start(project: str, run_name: str, params: Mapping[str, Any]) -> Any:
    import mlflow

    uri = os.environ.get("MLFLOW_TRACKING_URI") or Path("mlruns").absolute().as_uri()
    if uri.startswith("file:") or "://" not in uri:  # MLflow 3 keeps its file store behind this switch
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(project)
    run = mlflow.start_run(run_name=run_name)
    mlflow.log_params(_flat(params))
    return run


def _mlflow_log(run: Any, values: dict[str, float], step: int) -> None:
    import mlflow

    mlflow.log_metrics(values, step=step, run_id=run.info.run_id)


def _mlflow_end(run: Any) -> None:
    import mlflow

    mlflow.end_run()


def _wandb_start(project: str, run_name: str, params: Mapping[str, Any]) -> Any:
    import wandb

    mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
    return wandb.init(project=project, name=run_name, config=dict(params), mode=mode,  # type: ignore[arg-type]
                      reinit="create_new")


def _wandb_log(run: Any, values: dict[str, float], step: int) -> None:
    run.log(values, step=step)


def _wandb_end(run: Any) -> None:
    run.finish()


_START = {"mlflow": _mlflow_start, "wandb": _wandb_start}
_LOG = {"mlflow": _mlflow_log, "wandb": _wandb_log}
_END = {"mlflow": _mlflow_end, "wandb": _wandb_end}
