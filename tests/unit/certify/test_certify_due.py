"""``onejob certify --due`` (issue 38) and what ``can-i-failover`` prints (issue 40)."""

from __future__ import annotations

import argparse
import datetime as dt
import io
from pathlib import Path
from typing import Any

from certify.due import due_units
from certify.simulated import sim_providers
from cli import certify as certify_commands
from cli.certify import certify, cmd_can_i_failover
from contracts.loader import load_catalog
from contracts.registry import CertificationRegistry, adapter_version_of
from tests.unit.contracts.test_contract_registry import CONTRACT, NOW, F, P, cert, versions

CATALOG = {CONTRACT.name: CONTRACT}
PROVIDERS = {"p": P, "f": F}


def registry_with(tmp_path: Path, *certificates: dict[str, Any]) -> CertificationRegistry:
    registry = CertificationRegistry(tmp_path / "certs.json", adapter_version=versions)
    registry.record(list(certificates))
    return registry


def test_certificates_expiring_within_the_window_or_lapsed_are_due(tmp_path: Path) -> None:
    registry = registry_with(
        tmp_path,
        cert(P, expires_at="2026-03-04T12:00:00Z"),  # 3 days left
        cert(F, expires_at="2026-03-25T12:00:00Z"),  # 24 days left
    )
    due, skipped = due_units(registry, CATALOG, PROVIDERS, [("p", "f")], now=NOW, within_days=7)
    assert [(d.provider, d.days_left) for d in due] == [("p", 3.0)] and skipped == []
    assert due[0].line() == "p on ticket-triage@1: expires in 3.0 days (2026-03-04T12:00:00Z)"
    later = NOW + dt.timedelta(days=5)  # p lapsed two days ago: still renewed
    due, _ = due_units(registry, CATALOG, PROVIDERS, [("p", "f")], now=later, within_days=30)
    assert [(d.provider, d.days_left) for d in due] == [("p", -2.0), ("f", 19.0)]


def test_failed_and_missing_certificates_are_left_to_a_person(tmp_path: Path) -> None:
    registry = registry_with(tmp_path, cert(P, verdict="fail", expires_at="2026-03-02T00:00:00Z"))
    due, _ = due_units(registry, CATALOG, PROVIDERS, [("p", "f")], now=NOW, within_days=7)
    assert due == []


def test_the_fallback_of_a_suspended_pair_is_not_renewed_automatically(tmp_path: Path) -> None:
    registry = registry_with(tmp_path, cert(P), cert(F, expires_at="2026-03-03T00:00:00Z"))
    registry.suspend(
        {"contract": CONTRACT.name, "primary": "p", "fallback": "f",
         "since": "2026-02-28T00:00:00Z", "fallback_certified_at": "2026-02-20T00:00:00Z",
         "checks": 20, "disagreements": 9}
    )  # fmt: skip
    due, skipped = due_units(registry, CATALOG, PROVIDERS, [("p", "f")], now=NOW, within_days=7)
    assert due == []
    assert skipped == [
        "f on ticket-triage@1: failover from p is suspended by the shadow checks; "
        "certify it yourself once you know why"
    ]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="onejob")
    certify_commands.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(list(argv))


def sim_certificate(name: str, run_id: str, expires_in: dt.timedelta) -> dict[str, Any]:
    cfg = sim_providers()[name]
    triage = load_catalog()["ticket-triage@1"]
    now = dt.datetime.now(dt.UTC)
    return {
        **cert(cfg, run_id=run_id, evidence={c.id: {"agree": {}} for c in triage.cases}),
        "contract_fingerprint": triage.fingerprint,
        "adapter_version": adapter_version_of(cfg.protocol),
        "certified_at": (now - dt.timedelta(days=1)).isoformat().replace("+00:00", "Z"),
        "expires_at": (now + expires_in).isoformat().replace("+00:00", "Z"),
    }


def test_can_i_failover_names_a_shared_run_once(tmp_path: Path) -> None:
    path = tmp_path / "certs.json"
    CertificationRegistry(path).record(
        [
            sim_certificate("faithful", "cert-20260301-885", dt.timedelta(days=20)),
            sim_certificate("faithful-claude", "cert-20260301-885", dt.timedelta(days=20)),
        ]
    )
    out = io.StringIO()
    args = parse(
        "can-i-failover", "--sim", "--registry", str(path), "--contract", "ticket-triage@1",
        "--from", "faithful", "--to", "faithful-claude",
    )  # fmt: skip
    assert cmd_can_i_failover(args, out) == 0
    said = out.getvalue()
    assert "(run cert-20260301-885)" in said and "885 and cert" not in said


def test_can_i_failover_names_both_providers_without_a_certificate(tmp_path: Path) -> None:
    out = io.StringIO()
    args = parse(
        "can-i-failover", "--sim", "--registry", str(tmp_path / "none.json"),
        "--contract", "ticket-triage@1", "--from", "faithful", "--to", "faithful-claude",
    )  # fmt: skip
    assert cmd_can_i_failover(args, out) == 1
    assert out.getvalue().startswith(
        "no: missing certificate for faithful-claude and faithful on ticket-triage@1"
    )


async def test_certify_due_says_when_nothing_is_due(tmp_path: Path) -> None:
    path = tmp_path / "certs.json"
    CertificationRegistry(path).record(
        [sim_certificate("faithful", "cert-1", dt.timedelta(days=20))]
    )
    out = io.StringIO()
    args = parse("certify", "--sim", "--due", "--registry", str(path))
    assert await certify(args, out) == 0
    assert "nothing to certify again: no certificate expires within 7 days" in out.getvalue()


async def test_the_workers_pass_logs_what_it_did_and_sets_days_to_expiry(
    tmp_path: Path, caplog: Any
) -> None:
    import asyncio
    import logging

    from cli.recertify import recertify_forever
    from gateway.metrics import Metrics
    from gateway.settings import Settings, simulator_defaults

    path = tmp_path / "certs.json"
    settings = Settings.model_validate(
        {**simulator_defaults(), "certifications_path": str(path),
         "certification": {"interval": 60.0}}
    )  # fmt: skip
    cfg = settings.providers["sim-openai"]
    entry = sim_certificate("faithful", "cert-1", dt.timedelta(days=20))
    entry.update(provider="sim-openai", model=cfg.model)
    CertificationRegistry(path).record([entry])
    stop, metrics = asyncio.Event(), Metrics()
    with caplog.at_level(logging.INFO, logger="onejob.recertify"):
        task = asyncio.create_task(recertify_forever(settings, stop, metrics))
        for _ in range(100):
            if "re-certification pass" in caplog.text:
                break
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(task, 5)
    assert "nothing to certify again: no certificate expires within 7 days" in caplog.text
    days = metrics.registry.get_sample_value(
        "onejob_certificate_days_to_expiry",
        {"contract": "ticket-triage@1", "provider": "sim-openai"},
    )
    assert days is not None and 19.9 < days <= 20.0
