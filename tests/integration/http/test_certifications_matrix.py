"""GET /v1/certifications from a real registry: the same reason words as can-i-failover, and
the certificates (dates, fingerprint, layers) the console's failover matrix shows."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from contracts.loader import CATALOG_ROOT, load_contract
from contracts.model import Contract
from contracts.registry import CertificationRegistry, adapter_version_of
from gateway.http import schemas
from gateway.settings import Settings

TRIAGE = "ticket-triage@1"
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


def _iso(t: dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


@pytest.fixture
def catalog() -> dict[str, Contract]:
    triage = load_contract(CATALOG_ROOT / "ticket-triage")
    return {triage.name: triage}


@pytest.fixture
def certifications(tmp_path: Path) -> CertificationRegistry:
    return CertificationRegistry(tmp_path / "certifications.json")


def certificate(
    settings: Settings, contract: Contract, provider: str, *, expires_in: dt.timedelta, **extra: Any
) -> dict[str, Any]:
    cfg = settings.providers[provider]
    return {
        "contract": contract.name,
        "contract_fingerprint": contract.fingerprint,
        "provider": provider,
        "protocol": cfg.protocol,
        "model": cfg.model,
        "adapter_version": adapter_version_of(cfg.protocol),
        "mode": "live",
        "verdict": "pass",
        "certified_at": _iso(NOW - dt.timedelta(days=2)),
        "expires_at": _iso(NOW + expires_in),
        "repeats": 3,
        "cases": 17,
        "pass_rates": {"schema": 1.0, "semantics": 1.0},
        "failures": [],
        # Stand-in agreement evidence (every case agrees on nothing): failover needs some.
        "evidence": {case.id: {"agree": {}} for case in contract.cases},
        **extra,
    }


async def test_the_matrix_carries_the_verdicts_words_and_the_certificates_behind_them(
    client: httpx.AsyncClient,
    keys: Any,
    settings: Settings,
    catalog: dict[str, Contract],
    certifications: CertificationRegistry,
) -> None:
    triage = catalog[TRIAGE]
    certifications.record(
        [
            certificate(settings, triage, "sim-openai", expires_in=dt.timedelta(days=20)),
            certificate(settings, triage, "sim-anthropic", expires_in=-dt.timedelta(hours=1)),
        ]
    )
    [row] = (await client.get("/v1/certifications", headers=keys.auth())).json()["certifications"]
    verdict = certifications.can_failover(
        triage, settings.providers["sim-openai"], settings.providers["sim-anthropic"]
    )
    assert (row["allowed"], row["reason"], row["detail"]) == (False, "expired", verdict.detail)
    assert row["reason"] == verdict.reason
    assert row["fingerprint"] == triage.fingerprint
    assert row["fallback_certificate"]["expires_at"] == _iso(NOW - dt.timedelta(hours=1))
    assert row["primary_certificate"]["expires_at"] == _iso(NOW + dt.timedelta(days=20))
    assert row["primary_certificate"]["contract_fingerprint"] == triage.fingerprint
    assert row["primary_certificate"]["pass_rates"] == {"schema": 1.0, "semantics": 1.0}

    certifications.record(
        [certificate(settings, triage, "sim-anthropic", expires_in=dt.timedelta(days=5))]
    )
    [row] = (await client.get("/v1/certifications", headers=keys.auth())).json()["certifications"]
    assert (row["allowed"], row["reason"]) == (True, "certified")
    assert row["fallback_certificate"]["expires_at"] == _iso(NOW + dt.timedelta(days=5))


async def test_a_provider_without_a_certificate_shows_none_and_the_missing_reason(
    client: httpx.AsyncClient, keys: Any, certifications: CertificationRegistry
) -> None:
    [row] = (await client.get("/v1/certifications", headers=keys.auth())).json()["certifications"]
    assert row["allowed"] is False
    assert row["reason"] == f"missing certificate for sim-anthropic and sim-openai on {TRIAGE}"
    assert row["primary_certificate"] is None and row["fallback_certificate"] is None


def usage(p50: float, p95: float, tokens: float, cost: float | None) -> dict[str, Any]:
    """A certificate's ``usage`` as ``onejob certify`` writes it (``UsageSummary.as_dict``)."""
    return {
        "calls": 75,
        "answered": 75,
        "latency_ms": {"p50": p50, "p95": p95, "p99": p95, "max": p95},
        "output_tokens_per_case": tokens,
        "output_tokens_max": int(tokens) + 10,
        "input_tokens": 30_000,
        "output_tokens": int(tokens * 75),
        "cost_per_case_usd": cost,
        "cost_usd": None if cost is None else cost * 75,
        "price_per_mtok": None if cost is None else {"input": 0.5, "output": 1.5},
    }


async def test_the_matrix_shows_each_certificates_latency_tokens_and_cost_against_the_budget(
    client: httpx.AsyncClient,
    keys: Any,
    settings: Settings,
    catalog: dict[str, Contract],
    certifications: CertificationRegistry,
) -> None:
    """Issue 38: latency and cost are part of the contract, and the matrix shows them."""
    triage = catalog[TRIAGE]
    over = "p95 latency 41,000 ms is over the budget of 20,000 ms"
    certifications.record(
        [
            certificate(
                settings, triage, "sim-openai", expires_in=dt.timedelta(days=20),
                usage=usage(180.0, 400.0, 62.0, 0.0001),
                budget={"declared": triage.budget.as_dict(), "passed": True, "reason": ""},
            ),
            certificate(
                settings, triage, "sim-anthropic", expires_in=dt.timedelta(days=20),
                verdict="fail",
                failures=[{"case": "(all)", "layer": "budget", "reason": over, "excerpt": ""}],
                usage=usage(9_000.0, 41_000.0, 420.0, None),
                budget={"declared": triage.budget.as_dict(), "passed": False, "reason": over},
            ),
        ]
    )  # fmt: skip
    r = await client.get("/v1/certifications", headers=keys.auth())
    [row] = r.json()["certifications"]
    assert (row["allowed"], row["reason"]) == (False, "failed")
    assert "budget layer" in row["detail"]
    assert row["budget"] == {
        "latency_p95_ms": 20000.0,
        "output_tokens_per_case": 300.0,
        "cost_per_case_usd": None,
    }
    assert row["primary_certificate"]["usage"] == {
        "calls": 75,
        "latency_p50_ms": 180.0,
        "latency_p95_ms": 400.0,
        "output_tokens_per_case": 62.0,
        "cost_per_case_usd": 0.0001,
        "tokens_estimated": None,
        "over_budget": [],
    }
    assert row["primary_certificate"]["budget_verdict"] == {"passed": True, "reason": ""}
    fallback = row["fallback_certificate"]
    assert fallback["usage"]["latency_p95_ms"] == 41000.0
    assert fallback["usage"]["cost_per_case_usd"] is None  # no price was given
    assert fallback["usage"]["over_budget"] == ["latency_p95_ms", "output_tokens_per_case"]
    assert fallback["budget_verdict"] == {"passed": False, "reason": over}
    # The OpenAPI document says this shape: the answer converts to its struct, strictly.
    msgspec.convert(r.json(), schemas.Certifications, strict=True)


async def test_a_certificate_recorded_without_usage_shows_null_usage(
    client: httpx.AsyncClient,
    keys: Any,
    settings: Settings,
    catalog: dict[str, Contract],
    certifications: CertificationRegistry,
) -> None:
    triage = catalog[TRIAGE]
    certifications.record(
        [
            certificate(settings, triage, name, expires_in=dt.timedelta(days=20))
            for name in ("sim-openai", "sim-anthropic")
        ]
    )
    [row] = (await client.get("/v1/certifications", headers=keys.auth())).json()["certifications"]
    for side in ("primary_certificate", "fallback_certificate"):
        assert row[side]["usage"] is None and row[side]["budget_verdict"] is None
    assert row["budget"]["latency_p95_ms"] == 20000.0  # the contract's, certificates or not
    assert row["fallback_certificate"]["production"] is None  # written before issue 48


async def test_the_matrix_shows_the_fallbacks_production_sample_beside_its_variants(
    client: httpx.AsyncClient,
    keys: Any,
    settings: Settings,
    catalog: dict[str, Contract],
    certifications: CertificationRegistry,
) -> None:
    triage = catalog[TRIAGE]
    sample = {
        "primary": "sim-openai", "wanted": 50, "drawn": 50, "calls": 50, "judged": 50,
        "disagreed": 48, "errors": 0, "disagreement_rate": 0.96, "threshold": 0.2,
        "min_samples": 20, "verdict": "refused", "fields": {"category": 48},
        "disagreements": [{"input_sha256": "0a1b2c3d4e5f", "fields": ["category"],
                           "hashes": {"category": ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]}}],
        "skipped": None,
    }  # fmt: skip
    certifications.record(
        [
            certificate(settings, triage, "sim-openai", expires_in=dt.timedelta(days=20)),
            certificate(
                settings,
                triage,
                "sim-anthropic",
                expires_in=dt.timedelta(days=20),
                verdict="fail",
                production=[sample],
                pass_rates={"variants": 1.0, "production:sim-openai": 0.04},
            ),
        ]
    )
    r = await client.get("/v1/certifications", headers=keys.auth())
    [row] = r.json()["certifications"]
    assert (row["allowed"], row["reason"]) == (False, "failed")
    fallback = row["fallback_certificate"]
    assert fallback["production"] == [sample]
    assert fallback["pass_rates"] == {"variants": 1.0, "production:sim-openai": 0.04}
    msgspec.convert(r.json(), schemas.Certifications, strict=True)
