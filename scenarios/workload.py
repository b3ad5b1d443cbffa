"""Valid job inputs for scenarios, taken from the contract catalog's own cases."""

from __future__ import annotations

import functools
from typing import Any

from contracts.loader import CATALOG_ROOT, load_contract

#: Used only when the catalog cannot be loaded; shaped like ``ticket-triage@1``'s input.
FALLBACK_INPUT: dict[str, Any] = {
    "ticket_id": "SUP-1",
    "channel": "email",
    "customer": {"name": "Sam", "plan": "free"},
    "subject": "Charged twice",
    "body": "You charged my card twice this month. Please refund one payment.",
}


@functools.cache
def _cases(contract: str) -> tuple[dict[str, Any], ...]:
    try:
        loaded = load_contract(CATALOG_ROOT / contract.split("@", 1)[0])
        return tuple(dict(c.input) for c in loaded.cases)
    except Exception:  # the scenario then reports what the gateway says about the input
        return (FALLBACK_INPUT,)


def sample_input(contract: str, seed: int = 0) -> dict[str, Any]:
    """Return a valid input for ``contract``; different seeds give different inputs."""
    cases = _cases(contract)
    return dict(cases[seed % len(cases)])
