"""What a contract allows a provider to spend per case: latency, output tokens, money.

Declared in ``contract.toml``::

    [budget]
    latency_p95_ms = 20000          # p95 of the per-call latency over every case and variant
    output_tokens_per_case = 300    # mean output tokens of one answer
    cost_per_case_usd = 0.002       # mean cost of one answer (input + output tokens at the
                                    # provider's price); judged only where a price is known

promptfoo's ``latency`` and ``cost`` assertions are the anchor: a threshold per test, in
milliseconds and in dollars. A certification judges a provider on a contract as a whole,
so latency is judged at the 95th percentile of its calls (one slow call is noise, a slow
tail is not) and tokens and cost at their mean per case (what the bill is made of).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

#: The keys ``[budget]`` may hold, with what each limits.
BUDGET_KEYS = {
    "latency_p95_ms": "p95 latency per call, in milliseconds",
    "output_tokens_per_case": "mean output tokens per case",
    "cost_per_case_usd": "mean cost per case, in US dollars",
}


class BudgetSpecError(ValueError):
    """A ``[budget]`` table is malformed."""


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """The limits a contract declares (None: not limited)."""

    latency_p95_ms: float | None = None
    output_tokens_per_case: float | None = None
    cost_per_case_usd: float | None = None

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> Budget:
        """Build a budget from the ``[budget]`` table of ``contract.toml``."""
        unknown = sorted(set(table) - set(BUDGET_KEYS))
        if unknown:
            raise BudgetSpecError(f"unknown budget key(s) {unknown}; known: {sorted(BUDGET_KEYS)}")
        values: dict[str, float] = {}
        for key, value in table.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise BudgetSpecError(f"budget {key} must be a positive number, not {value!r}")
            values[key] = float(value)
        return cls(**values)

    @property
    def declared(self) -> bool:
        """Say whether any limit is set."""
        return any(v is not None for v in self.as_dict().values())

    def as_dict(self) -> dict[str, float | None]:
        """Return the limits by their ``contract.toml`` names."""
        return {
            "latency_p95_ms": self.latency_p95_ms,
            "output_tokens_per_case": self.output_tokens_per_case,
            "cost_per_case_usd": self.cost_per_case_usd,
        }

    def over(self, figures: Mapping[str, Any] | None) -> list[str]:
        """Name the limits (``BUDGET_KEYS``) that a certificate's ``figures`` exceed."""
        out: list[str] = []
        for key, limit in self.as_dict().items():
            value = _number((figures or {}).get(key))
            if limit is not None and value is not None and value > limit:
                out.append(key)
        return out


def usage_figures(usage: Any) -> dict[str, Any] | None:
    """Return what an operator decides a failover from, of a certificate's ``usage``
    (``certify.usage.UsageSummary.as_dict``): calls, p50 and p95 latency in milliseconds,
    output tokens and cost per case (each None when unknown), and ``tokens_estimated``: the
    tokenizer that counted the tokens when the provider reported none (else None). None
    when there is no usage (a certificate written before issue 38's budgets)."""
    if not isinstance(usage, Mapping):
        return None
    latency = usage.get("latency_ms")
    latency = latency if isinstance(latency, Mapping) else {}
    calls = usage.get("calls")
    estimated = usage.get("tokens_estimated")
    return {
        "calls": calls if isinstance(calls, int) and not isinstance(calls, bool) else None,
        "latency_p50_ms": _number(latency.get("p50")),
        "latency_p95_ms": _number(latency.get("p95")),
        "output_tokens_per_case": _number(usage.get("output_tokens_per_case")),
        "cost_per_case_usd": _number(usage.get("cost_per_case_usd")),
        "tokens_estimated": estimated.get("tokenizer") if isinstance(estimated, Mapping) else None,
    }


def _number(value: Any) -> float | None:
    """Return ``value`` as a float when it is a number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
