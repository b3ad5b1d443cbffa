"""Suspensions in the registry (issue 38), and what can_failover says of runs and missing
certificates (issue 40)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contracts.registry import CertificationRegistry
from tests.unit.contracts.test_contract_registry import CONTRACT, NOW, F, P, cert, versions


@pytest.fixture
def registry(tmp_path: Path) -> CertificationRegistry:
    return CertificationRegistry(tmp_path / "certs.json", adapter_version=versions)


def suspension(**over: Any) -> dict[str, Any]:
    base = {
        "contract": CONTRACT.name,
        "primary": P.name,
        "fallback": F.name,
        "since": "2026-02-25T00:00:00Z",
        "reason": "shadow checks disagree",
        "disagreement_rate": 0.45,
        "checks": 20,
        "disagreements": 9,
        "threshold": 0.2,
        "min_samples": 20,
        "fields": {"category": 9},
        "fallback_run_id": "cert-run-of-f",
        "fallback_certified_at": "2026-02-20T00:00:00Z",
        "by": "gw-1",
    }
    return {**base, **over}


def test_a_run_that_certified_both_providers_is_named_once(
    registry: CertificationRegistry,
) -> None:
    registry.record([cert(P, run_id="cert-885"), cert(F, run_id="cert-885")])
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert verdict.allowed
    assert "(run cert-885)" in verdict.detail
    assert "cert-885 and cert-885" not in verdict.detail


def test_two_providers_without_a_certificate_are_both_named(
    registry: CertificationRegistry,
) -> None:
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert verdict.reason == f"missing certificate for f and p on {CONTRACT.name}"


def test_an_expired_fallback_and_a_missing_primary_are_both_said(
    registry: CertificationRegistry,
) -> None:
    registry.record([cert(F, expires_at="2026-02-21T00:00:00Z")])
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert verdict.reason == "expired"
    assert "missing certificate for p" in verdict.detail


def test_a_suspended_pair_is_refused_with_the_rate_and_field_names(
    registry: CertificationRegistry,
) -> None:
    registry.record([cert(P), cert(F)])
    assert registry.suspend(suspension())
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert (verdict.allowed, verdict.reason) == (False, "suspended")
    assert "disagreed in 9 of 20 (45%, threshold 20%) (on category)" in verdict.detail
    assert "certify f again" in verdict.detail
    held = registry.suspension(CONTRACT.name, P.name, F.name)
    assert held is not None and held["disagreement_rate"] == 0.45
    # The other direction, and other pairs, are not suspended.
    assert registry.suspension(CONTRACT.name, F.name, P.name) is None


def test_a_second_suspension_of_the_same_certificate_is_not_recorded(
    registry: CertificationRegistry,
) -> None:
    registry.record([cert(P), cert(F)])
    assert registry.suspend(suspension())
    assert not registry.suspend(suspension(since="2026-02-26T00:00:00Z"))
    assert len(registry.suspensions()) == 1


def test_a_new_certificate_of_the_fallback_clears_the_suspension_and_keeps_the_record(
    registry: CertificationRegistry,
) -> None:
    registry.record([cert(P), cert(F)])
    registry.suspend(suspension())
    registry.record(
        [cert(F, run_id="cert-again", certified_at="2026-02-28T00:00:00Z", mode="record")]
    )
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert (verdict.allowed, verdict.reason) == (True, "certified")
    assert registry.suspension(CONTRACT.name, P.name, F.name) is None
    [kept] = registry.suspensions()
    assert kept["cleared_by"] == "cert-again" and kept["cleared_at"]


def test_a_new_certificate_of_the_primary_does_not_clear_it(
    registry: CertificationRegistry,
) -> None:
    registry.record([cert(P), cert(F)])
    registry.suspend(suspension())
    registry.record([cert(P, run_id="cert-p2", certified_at="2026-02-28T00:00:00Z")])
    assert registry.can_failover(CONTRACT, P, F, now=NOW).reason == "suspended"


def test_recording_certificates_keeps_the_suspensions_another_process_wrote(
    registry: CertificationRegistry, tmp_path: Path
) -> None:
    registry.record([cert(P), cert(F)])
    other = CertificationRegistry(tmp_path / "certs.json", adapter_version=versions)
    other.suspend(suspension())
    registry.record([cert(P, run_id="cert-p2", certified_at="2026-02-28T00:00:00Z")])
    doc = json.loads((tmp_path / "certs.json").read_text())
    assert len(doc["suspensions"]) == 1 and len(doc["certificates"]) == 2


def test_a_malformed_suspension_makes_the_registry_refuse_everything(
    registry: CertificationRegistry, tmp_path: Path
) -> None:
    registry.record([cert(P), cert(F)])
    path = tmp_path / "certs.json"
    doc = json.loads(path.read_text())
    doc["suspensions"] = [{"contract": CONTRACT.name}]
    path.write_text(json.dumps(doc))
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert verdict.reason == "registry unreadable"
    assert "suspension" in verdict.detail
