"""Where an attempt may go next: configured fallbacks the certification registry allows (R6).

One ``Routes`` object answers for the dispatcher (failover and hedging), and can answer for
the HTTP layer (``POST /v1/jobs/{id}/attempts``, ``GET /v1/certifications``) too, so every
part reads the same ``can_failover`` verdicts from the same registry file.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gateway.domain.ports import Certifications, ContractSpec
from gateway.domain.records import AttemptRecord, JobRecord
from gateway.domain.states import AttemptReason
from gateway.settings import Settings
from providers.config import ProviderConfig

log = logging.getLogger("onejob.dispatcher")


class Routes:
    """Answer routing questions from the settings, the catalog and the registry."""

    def __init__(
        self,
        settings: Settings,
        catalog: Mapping[str, ContractSpec],
        provider_configs: Mapping[str, ProviderConfig],
        certifications: Certifications,
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self.provider_configs = provider_configs
        self.certifications = certifications

    def effective_fallbacks(self, contract_name: str, primary: str) -> list[str]:
        """Return the configured fallbacks the registry certifies for this primary, in order."""
        route = self.settings.route_for(contract_name)
        contract = self.catalog.get(contract_name)
        primary_cfg = self.provider_configs.get(primary)
        if route is None or contract is None or primary_cfg is None:
            return []
        # A job whose client named a non-default primary may still fall back on the route's.
        chain = route.fallbacks if primary == route.primary else (route.primary, *route.fallbacks)
        allowed: list[str] = []
        for name in chain:
            cfg = self.provider_configs.get(name)
            if name == primary or cfg is None or name in allowed:
                continue
            if self.allows(contract, primary_cfg, cfg):
                allowed.append(name)
        return allowed

    def allows(
        self, contract: ContractSpec, primary: ProviderConfig, fallback: ProviderConfig
    ) -> bool:
        """Ask the registry; a registry that cannot answer refuses (fail closed)."""
        try:
            return bool(self.certifications.can_failover(contract, primary, fallback).allowed)
        except Exception:
            log.exception(
                "certification registry failed; refusing failover %s -> %s",
                primary.name,
                fallback.name,
            )
            return False

    def may_send(self, job: JobRecord, attempt: AttemptRecord, contract: ContractSpec) -> bool:
        """Say whether ``attempt`` may still be sent: its provider is the job's primary, or a
        fallback certified for it now (a certificate may expire while the attempt waits)."""
        if attempt.provider == job.provider:
            return True
        primary = self.provider_configs.get(job.provider)
        fallback = self.provider_configs.get(attempt.provider)
        return (
            primary is not None
            and fallback is not None
            and self.allows(contract, primary, fallback)
        )

    def next_provider(self, job: JobRecord, failed: AttemptRecord) -> str | None:
        """Pick where a failover goes: the first effective fallback not tried yet, if allowed.

        None when ``max_attempts`` is reached, when another attempt of the job is still in
        play (R4: a hedge may be running), or when every certified fallback was tried.
        """
        route = self.settings.route_for(job.contract)
        if route is None or len(job.attempts) >= route.max_attempts:
            return None
        if any(not a.state.terminal for a in job.attempts if a.id != failed.id):
            return None
        tried = {a.provider for a in job.attempts}
        for name in self.effective_fallbacks(job.contract, job.provider):
            if name not in tried:
                return name
        return None

    def hedge_target(
        self, job: JobRecord, attempt: AttemptRecord, contract: ContractSpec
    ) -> str | None:
        """Return the provider a hedge of ``attempt`` would race on, if hedging applies."""
        route = self.settings.route_for(job.contract)
        if (
            route is None
            or route.hedge_after_s is None
            or route.max_attempts < 2
            or not contract.hedgeable
            or attempt.reason is not AttemptReason.INITIAL
        ):
            return None
        fallbacks = self.effective_fallbacks(job.contract, job.provider)
        return fallbacks[0] if fallbacks else None
