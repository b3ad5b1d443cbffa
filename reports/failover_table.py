"""The decision a certification report carries: primary -> fallback, allowed or refused.

For every pair the run compared (a fallback unit's ``agreement`` names its primaries) the
verdict is the certification registry's own ``can_failover``, with the reason words of
``onejob can-i-failover``, so the published report says what the gateway will do. Given the
registry the run recorded into, it is that registry's decision (older certificates and
suspensions count); without one, a registry holding only this run's certificates decides
(a replay run's certificates never certify, so its pairs are refused as missing). Each
side shows the certificate behind the verdict: model, adapter, verdict, certified and
expiry dates, and whether it was made for the contract's current fingerprint.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from pathlib import Path
from typing import Any

from certify.results import CertificationRun, UnitResult
from contracts.registry import DEFAULT_VALIDITY, CertificationRegistry

FINGERPRINT_SHOWN = 12  # leading hex digits of a fingerprint, as the console shows them


def failover_rows(
    run: CertificationRun,
    registry: CertificationRegistry | None = None,
    *,
    validity: dt.timedelta = DEFAULT_VALIDITY,
    now: dt.datetime | None = None,
) -> list[dict[str, Any]]:
    """Return one row per primary -> fallback pair of the run, sorted by contract."""
    if registry is not None:
        return _rows(run, registry, now)
    with tempfile.TemporaryDirectory(prefix="onejob-report-") as scratch:
        path = Path(scratch) / "certifications.json"
        own = CertificationRegistry(path)
        own.record([u.certificate(validity) for u in run.units])
        return _rows(run, own, now)


def _rows(
    run: CertificationRun, registry: CertificationRegistry, now: dt.datetime | None
) -> list[dict[str, Any]]:
    units = {(u.contract.name, u.provider.name): u for u in run.units}
    rows: list[dict[str, Any]] = []
    for (contract, name), fallback in sorted(units.items()):
        for primary_name in fallback.agreement:
            primary = units.get((contract, primary_name))
            if primary is None:
                continue
            verdict = registry.can_failover(
                fallback.contract, primary.provider, fallback.provider, now=now
            )
            rows.append(
                {
                    "contract": contract,
                    "contract_fingerprint": fallback.contract.fingerprint,
                    "primary": primary_name,
                    "fallback": name,
                    "allowed": verdict.allowed,
                    "reason": verdict.reason,
                    "detail": verdict.detail,
                    "primary_certificate": _side(registry, primary),
                    "fallback_certificate": _side(registry, fallback),
                }
            )
    return rows


def _side(registry: CertificationRegistry, unit: UnitResult) -> dict[str, Any]:
    """Describe the certificate in force for one side (None fields: it holds none)."""
    entry = registry.latest_certificate(unit.contract.name, unit.provider.name) or {}
    fingerprint = entry.get("contract_fingerprint")
    return {
        "provider": unit.provider.name,
        "model": entry.get("model") or unit.provider.model,
        "adapter_version": entry.get("adapter_version"),
        "verdict": entry.get("verdict"),
        "certified_at": entry.get("certified_at"),
        "expires_at": entry.get("expires_at"),
        "run_id": entry.get("run_id"),
        "fingerprint": fingerprint,
        "fingerprint_current": fingerprint == unit.contract.fingerprint if fingerprint else None,
    }


def short(fingerprint: str | None) -> str:
    """Return a fingerprint's leading digits, as people compare them."""
    return f"{fingerprint[:FINGERPRINT_SHOWN]}…" if fingerprint else "-"
