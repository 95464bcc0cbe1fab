"""What a run spends: the proposer's and the solver's tokens per round, read from the run store, and their
price in USD from the ``genai-prices`` table where the model is a hosted one it knows (None otherwise:
never a guessed 0). ``cap_reason`` says which cap of ``RunLimits`` the spend has reached."""

from __future__ import annotations

from typing import Any

from harnesslearn.errors import UserError
from harnesslearn.models.accounting import cost_of
from harnesslearn.settings.groups import RunLimits


class CapReached(Exception):
    """A run's spend reached one of its caps: the run stops cleanly before the next round."""


def priced_name(spec: str) -> str | None:
    """The model name to price a spec by: only ``openai:`` specs served by a hosted API (not a local server)."""
    if not spec.startswith("openai:"):
        return None
    name, _, query = spec[len("openai:"):].partition("?")
    if any(host in query or host in spec for host in ("localhost", "127.0.0.1", "0.0.0.0")):
        return None
    return name or None


def usd(spec: str, tokens_in: int, tokens_out: int) -> float | None:
    if tokens_in + tokens_out == 0:
        return 0.0
    name = priced_name(spec)
    return None if name is None else cost_of(name, tokens_in, tokens_out)


def per_round(store: Any, run_id: str, solver: str, proposer: str) -> list[dict[str, Any]]:
    """One row per round (``round`` None last: the final test evaluations), tokens and USD of each side."""
    rows = []
    spent = store.spend(run_id)
    for rnd in sorted(spent, key=lambda r: (r is None, r or 0)):
        c = spent[rnd]
        p_usd, s_usd = usd(proposer, c["proposer_in"], c["proposer_out"]), usd(solver, c["solver_in"], c["solver_out"])
        rows.append({"round": rnd, "proposer_tokens": c["proposer_in"] + c["proposer_out"],
                     "solver_tokens": c["solver_in"] + c["solver_out"],
                     "usd": None if p_usd is None or s_usd is None else round(p_usd + s_usd, 6)})
    return rows


def totals(rows: list[dict[str, Any]], before_round: int | None = None) -> dict[str, Any]:
    """The sum of ``rows`` (of the rounds before ``before_round`` when given: what a cap checks)."""
    rows = [r for r in rows if before_round is None or (r["round"] is not None and r["round"] < before_round)]
    costs = [r["usd"] for r in rows]
    return {"proposer_tokens": sum(r["proposer_tokens"] for r in rows),
            "solver_tokens": sum(r["solver_tokens"] for r in rows),
            "usd": None if any(c is None for c in costs) else round(sum(costs), 6)}


def cap_reason(limits: RunLimits, spent: dict[str, Any]) -> str | None:
    """Which cap ``spent`` has reached, in words, or None."""
    for key, cap, unit in (("proposer_tokens", limits.proposer_tokens, "proposer tokens"),
                           ("solver_tokens", limits.solver_tokens, "solver tokens"), ("usd", limits.usd, "USD")):
        if cap is not None and spent[key] is not None and spent[key] >= cap:
            return f"the cap of {cap:g} {unit} is reached ({spent[key]:g} spent)"
    return None


def check_priced(limits: RunLimits, solver: str, proposer: str) -> None:
    """A money cap needs both models in the price table: else a UserError before anything runs."""
    if limits.usd is None:
        return
    for role, spec in (("solver", solver), ("proposer", proposer)):
        name = priced_name(spec)
        if name is None or cost_of(name, 1000, 1000) is None:
            raise UserError(f"--max-usd: no price is known for the {role} {spec} (the genai-prices table prices hosted "
                            "openai: models it knows); cap its tokens instead (--max-proposer-tokens, "
                            "--max-solver-tokens)")
