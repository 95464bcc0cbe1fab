"""Proposers on a running solver server (the device's shared ``vllm serve``, ``solver: openai:NAME?base_url=URL``;
several servers of one model as ``base_url=URL1,URL2``, each serving the same adapters).

A stage given such a solver can run its proposer arms on the same server when the server serves them: the base
model under the solver's own name, and the SFT / RL adapters as LoRA modules named ``sft`` / ``rl`` (``vllm serve
--enable-lora --lora-modules sft=PATH rl=PATH``; ``experiments/device/solver.sh start ... LORA``). The server's
``/v1/models`` says what it serves and from where (vLLM's ``root``: the model folder, or the adapter's folder), so
an arm is taken from the server only if the folder matches this run's and was not rewritten since the server
started (its ``/metrics`` says when: a GRPO update after the start would leave the server with an older adapter)
(``served_arm``); otherwise the stage falls back to an in-process engine, as before.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from harnesslearn.specs import parse_spec


def solver_url(solver: str | None) -> tuple[str, str] | None:
    """(served name, base URL) of an ``openai:`` solver spec with a ``base_url``; None for anything else."""
    if not solver:
        return None
    spec = parse_spec(solver, "model spec")
    url = spec.options.get("base_url")
    return (spec.name, url) if spec.prefix == "openai" and url else None


def _get(url: str, timeout: float) -> str | None:
    """The body of a GET to the server, or None when it cannot be reached."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (our own server's URL)
            return str(r.read().decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None


def _urls(base_url: str) -> list[str]:
    """The servers of a base URL: one, or several of one model written comma-separated (an endpoint pool)."""
    from harnesslearn.models.pool import split_urls

    return [u for u in split_urls(base_url) if u]


def served_models(base_url: str, timeout: float = 10.0) -> dict[str, str]:
    """Served name -> the folder it was loaded from (``root``), from ``BASE_URL/models``; {} if unreachable.
    For several servers (``URL1,URL2``): what every one of them serves from the same folder."""
    found: list[dict[str, str]] = []
    for url in _urls(base_url):
        body = _get(url.rstrip("/") + "/models", timeout)
        try:
            data = json.loads(body) if body is not None else {}
        except ValueError:
            return {}
        found.append({str(m.get("id")): str(m.get("root") or "") for m in data.get("data", []) if isinstance(m, dict)})
    if not found:
        return {}
    return {k: v for k, v in found[0].items() if all(f.get(k) == v for f in found[1:])}


def server_started(base_url: str, timeout: float = 10.0) -> float | None:
    """When the server's process started (epoch seconds: ``process_start_time_seconds`` of its ``/metrics``,
    which vLLM's Prometheus endpoint exports on Linux), or None if it does not say. For several servers: the
    first one's start (an adapter must be older than every server's start: the earliest is the binding one)."""
    starts: list[float] = []
    for url in _urls(base_url):
        text = _get(url.rstrip("/").removesuffix("/v1") + "/metrics", timeout) or ""
        t = None
        for line in text.splitlines():
            if line.startswith("process_start_time_seconds "):
                try:
                    t = float(line.split()[1])
                except (IndexError, ValueError):
                    t = None
                break
        if t is None:
            return None
        starts.append(t)
    return min(starts) if starts else None


def _same(a: str, b: str | Path) -> bool:
    if not a:
        return False
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):
        return False


def _changed_since(folder: Path, t: float) -> bool:
    """Whether a file of ``folder`` was written after ``t`` (a server loads an adapter once, at its start)."""
    try:
        return any(f.stat().st_mtime > t for f in folder.iterdir() if f.is_file())
    except OSError:
        return True


def served_arm(arm: str, models: dict[str, str], *, solver_name: str, base_model: str, adapter: Path,
               started: float | None = None) -> str | None:
    """The served name that proposes for ``arm`` (``base``: the solver's own name, if it serves ``base_model``;
    ``sft`` / ``rl``: a LoRA module of that name loaded from ``adapter``, and not rewritten since the server
    ``started``, e.g. by GRPO updates after it), or None if the server does not serve it as it is now."""
    if arm == "base":
        return solver_name if solver_name in models and _same(models[solver_name], base_model) else None
    if arm not in models or not _same(models[arm], adapter):
        return None
    return None if started is not None and _changed_since(adapter, started) else arm
