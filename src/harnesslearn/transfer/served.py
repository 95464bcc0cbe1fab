"""Proposers on a running solver server (the device's shared ``vllm serve``, ``solver: openai:NAME?base_url=URL``).

A stage given such a solver can run its proposer arms on the same server when the server serves them: the base
model under the solver's own name, and the SFT / RL adapters as LoRA modules named ``sft`` / ``rl`` (``vllm serve
--enable-lora --lora-modules sft=PATH rl=PATH``; ``experiments/device/solver.sh start ... LORA``). The server's
``/v1/models`` says what it serves and from where (vLLM's ``root``: the model folder, or the adapter's folder), so
an arm is taken from the server only if the folder matches this run's (``served_arm``); otherwise the stage falls
back to an in-process engine, as before.
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


def served_models(base_url: str, timeout: float = 10.0) -> dict[str, str]:
    """Served name -> the folder it was loaded from (``root``), from ``BASE_URL/models``; {} if unreachable."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=timeout) as r:  # noqa: S310 (our URL)
            data = json.loads(r.read().decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(m.get("id")): str(m.get("root") or "") for m in data.get("data", []) if isinstance(m, dict)}


def _same(a: str, b: str | Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):
        return False


def served_arm(arm: str, models: dict[str, str], *, solver_name: str, base_model: str, adapter: Path) -> str | None:
    """The served name that proposes for ``arm`` (``base``: the solver's own name, if it serves ``base_model``;
    ``sft`` / ``rl``: a LoRA module of that name loaded from ``adapter``), or None if the server does not."""
    if arm == "base":
        return solver_name if solver_name in models and _same(models[solver_name], base_model) else None
    return arm if arm in models and _same(models[arm], adapter) else None
