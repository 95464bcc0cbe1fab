"""Experiment tracking: adapt logs per-round figures and the final J to MLflow's file store and W&B's offline
mode (the tracking extra); training logs through transformers' report_to."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import scripted_adapt


def _adapt(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return scripted_adapt.adapt(tmp_path, *extra, rounds=2, env=env)


def test_adapt_logs_each_round_to_mlflow_and_wandb(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    uri = (tmp_path / "mlruns").as_uri()
    wandb_home = {k: str(tmp_path / k.lower()) for k in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR")}
    p = _adapt(tmp_path, "--track", "mlflow,wandb", env={"MLFLOW_TRACKING_URI": uri, "WANDB_MODE": "offline",
                                                           "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true",
                                                           **wandb_home})  # nothing under the user's home
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    import mlflow

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # reading the file store the run wrote
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["harnesslearn"], output_format="list")
    assert len(runs) == 1
    client = mlflow.tracking.MlflowClient(uri)
    history = client.get_metric_history(runs[0].info.run_id, "best_score_J")
    assert [m.step for m in history] == [1, 2]  # one point per round
    assert client.get_metric_history(runs[0].info.run_id, "test_J")[-1].value == out["test_J"]
    assert runs[0].data.params["splits.n_score"] == "2" and runs[0].data.params["task"] == "rg:gcd"
    offline = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(offline) == 1 and offline[0].stat().st_size > 0


def test_track_with_a_missing_client_is_refused_at_start(tmp_path: Path) -> None:
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "wandb.py").write_text("raise ImportError('hidden for this test')\n")
    (blocker / "sitecustomize.py").write_text(
        "import importlib.util, sys\n_f = importlib.util.find_spec\n"
        "def find_spec(name, *a, **k):\n    return None if name == 'wandb' else _f(name, *a, **k)\n"
        "importlib.util.find_spec = find_spec\n")
    p = _adapt(tmp_path, "--track", "wandb", env={"PYTHONPATH": os.pathsep.join(
        [str(blocker), os.environ.get("PYTHONPATH", "")])})
    assert p.returncode == 2 and "the wandb client is not installed" in p.stderr and not (tmp_path / "run").exists()
    bad = _adapt(tmp_path, "--track", "tensorboard")
    assert bad.returncode == 2 and "--track must be one of mlflow, wandb" in bad.stderr, bad.stderr


def test_an_unreachable_tracking_server_costs_seconds_not_minutes(tmp_path: Path) -> None:
    """Issue 65, item 4: an MLflow server that refuses connections stalled adapt 249 s (its retries), W&B 101 s (its
    init timeout), the event loop and Ctrl-C blocked meanwhile. Now the clients run in a thread of their own with
    short timeouts: the run finishes, each tracker fails in one warning line."""
    import time

    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    dead = "http://127.0.0.1:9"  # the discard port: nothing listens
    wandb_home = {k: str(tmp_path / k.lower()) for k in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR")}
    t0 = time.monotonic()
    p = _adapt(tmp_path, "--track", "mlflow,wandb", env={
        "MLFLOW_TRACKING_URI": dead, "WANDB_MODE": "online", "WANDB_API_KEY": "0" * 40, "WANDB_BASE_URL": dead,
        "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true", **wandb_home})
    assert p.returncode == 0, p.stderr[-3000:]
    assert time.monotonic() - t0 < 60, p.stderr[-3000:]
    assert "mlflow tracking stopped" in p.stderr and json.loads(p.stdout)["test_J"] is not None
