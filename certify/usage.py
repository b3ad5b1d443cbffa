"""What a provider's calls on a contract took and cost, judged against the contract's budget.

Every call's latency (``ProviderResult.latency``) and token usage, as the provider reported
it, is kept per repeat. Latency percentiles use the nearest-rank method over the answered
calls of the fixed cases and the variants; tokens and cost are means per case (one answer).
Cost needs a price per provider (``--price NAME=INPUT,OUTPUT``, US dollars per million
tokens): the provider configuration has none, and a guessed price table would go stale.
Replay mode answers from cassettes at once, so its latency is never judged.

A provider that reports no usage (several OpenAI-compatible servers omit the object) has
its tokens counted offline (``certify.estimated``): those figures are marked estimated,
with the tokenizer and its margin, in the summary, the certificate and the budget's verdict.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from certify.checks import Check, Layer
from contracts.budget import Budget

#: The price ``--sim`` providers are given, so the report shows what a cost looks like.
SIM_PRICE_PER_MTOK = (0.5, 1.5)  # US dollars per million input, output tokens
PERCENTILES = (50, 95, 99)


@dataclasses.dataclass(frozen=True, slots=True)
class Price:
    """What a provider charges, in US dollars per million tokens."""

    input_per_mtok: float
    output_per_mtok: float

    @classmethod
    def parse(cls, text: str) -> tuple[str, Price]:
        """Parse ``NAME=INPUT,OUTPUT`` (``--price``) into the provider name and its price."""
        name, sep, rest = text.partition("=")
        parts = rest.split(",")
        try:
            if not sep or not name or len(parts) != 2:
                raise ValueError
            price = cls(float(parts[0]), float(parts[1]))
        except ValueError:
            raise ValueError(
                f"--price wants NAME=INPUT,OUTPUT in US dollars per million tokens, "
                f"e.g. gpt-4o=2.5,10; got {text!r}"
            ) from None
        if price.input_per_mtok < 0 or price.output_per_mtok < 0:
            raise ValueError(f"--price {text!r}: a price cannot be negative")
        return name, price

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """Return the cost of one call, in US dollars."""
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


@dataclasses.dataclass(frozen=True, slots=True)
class CallUsage:
    """One call: how long it took and its tokens (None: unknown), as the provider reported
    them or, when it reported none, as ``counted_by`` counted them."""

    latency: float | None = None  # seconds; None when the call failed
    input_tokens: int | None = None
    output_tokens: int | None = None
    counted_by: str | None = None  #: the tokenizer that counted them (None: reported)
    margin: str | None = None  #: how far that tokenizer may be from the model's own count


def usd(amount: float) -> str:
    """Return an amount of US dollars without trailing zeros: ``$0.000745``."""
    return "$" + f"{amount:,.8f}".rstrip("0").rstrip(".")


def percentile(values: Sequence[float], q: float) -> float:
    """Return the nearest-rank ``q``-th percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclasses.dataclass(frozen=True, slots=True)
class UsageSummary:
    """Latency percentiles, tokens and cost over a provider's calls on one contract."""

    calls: int  #: every call made, answered or not
    answered: int  #: calls that came back with a parsed answer
    latency_ms: dict[str, float]  #: ``p50``, ``p95``, ``p99``, ``max`` (empty: none answered)
    output_tokens_per_case: float | None  #: mean over calls that reported usage
    output_tokens_max: int | None
    input_tokens: int  #: total over calls that reported usage
    output_tokens: int
    cost_per_case_usd: float | None  #: None without a price or usage
    cost_usd: float | None
    price: Price | None
    #: Of the calls with tokens, how many were counted here, with which tokenizer and margin
    #: (None: every figure was reported by the provider).
    estimated: dict[str, Any] | None = None

    @property
    def mark(self) -> str:
        """Return `` (estimated)`` when any token figure was counted here, else nothing."""
        return " (estimated)" if self.estimated else ""

    def as_dict(self) -> dict[str, Any]:
        """Return the summary as JSON for certificates and reports."""
        return {
            "calls": self.calls,
            "answered": self.answered,
            "latency_ms": self.latency_ms,
            "output_tokens_per_case": self.output_tokens_per_case,
            "output_tokens_max": self.output_tokens_max,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_per_case_usd": self.cost_per_case_usd,
            "cost_usd": self.cost_usd,
            "price_per_mtok": (
                None
                if self.price is None
                else {"input": self.price.input_per_mtok, "output": self.price.output_per_mtok}
            ),
            "tokens_estimated": self.estimated,
        }

    def brief(self) -> str:
        """Return one short phrase: ``p95 41 ms, 62 output tokens/case, $0.0001/case``."""
        p95 = self.latency_ms.get("p95") if self.latency_ms else None
        figures = brief_figures(
            p95, self.output_tokens_per_case, self.cost_per_case_usd, estimated=self.estimated
        )
        return figures or "no answered call"


def brief_figures(
    p95_ms: float | None,
    tokens: float | None,
    cost_usd: float | None,
    *,
    estimated: Mapping[str, Any] | None = None,
) -> str:
    """Say the figures that are known: ``p95 41 ms, 62 output tokens/case, $0.0001/case``
    (empty when none is); token figures counted here read ``~62 output tokens/case
    (estimated with TOKENIZER)``."""
    mark = "~" if estimated else ""
    parts = [
        f"p95 {p95_ms:,.0f} ms" if p95_ms is not None else "",
        f"{mark}{tokens:,.0f} output tokens/case" if tokens is not None else "",
        f"{mark}{usd(cost_usd)}/case" if cost_usd is not None else "",
    ]
    if estimated and (tokens is not None or cost_usd is not None):
        parts.append(f"tokens estimated with {estimated.get('tokenizer')}")
    return ", ".join(p for p in parts if p)


def summarize(calls: Sequence[CallUsage], price: Price | None) -> UsageSummary:
    """Summarize a provider's calls on one contract."""
    latencies = [c.latency * 1000 for c in calls if c.latency is not None]
    latency_ms = (
        {f"p{q}": round(percentile(latencies, q), 1) for q in PERCENTILES}
        | {"max": round(max(latencies), 1)}
        if latencies
        else {}
    )
    used = [c for c in calls if c.input_tokens is not None and c.output_tokens is not None]
    outputs = [c.output_tokens or 0 for c in used]
    inputs = [c.input_tokens or 0 for c in used]
    cost = (
        math.fsum(price.cost(i, o) for i, o in zip(inputs, outputs, strict=True))
        if price is not None and used
        else None
    )
    counted = [c for c in used if c.counted_by is not None]
    estimated = (
        {
            "calls": len(counted),
            "of": len(used),
            "tokenizer": counted[0].counted_by,
            "margin": counted[0].margin,
        }
        if counted
        else None
    )
    return UsageSummary(
        estimated=estimated,
        calls=len(calls),
        answered=len(latencies),
        latency_ms=latency_ms,
        output_tokens_per_case=round(sum(outputs) / len(used), 1) if used else None,
        output_tokens_max=max(outputs) if used else None,
        input_tokens=sum(inputs),
        output_tokens=sum(outputs),
        cost_per_case_usd=round(cost / len(used), 8) if cost is not None else None,
        cost_usd=round(cost, 6) if cost is not None else None,
        price=price,
    )


def check_budget(
    budget: Budget, usage: UsageSummary, provider: str, *, judge_latency: bool = True
) -> Check:
    """Check a provider's usage on a contract against the contract's budget."""
    detail: dict[str, Any] = {"budget": budget.as_dict(), "usage": usage.as_dict()}
    if not budget.declared:
        return Check(Layer.BUDGET, True, detail=detail | {"declared": False})
    if not usage.answered:  # the unit failed at an earlier layer: nothing to measure
        return Check(Layer.BUDGET, True, detail=detail | {"judged": "no call was answered"})
    over: list[str] = []
    if budget.latency_p95_ms is not None:
        if not judge_latency:
            detail["latency"] = "not judged: replay answers from cassettes at once"
        elif usage.latency_ms and usage.latency_ms["p95"] > budget.latency_p95_ms:
            over.append(
                f"p95 latency {usage.latency_ms['p95']:,.0f} ms is over the budget of "
                f"{budget.latency_p95_ms:,.0f} ms"
            )
    if budget.output_tokens_per_case is not None:
        if usage.output_tokens_per_case is None:
            over.append(
                "output tokens per case cannot be judged: the provider reported no usage and "
                "no tokenizer counted it"
            )
        elif usage.output_tokens_per_case > budget.output_tokens_per_case:
            over.append(
                f"{usage.output_tokens_per_case:,.0f} output tokens per case{usage.mark} is over "
                f"the budget of {budget.output_tokens_per_case:,.0f}"
            )
    if budget.cost_per_case_usd is not None:
        if usage.cost_per_case_usd is None:
            why = "no price is known" if usage.price is None else "it reported no usage"
            over.append(
                f"cost per case cannot be judged: {why} for {provider} "
                f"(give --price {provider}=INPUT,OUTPUT in US dollars per million tokens)"
            )
        elif usage.cost_per_case_usd > budget.cost_per_case_usd:
            over.append(
                f"{usd(usage.cost_per_case_usd)} per case{usage.mark} is over the budget of "
                f"{usd(budget.cost_per_case_usd)}"
            )
    if usage.estimated:
        detail["tokens_estimated"] = estimated_note(usage.estimated)
    if over:
        if usage.estimated:
            over.append(detail["tokens_estimated"])
        return Check(Layer.BUDGET, False, "; ".join(over), detail=detail)
    return Check(Layer.BUDGET, True, detail=detail)


def estimated_note(estimated: Mapping[str, Any]) -> str:
    """Say which token figures were counted here, with what, and how far off they may be."""
    return (
        f"tokens of {estimated['calls']} of {estimated['of']} call(s) estimated with "
        f"{estimated['tokenizer']} (the provider reported no usage; margin: {estimated['margin']})"
    )
