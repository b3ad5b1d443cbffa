"""GET /v1/certifications from a real registry: the same reason words as can-i-failover, and
the certificates (dates, fingerprint, layers) the console's failover matrix shows."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts.loader import CATALOG_ROOT, load_contract
from contracts.model import Contract
from contracts.registry import CertificationRegistry, adapter_version_of
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
