"""What the failover matrix shows of a certificate's usage, and which budget limits it exceeds."""

from __future__ import annotations

from contracts.budget import Budget, usage_figures


def test_the_figures_are_trimmed_from_the_certificates_usage() -> None:
    usage = {
        "calls": 75,
        "answered": 74,
        "latency_ms": {"p50": 180.0, "p95": 1200.0, "p99": 2000.0, "max": 2100.0},
        "output_tokens_per_case": 62.5,
        "output_tokens_max": 90,
        "input_tokens": 1000,
        "output_tokens": 4000,
        "cost_per_case_usd": 0.0004,
        "cost_usd": 0.03,
        "price_per_mtok": {"input": 0.5, "output": 1.5},
    }
    assert usage_figures(usage) == {
        "calls": 75,
        "latency_p50_ms": 180.0,
        "latency_p95_ms": 1200.0,
        "output_tokens_per_case": 62.5,
        "cost_per_case_usd": 0.0004,
        "tokens_estimated": None,
    }


def test_no_usage_or_unknown_figures_are_none_never_an_error() -> None:
    assert usage_figures(None) is None  # a certificate from before budgets
    assert usage_figures("junk") is None
    figures = usage_figures({"calls": True, "latency_ms": {}, "cost_per_case_usd": "1"})
    assert figures == {
        "calls": None,
        "latency_p50_ms": None,
        "latency_p95_ms": None,
        "output_tokens_per_case": None,
        "cost_per_case_usd": None,
        "tokens_estimated": None,
    }


def test_tokens_counted_offline_name_their_tokenizer() -> None:
    usage = {"calls": 3, "output_tokens_per_case": 40.0, "tokens_estimated": {
        "calls": 3, "of": 3, "tokenizer": "estimate:3-bytes-per-token", "margin": "…"}}  # fmt: skip
    figures = usage_figures(usage)
    assert figures is not None
    assert figures["tokens_estimated"] == "estimate:3-bytes-per-token"


def test_over_names_only_the_declared_limits_a_known_figure_exceeds() -> None:
    budget = Budget(latency_p95_ms=20_000, output_tokens_per_case=300)
    figures = {
        "latency_p95_ms": 41_000.0,
        "output_tokens_per_case": 300.0,
        "cost_per_case_usd": 9.0,
    }
    assert budget.over(figures) == ["latency_p95_ms"]  # at the limit is within; cost unlimited
    assert budget.over({"latency_p95_ms": None, "output_tokens_per_case": 301}) == [
        "output_tokens_per_case"
    ]
    assert budget.over(None) == []
    assert Budget().over(figures) == []
