"""Which certificates are due for re-certification (issue 38): ``onejob certify --due``
and the scheduled pass of ``onejob worker``.

A (provider, contract) unit is due when its newest certificate for the contract's current
fingerprint, model and adapter passed and expires within the window (or has expired
already: a certificate that lapsed is renewed too). Never certified, failed or stale
units are not due: those need a person. Neither is the fallback of a suspended pair: a
suspension is lifted by certifying the fallback again, which is the operator's decision
after reading why the shadow checks disagreed (``onejob certify --provider F``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping

from contracts.model import Contract
from contracts.registry import CertificationRegistry
from contracts.registry_file import parse_time
from providers.config import ProviderConfig

DAY = 86_400.0  # seconds


@dataclasses.dataclass(frozen=True, slots=True)
class Due:
    """One unit to certify again, and why."""

    provider: str
    contract: str
    expires_at: str
    days_left: float  #: negative once expired

    def line(self) -> str:
        """Say it in one line."""
        when = (
            f"expired {-self.days_left:.1f} days ago"
            if self.days_left < 0
            else f"expires in {self.days_left:.1f} days"
        )
        return f"{self.provider} on {self.contract}: {when} ({self.expires_at})"


def due_units(
    registry: CertificationRegistry,
    catalog: Mapping[str, Contract],
    providers: Mapping[str, ProviderConfig],
    pairs: Iterable[tuple[str, str]],
    *,
    now: dt.datetime,
    within_days: float,
) -> tuple[list[Due], list[str]]:
    """Return the due units and what was left out on purpose (suspended fallbacks)."""
    pairs = list(pairs)
    names = list(dict.fromkeys(n for pair in pairs for n in pair if n in providers))
    due: list[Due] = []
    skipped: list[str] = []
    for contract in (catalog[c] for c in sorted(catalog)):
        for name in names:
            verdict = registry.certificate_verdict(contract, providers[name], now=now)
            if not verdict.allowed and verdict.reason != "expired":
                continue
            cert = registry.latest_certificate(contract.name, name)
            if cert is None:
                continue
            days = (parse_time(str(cert["expires_at"])) - now).total_seconds() / DAY
            if days > within_days:
                continue
            held = [
                p
                for p, f in pairs
                if f == name and registry.suspension(contract.name, p, name) is not None
            ]
            if held:
                skipped.append(
                    f"{name} on {contract.name}: failover from {', '.join(held)} is suspended "
                    "by the shadow checks; certify it yourself once you know why"
                )
                continue
            due.append(Due(name, contract.name, str(cert["expires_at"]), round(days, 2)))
    return due, skipped
