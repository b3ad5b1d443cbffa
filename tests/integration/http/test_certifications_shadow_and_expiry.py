"""GET /v1/certifications and /metrics (issue 38): expiry, suspension and shadow checks per
pair, as the console shows them."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts.loader import CATALOG_ROOT, load_contract
from contracts.model import Contract
from contracts.registry import CertificationRegistry
from gateway.app import settings_for_tests
from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import ClaimSpec, NewJob
from gateway.domain.shadow_records import ShadowOutcome
from gateway.settings import Settings
from gateway.store import SqlJobStore
from tests.integration.http.test_certifications_matrix import NOW, TRIAGE, _iso, certificate

PAIR = {"contract": TRIAGE, "primary": "sim-openai", "fallback": "sim-anthropic"}


@pytest.fixture
def settings(database_url: str) -> Settings:
    return settings_for_tests(
        database_url=database_url, shadow={"sample_rate": 0.5, "min_samples": 2}
    )


@pytest.fixture
def catalog() -> dict[str, Contract]:
    triage = load_contract(CATALOG_ROOT / "ticket-triage")
    return {triage.name: triage}


@pytest.fixture
def certifications(tmp_path: Path) -> CertificationRegistry:
    return CertificationRegistry(tmp_path / "certifications.json")


async def shadow_checked(store: SqlJobStore, outcomes: list[ShadowOutcome]) -> None:
    for n, outcome in enumerate(outcomes):
        value = {"n": n}
        created = await store.create_or_get(
            NewJob("alice", f"k{n}", fingerprint(TRIAGE, value, None), TRIAGE, "sim-openai",
                   None, value),
            ClaimSpec(worker_id="w", lease_ttl=60.0, deadline_s=30.0),
        )  # fmt: skip
        assert created.claimed is not None
        await store.finalize(created.claimed.attempt.id, {"category": "billing"})
        claimed = await store.begin_shadow_check(created.job.id, TRIAGE, **_pair())
        assert claimed is not None
        fields = ["category"] if outcome is ShadowOutcome.DISAGREED else []
        await store.finish_shadow_check(claimed[0], outcome, {"fields": fields})


def _pair() -> dict[str, str]:
    return {"primary": "sim-openai", "fallback": "sim-anthropic"}


async def test_each_pair_says_when_it_expires_whether_it_is_suspended_and_its_shadow_rate(
    client: httpx.AsyncClient,
    keys: Any,
    settings: Settings,
    catalog: dict[str, Contract],
    certifications: CertificationRegistry,
    store: SqlJobStore,
) -> None:
    triage = catalog[TRIAGE]
    certifications.record(
        [
            certificate(settings, triage, "sim-openai", expires_in=dt.timedelta(days=20)),
            certificate(settings, triage, "sim-anthropic", expires_in=dt.timedelta(days=5),
                        run_id="cert-f"),
        ]
    )  # fmt: skip
    await shadow_checked(store, [ShadowOutcome.AGREED, ShadowOutcome.DISAGREED])
    [row] = (await client.get("/v1/certifications", headers=keys.auth())).json()["certifications"]
    assert (row["allowed"], row["suspended"]) == (True, None)
    assert row["expires_at"] == _iso(NOW + dt.timedelta(days=5))
    assert 4.9 < row["days_to_expiry"] <= 5.0 and row["recertify_due"] is True
    assert row["fallback_certificate"]["run_id"] == "cert-f"
    assert 19.9 < row["primary_certificate"]["days_to_expiry"] <= 20.0
    shadow = row["shadow"]
    assert (shadow["checks"], shadow["disagreements"], shadow["disagreement_rate"]) == (2, 1, 0.5)
    assert shadow["fields"] == {"category": 1} and shadow["sample_rate"] == 0.5

    certifications.suspend(
        {**PAIR, "since": _iso(NOW), "reason": "shadow checks disagree",
         "disagreement_rate": 0.5, "checks": 2, "disagreements": 1, "threshold": 0.2,
         "min_samples": 2, "fields": {"category": 1}, "fallback_run_id": "cert-f",
         "fallback_certified_at": _iso(NOW - dt.timedelta(days=2)), "by": "gw-1"}
    )  # fmt: skip
    [row] = (await client.get("/v1/certifications", headers=keys.auth())).json()["certifications"]
    assert (row["allowed"], row["reason"]) == (False, "suspended")
    assert row["suspended"]["disagreement_rate"] == 0.5
    assert row["suspended"]["since"] == _iso(NOW) and row["suspended"]["fields"] == {"category": 1}

    metrics = (await client.get("/metrics")).text
    labels = 'contract="ticket-triage@1",fallback="sim-anthropic",primary="sim-openai"'
    assert f"onejob_failover_suspended{{{labels}}} 1.0" in metrics
    assert f"onejob_shadow_disagreement_rate{{{labels}}} 0.5" in metrics
    assert "onejob_shadow_calls_last_hour 2.0" in metrics
    assert "onejob_shadow_calls_per_hour_limit 60.0" in metrics
    days = [
        line
        for line in metrics.splitlines()
        if line.startswith('onejob_certificate_days_to_expiry{contract="ticket-triage@1",'
                           'provider="sim-anthropic"}')
    ]  # fmt: skip
    assert len(days) == 1 and 4.9 < float(days[0].split()[-1]) <= 5.0
