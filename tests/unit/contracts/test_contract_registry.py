"""The certification registry and the failover verdict."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest

from contracts.loader import load_catalog
from contracts.registry import FORMAT, CertificationRegistry
from gateway.settings import RouteConfig
from providers.config import ProviderConfig

CONTRACT = load_catalog()["ticket-triage@1"]
NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
P = ProviderConfig(name="p", protocol="openai", base_url="http://x/v1", model="gpt-a")
F = ProviderConfig(name="f", protocol="anthropic", base_url="http://y", model="claude-b")


def versions(protocol: str) -> str:
    return f"{protocol}/1"


def evidence(**changed: dict[str, Any]) -> dict[str, Any]:
    """Return evidence for every case: the expected values, with some cases changed."""
    out = {}
    for case in CONTRACT.cases:
        agree = {f: case.expect.get(f, "x") for f in CONTRACT.must_agree}
        agree = {k: (v[0] if isinstance(v, list) else v) for k, v in agree.items()}
        out[case.id] = {
            "agree": {**agree, **changed.get(case.id, {})},
            "answers": ["0" * 64],
            "provider_ids": [f"req-{case.id}"],
            "models": ["m"],
        }
    return out


def cert(provider: ProviderConfig, **over: Any) -> dict[str, Any]:
    base = {
        "contract": CONTRACT.name,
        "contract_fingerprint": CONTRACT.fingerprint,
        "provider": provider.name,
        "protocol": provider.protocol,
        "model": provider.model,
        "adapter_version": versions(provider.protocol),
        "mode": "live",
        "verdict": "pass",
        "certified_at": "2026-02-20T00:00:00Z",
        "expires_at": "2026-03-20T00:00:00Z",
        "pass_rates": {},
        "failures": [],
        "run_id": f"cert-run-of-{provider.name}",
        "evidence": evidence(),
    }
    return {**base, **over}


@pytest.fixture
def registry(tmp_path: Path) -> CertificationRegistry:
    return CertificationRegistry(tmp_path / "certs.json", adapter_version=versions)


def test_both_valid_certificates_allow_the_failover(registry: CertificationRegistry) -> None:
    registry.record([cert(P), cert(F)])
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert (verdict.allowed, verdict.reason) == (True, "certified")


def test_an_allowed_failover_says_whose_stability_rests_on_pass_k_alone(
    registry: CertificationRegistry,
) -> None:
    registry.record([cert(P), cert(F, omitted_parameters=["temperature"])])
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert verdict.allowed
    assert "; the stability of f rests on pass^k alone" in verdict.detail
    assert "stability of p" not in verdict.detail


def test_missing_file_is_an_empty_registry_that_refuses(registry: CertificationRegistry) -> None:
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert not verdict.allowed
    assert verdict.reason == "missing certificate for f and p on ticket-triage@1"


def test_the_primary_needs_a_certificate_too(registry: CertificationRegistry) -> None:
    registry.record([cert(F)])
    assert registry.can_failover(CONTRACT, P, F, now=NOW).reason == (
        "missing certificate for p on ticket-triage@1"
    )


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        (
            {"verdict": "fail", "failures": [{"case": "c", "layer": "schema", "reason": "r"}]},
            "failed",
        ),
        ({"expires_at": "2026-03-01T11:59:59Z"}, "expired"),
        ({"contract_fingerprint": "0" * 64}, "fingerprint changed"),
        ({"model": "claude-a"}, "model changed"),
        ({"adapter_version": "anthropic/0"}, "adapter changed"),
    ],
)
def test_a_bad_fallback_certificate_refuses_with_its_reason(
    registry: CertificationRegistry, override: dict[str, Any], reason: str
) -> None:
    registry.record([cert(P), cert(F, **override)])
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert (verdict.allowed, verdict.reason) == (False, reason)
    assert "f on ticket-triage@1" in verdict.detail


def test_failed_verdict_explains_the_layer_and_case(registry: CertificationRegistry) -> None:
    failure = {"case": "double-charge", "layer": "semantics", "reason": "wrong category"}
    registry.record([cert(P), cert(F, verdict="fail", failures=[failure])])
    detail = registry.can_failover(CONTRACT, P, F, now=NOW).detail
    assert "semantics layer, case double-charge: wrong category" in detail


def test_replay_certificates_never_count(registry: CertificationRegistry) -> None:
    registry.record([cert(P), cert(F, mode="replay")])
    assert registry.can_failover(CONTRACT, P, F, now=NOW).reason.startswith("missing certificate")


def test_a_newer_failing_certificate_overrides_an_older_pass(
    registry: CertificationRegistry,
) -> None:
    registry.record(
        [
            cert(P),
            cert(F),
            cert(F, mode="record", verdict="fail", certified_at="2026-02-25T00:00:00Z"),
        ]
    )
    assert registry.can_failover(CONTRACT, P, F, now=NOW).reason == "failed"


def test_disagreeing_with_the_primary_refuses_naming_the_case(
    registry: CertificationRegistry,
) -> None:
    case = CONTRACT.cases[3].id
    registry.record([cert(P), cert(F, evidence=evidence(**{case: {"category": "other"}}))])
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert (verdict.allowed, verdict.reason) == (False, "disagrees with primary")
    assert f"in 1 of {len(CONTRACT.cases)} case(s) (case {case}: disagree on category" in (
        verdict.detail
    )


def test_certificates_from_separate_runs_agree_from_their_stored_evidence(
    registry: CertificationRegistry,
) -> None:
    registry.record([cert(P, run_id="cert-a"), cert(F, run_id="cert-b")])
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert (verdict.allowed, verdict.reason) == (True, "certified")
    assert "(runs cert-a and cert-b)" in verdict.detail


@pytest.mark.parametrize("side", ["fallback", "primary"])
def test_a_certificate_without_evidence_refuses_with_no_agreement_evidence(
    registry: CertificationRegistry, side: str
) -> None:
    old = {"evidence": None, "run_id": None}  # a certificate written before evidence existed
    registry.record(
        [
            cert(P, **(old if side == "primary" else {})),
            cert(F, **old if side == "fallback" else {}),
        ]
    )
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert (verdict.allowed, verdict.reason) == (False, "no agreement evidence with p")
    who = "f (run unknown)" if side == "fallback" else "p (run unknown)"
    assert who in verdict.detail


def test_evidence_missing_one_case_cannot_be_compared(registry: CertificationRegistry) -> None:
    partial = evidence()
    del partial[CONTRACT.cases[-1].id]
    registry.record([cert(P), cert(F, evidence=partial)])
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert verdict.reason == "no agreement evidence with p"
    assert f"(first: {CONTRACT.cases[-1].id})" in verdict.detail


def test_a_stored_same_run_agreement_record_does_not_replace_evidence(
    registry: CertificationRegistry,
) -> None:
    agreement = {"p": {"rate": 1.0, "failures": []}}
    registry.record([cert(P), cert(F, agreement=agreement, evidence={})])
    assert registry.can_failover(CONTRACT, P, F, now=NOW).reason == "no agreement evidence with p"


def test_provider_ids_name_the_run_that_saw_them(registry: CertificationRegistry) -> None:
    registry.record([cert(P, run_id="cert-a"), cert(F)])
    ids = registry.provider_ids("p", CONTRACT.name)
    assert ids[f"req-{CONTRACT.cases[0].id}"] == "cert-a"
    assert len(ids) == len(CONTRACT.cases)
    assert registry.provider_ids("p", "other@1") == {}


def test_record_replaces_the_entry_with_the_same_key(registry: CertificationRegistry) -> None:
    registry.record([cert(P), cert(F)])
    registry.record([cert(F, verdict="fail", failures=[])])
    doc = json.loads(registry.path.read_text())
    assert doc["format"] == FORMAT
    assert len(doc["certificates"]) == 2
    assert registry.can_failover(CONTRACT, P, F, now=NOW).reason == "failed"


def test_registry_reloads_when_another_process_rewrites_the_file(tmp_path: Path) -> None:
    path = tmp_path / "certs.json"
    reader = CertificationRegistry(path, adapter_version=versions)
    assert not reader.can_failover(CONTRACT, P, F, now=NOW).allowed
    CertificationRegistry(path, adapter_version=versions).record([cert(P), cert(F)])
    assert reader.can_failover(CONTRACT, P, F, now=NOW).allowed
    doc = json.loads(path.read_text())
    doc["certificates"] = [cert(P)]
    path.write_text(json.dumps(doc))
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse clocks
    assert not reader.can_failover(CONTRACT, P, F, now=NOW).allowed


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"format": "other/1", "certificates": []}',
        '{"format": "onejob.certifications/1", "certificates": [{}]}',
    ],
)
def test_an_unreadable_registry_refuses_everything(tmp_path: Path, content: str) -> None:
    path = tmp_path / "certs.json"
    path.write_text(content)
    verdict = CertificationRegistry(path, adapter_version=versions).can_failover(
        CONTRACT, P, F, now=NOW
    )
    assert (verdict.allowed, verdict.reason) == (False, "registry unreadable")


def test_matrix_has_one_row_per_contract_and_configured_fallback(
    registry: CertificationRegistry,
) -> None:
    g = ProviderConfig(name="g", protocol="openai", base_url="http://z/v1", model="m")
    registry.record([cert(P), cert(F)])
    catalog = {CONTRACT.name: CONTRACT}
    routes = {"*": RouteConfig(primary="p", fallbacks=("f", "g", "ghost"))}
    rows = registry.matrix(catalog, {"p": P, "f": F, "g": g}, routes, now=NOW)
    assert [(r["fallback"], r["allowed"], r["reason"]) for r in rows] == [
        ("f", True, "certified"),
        ("g", False, "missing certificate for g on ticket-triage@1"),
        ("ghost", False, "unknown provider"),
    ]
    assert all(r["contract"] == CONTRACT.name and r["primary"] == "p" for r in rows)


@pytest.mark.parametrize(
    "bad",
    [
        {"expires_at": "soon"},
        {"certified_at": 20260220},
        {"agreement": ["p"]},
        {"agreement": {"p": 1.0}},
        {"verdict": None},
        {"failures": "schema"},
        {"evidence": ["case"]},
        {"evidence": {"case": "billing"}},
        {"run_id": 7},
        {"omitted_parameters": "temperature"},
        {"omitted_parameters": [None]},
        {"stability_basis": ["pass^k alone"]},
    ],
)
def test_a_certificate_with_malformed_values_refuses_everything(
    tmp_path: Path, bad: dict[str, Any]
) -> None:
    path = tmp_path / "certs.json"
    doc = {"format": FORMAT, "certificates": [cert(P), cert(F, **bad)]}
    path.write_text(json.dumps(doc))
    registry = CertificationRegistry(path, adapter_version=versions)
    verdict = registry.can_failover(CONTRACT, P, F, now=NOW)
    assert (verdict.allowed, verdict.reason) == (False, "registry unreadable")
