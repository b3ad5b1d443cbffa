"""The worker's scheduled re-certification pass (issue 38) certifies a due certificate again.

``onejob worker`` runs ``certify --due`` every ``[certification] interval``
(``cli.recertify.recertify_forever``). Here the pass runs against a simulator on a loopback
port: the primary's certificate expires in 3 days and is certified again, live (a later
expiry, a new run, the days-to-expiry gauge moves from ~3 to ~30); the fallback's expires
in 2 days, but the pair is suspended by the shadow checks, so the pass leaves it to a
person and says why, and the suspension still holds afterwards.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from pathlib import Path
from typing import Any

import pytest

from cli.recertify import _expiry_gauges, recertify_forever
from contracts.loader import load_catalog
from contracts.registry import CertificationRegistry, adapter_version_of
from contracts.registry_file import iso
from gateway.metrics import Metrics
from gateway.settings import Settings, simulator_defaults
from providers.config import ProviderConfig
from providers.simulator import run_simulator

pytestmark = pytest.mark.slow

CONTRACT = "ticket-triage@1"
PRIMARY, FALLBACK = "sim-openai", "sim-anthropic"
VALIDITY_DAYS = 30.0  # days a certificate the pass issues stays valid
PASS_TIMEOUT = 90.0  # seconds the pass (a live certification, repeats 1) may take


def certificate(cfg: ProviderConfig, run_id: str, expires_in: dt.timedelta) -> dict[str, Any]:
    """A passing live certificate of ``cfg`` for the current contract, issued a day ago."""
    contract = load_catalog()[CONTRACT]
    now = dt.datetime.now(dt.UTC)
    return {
        "contract": CONTRACT,
        "contract_fingerprint": contract.fingerprint,
        "provider": cfg.name,
        "protocol": cfg.protocol,
        "model": cfg.model,
        "adapter_version": adapter_version_of(cfg.protocol),
        "mode": "live",
        "verdict": "pass",
        "certified_at": iso(now - dt.timedelta(days=1)),
        "expires_at": iso(now + expires_in),
        "repeats": 1,
        "cases": len(contract.cases),
        "pass_rates": {},
        "failures": [],
        "run_id": run_id,
        "evidence": {case.id: {"agree": {}} for case in contract.cases},
    }


def days_to_expiry(metrics: Metrics, provider: str) -> float | None:
    return metrics.registry.get_sample_value(
        "onejob_certificate_days_to_expiry", {"contract": CONTRACT, "provider": provider}
    )


async def test_the_workers_pass_recertifies_a_due_certificate_and_skips_a_suspended_fallback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "certs.json"
    async with run_simulator(port=0, catalog=load_catalog) as sim:
        settings = Settings.model_validate(
            {
                **simulator_defaults(port=sim.port),
                "certifications_path": str(path),
                "certification": {
                    "interval": 3600.0,
                    "within_days": 7.0,
                    "validity_days": VALIDITY_DAYS,
                    "repeats": 1,
                    "report_dir": str(tmp_path / "out"),
                },
            }
        )
        primary, fallback = settings.providers[PRIMARY], settings.providers[FALLBACK]
        registry = CertificationRegistry(path)
        registry.record(
            [
                certificate(primary, "cert-old-primary", dt.timedelta(days=3)),
                certificate(fallback, "cert-old-fallback", dt.timedelta(days=2)),
            ]
        )
        old_fallback = registry.latest_certificate(CONTRACT, FALLBACK)
        assert old_fallback is not None
        assert registry.suspend(
            {
                "contract": CONTRACT, "primary": PRIMARY, "fallback": FALLBACK,
                "since": iso(dt.datetime.now(dt.UTC)), "reason": "shadow checks disagree",
                "disagreement_rate": 0.5, "checks": 4, "disagreements": 2, "threshold": 0.5,
                "min_samples": 4, "fields": {"category": 2},
                "fallback_run_id": "cert-old-fallback",
                "fallback_certified_at": old_fallback["certified_at"], "by": "test",
                "cleared_at": None, "cleared_by": None,
            }
        )  # fmt: skip
        catalog = load_catalog()
        refused = registry.can_failover(catalog[CONTRACT], primary, fallback)
        assert (refused.allowed, refused.reason) == (False, "suspended")

        metrics = Metrics()
        _expiry_gauges(settings, metrics)  # what a scrape showed before the pass
        before = days_to_expiry(metrics, PRIMARY)
        assert before is not None and 2.9 < before <= 3.0

        stop = asyncio.Event()
        with caplog.at_level(logging.INFO, logger="onejob.recertify"):
            task = asyncio.create_task(recertify_forever(settings, stop, metrics))
            for _ in range(int(PASS_TIMEOUT / 0.1)):
                if "re-certification pass" in caplog.text or task.done():
                    break
                await asyncio.sleep(0.1)
            stop.set()
            await asyncio.wait_for(task, 10)

        passes = [r for r in caplog.records if r.getMessage().startswith("re-certification pass")]
        assert len(passes) == 1 and passes[0].levelno == logging.INFO, caplog.text
        said = passes[0].getMessage()
        assert f"{PRIMARY} on {CONTRACT}: expires in 3.0 days" in said, said
        assert (
            f"not due: {FALLBACK} on {CONTRACT}: failover from {PRIMARY} is suspended by the "
            "shadow checks; certify it yourself once you know why"
        ) in said, said

        # The primary holds a new certificate: live, passing, a new run, a later expiry.
        registry = CertificationRegistry(path)
        renewed = registry.latest_certificate(CONTRACT, PRIMARY)
        assert renewed is not None
        assert renewed["run_id"] != "cert-old-primary", renewed["run_id"]
        assert (renewed["mode"], renewed["verdict"]) == ("live", "pass")
        expires = dt.datetime.fromisoformat(renewed["expires_at"].replace("Z", "+00:00"))
        left = (expires - dt.datetime.now(dt.UTC)).total_seconds() / 86_400
        assert VALIDITY_DAYS - 0.1 < left <= VALIDITY_DAYS, renewed["expires_at"]
        assert registry.certificate_verdict(catalog[CONTRACT], primary).allowed
        after = days_to_expiry(metrics, PRIMARY)
        assert after is not None and VALIDITY_DAYS - 0.1 < after <= VALIDITY_DAYS

        # The suspended pair's fallback was left alone: no call, the same certificate, the
        # suspension still in force (a new certificate of the primary does not clear it).
        assert sim.calls(FALLBACK) == []
        assert sim.calls(PRIMARY), "the primary was certified live against the simulator"
        kept = registry.latest_certificate(CONTRACT, FALLBACK)
        assert kept is not None and kept["run_id"] == "cert-old-fallback"
        fallback_days = days_to_expiry(metrics, FALLBACK)
        assert fallback_days is not None and 1.9 < fallback_days <= 2.0
        verdict = registry.can_failover(catalog[CONTRACT], primary, fallback)
        assert (verdict.allowed, verdict.reason) == (False, "suspended")
        assert "certify sim-anthropic again to clear it" in verdict.detail
