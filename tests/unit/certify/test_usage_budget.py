"""Latency percentiles, tokens and cost per case, and the budget check over them."""

from __future__ import annotations

import pytest

from certify.usage import CallUsage, Price, check_budget, percentile, summarize, usd
from contracts.budget import Budget, BudgetSpecError


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50 and percentile(values, 95) == 95
    assert percentile([3.0], 99) == 3.0 and percentile([1.0, 9.0], 95) == 9.0


def test_a_summary_keeps_failed_calls_out_of_latency_and_tokens() -> None:
    calls = [CallUsage(0.1, 1000, 50), CallUsage(0.3, 1000, 150), CallUsage()]
    summary = summarize(calls, Price(2.0, 10.0))
    assert summary.calls == 3 and summary.answered == 2
    assert summary.latency_ms == {"p50": 100.0, "p95": 300.0, "p99": 300.0, "max": 300.0}
    assert summary.output_tokens_per_case == 100 and summary.output_tokens_max == 150
    assert summary.cost_per_case_usd == pytest.approx((2000 * 2 + 200 * 10) / 1e6 / 2)
    assert summary.brief() == "p95 300 ms, 100 output tokens/case, $0.003/case"
    assert usd(0.0000001) == "$0.0000001"


def test_a_budget_names_every_limit_it_exceeds_and_skips_latency_in_replay() -> None:
    summary = summarize([CallUsage(2.0, 10, 500)], None)
    budget = Budget(latency_p95_ms=1000, output_tokens_per_case=100)
    check = check_budget(budget, summary, "p")
    assert check.reason == (
        "p95 latency 2,000 ms is over the budget of 1,000 ms; "
        "500 output tokens per case is over the budget of 100"
    )
    replayed = check_budget(budget, summary, "p", judge_latency=False)
    assert replayed.reason == "500 output tokens per case is over the budget of 100"
    assert check_budget(Budget(), summary, "p").passed


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ({"latency_p95": 1}, r"unknown budget key\(s\) \['latency_p95'\]"),
        ({"latency_p95_ms": 0}, "must be a positive number"),
        ({"output_tokens_per_case": True}, "must be a positive number"),
    ],
)
def test_a_malformed_budget_is_refused(table: dict[str, object], error: str) -> None:
    with pytest.raises(BudgetSpecError, match=error):
        Budget.from_table(table)


def test_a_price_is_two_numbers_per_million_tokens() -> None:
    assert Price.parse("gpt-4o=2.5,10") == ("gpt-4o", Price(2.5, 10.0))
    with pytest.raises(ValueError, match="NAME=INPUT,OUTPUT"):
        Price.parse("gpt-4o=2.5")
