"""Experiment tracking: an adaptation's per-round figures (J on the score split, validity, tokens, spend)
and its final J, logged to MLflow and/or Weights & Biases (``--track mlflow,wandb``; the ``tracking``
extra installs both clients). Training logs to the same services through transformers' ``report_to``
(``trainer.report_to: [tensorboard, mlflow, wandb]``).

Where the figures go is the services' own configuration: ``MLFLOW_TRACKING_URI`` (default: a file store in
``./mlruns``), ``WANDB_MODE`` / ``WANDB_API_KEY`` (default without a key: offline, under ``./wandb``).
A tracker that fails mid-run warns once and is dropped: the run and its store do not depend on it. The
clients run in a thread of their own, with short timeouts: an unreachable server never stalls a run or
its Ctrl-C.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import sys
import threading
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


CONNECT_TIMEOUT_S = 5.0  # one request to a tracking server (MLflow) / W&B's start, unless their env says otherwise
CLOSE_TIMEOUT_S = 10.0  # how long the end of a run waits for its figures to be sent


class Tracker:
    """One tracked run on each backend asked for; ``log`` fans out, ``close`` ends them.

    The clients run in one daemon thread of their own, fed by a queue: a tracking server that does not
    answer never blocks the run's event loop (nor Ctrl-C); requests time out after ``CONNECT_TIMEOUT_S``
    without retries (``MLFLOW_HTTP_REQUEST_TIMEOUT`` / ``_MAX_RETRIES``, ``WANDB_INIT_TIMEOUT`` override it),
    failing in one warning line; ``close`` waits ``CLOSE_TIMEOUT_S`` at most."""

    def __init__(self, backends: Sequence[str], project: str, run_name: str, params: Mapping[str, Any]) -> None:
        self._live: dict[str, Any] = {}
        self._queue: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._closed = False
        self._queue.put(("start", (tuple(backends), project, run_name, dict(params))))
        self._thread = threading.Thread(target=self._work, name="harnesslearn-tracker", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            what, arg = item
            if what == "start":
                backends, project, run_name, params = arg
                for b in backends:
                    try:
                        self._live[b] = _START[b](project, run_name, params)
                    except Exception as e:  # noqa: BLE001 - a tracking service must never stop a run
                        _warn(b, e)
            elif what == "log":
                values, step = arg
                for b, run in list(self._live.items()):
                    try:
                        _LOG[b](run, values, step)
                    except Exception as e:  # noqa: BLE001
                        _warn(b, e)
                        self._live.pop(b, None)
            else:
                for b, run in list(self._live.items()):
                    try:
                        _END[b](run)
                    except Exception as e:  # noqa: BLE001
                        _warn(b, e)
                self._live.clear()

    def log(self, metrics: Mapping[str, float | int | None], step: int) -> None:
        values = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        if not self._closed:
            self._queue.put(("log", (values, step)))

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(("end", None))
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            sys.stderr.write(f"harnesslearn: warning: tracking did not finish within {timeout_s:g} s (a tracking "
                             "server that does not answer?); its last figures may be missing\n")


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
    # its defaults retry an unreachable server for about 4 minutes: one short try instead
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(int(CONNECT_TIMEOUT_S)))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
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
    timeout = float(os.environ.get("WANDB_INIT_TIMEOUT") or CONNECT_TIMEOUT_S)  # its default: 90 s
    return wandb.init(project=project, name=run_name, config=dict(params), mode=mode,  # type: ignore[arg-type]
                      reinit="create_new", settings=wandb.Settings(init_timeout=timeout))


def _wandb_log(run: Any, values: dict[str, float], step: int) -> None:
    run.log(values, step=step)


def _wandb_end(run: Any) -> None:
    run.finish()


_START = {"mlflow": _mlflow_start, "wandb": _wandb_start}
_LOG = {"mlflow": _mlflow_log, "wandb": _wandb_log}
_END = {"mlflow": _mlflow_end, "wandb": _wandb_end}
