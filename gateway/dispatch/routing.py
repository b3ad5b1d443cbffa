"""Where an attempt may go next: configured fallbacks the certification registry allows (R6).

One ``Routes`` object answers for the dispatcher (failover and hedging), and can answer for
the HTTP layer (``POST /v1/jobs/{id}/attempts``, ``GET /v1/certifications``) too, so every
part reads the same ``can_failover`` verdicts from the same registry file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gateway.dispatch.log_context import log
from gateway.domain.ports import Certifications, ContractSpec, JobStore
from gateway.domain.records import AttemptRecord, JobRecord
from gateway.domain.states import AttemptReason
from gateway.settings import Settings
from providers.config import ProviderConfig

#: What a fallback is refused with when the registry itself cannot answer.
REGISTRY_FAILED = "the certification registry could not answer (failover refused)"


@dataclasses.dataclass(frozen=True, slots=True)
class SkippedFallback:
    """A configured fallback a failover passed over, and the registry's reason."""

    provider: str
    reason: str


async def record_skipped(
    store: JobStore, job: JobRecord, attempt_id: str, skipped: Sequence[SkippedFallback]
) -> None:
    """Say on the job which configured fallbacks a failover passed over, and why: one
    ``failover_skipped`` event each, after the failure it follows was committed (the
    dispatcher's, an operator's resolution, the reconciler's). A lost audit line is only
    logged: the failure stands."""
    for fallback in skipped:
        detail = {"fallback": fallback.provider, "primary": job.provider, "reason": fallback.reason}
        try:
            await store.record_event(job.id, "failover_skipped", detail, attempt_id)
        except Exception:
            ids = {"job_id": job.id, "attempt_id": attempt_id}
            log.exception("skipped failover could not be recorded", extra=ids)


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
        return [name for name, refusal in self._verdicts(contract_name, primary) if not refusal]

    def _verdicts(self, contract_name: str, primary: str) -> list[tuple[str, str | None]]:
        """Return each configured fallback of the route with the registry's refusal (None:
        certified), in the route's order."""
        route = self.settings.route_for(contract_name)
        contract = self.catalog.get(contract_name)
        primary_cfg = self.provider_configs.get(primary)
        if route is None or contract is None or primary_cfg is None:
            return []
        # A job whose client named a non-default primary may still fall back on the route's.
        chain = route.fallbacks if primary == route.primary else (route.primary, *route.fallbacks)
        verdicts: list[tuple[str, str | None]] = []
        for name in chain:
            cfg = self.provider_configs.get(name)
            if name == primary or cfg is None or name in dict(verdicts):
                continue
            verdicts.append((name, self.refusal(contract, primary_cfg, cfg)))
        return verdicts

    def allows(
        self, contract: ContractSpec, primary: ProviderConfig, fallback: ProviderConfig
    ) -> bool:
        """Ask the registry; a registry that cannot answer refuses (fail closed)."""
        return self.refusal(contract, primary, fallback) is None

    def refusal(
        self, contract: ContractSpec, primary: ProviderConfig, fallback: ProviderConfig
    ) -> str | None:
        """Return why the registry refuses this failover, or None when it allows it."""
        try:
            verdict = self.certifications.can_failover(contract, primary, fallback)
        except Exception:
            log.exception(
                "certification registry failed; refusing failover %s -> %s",
                primary.name,
                fallback.name,
            )
            return REGISTRY_FAILED
        return None if verdict.allowed else (verdict.reason or "not certified")

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

    def failover(
        self, job: JobRecord, failed: AttemptRecord
    ) -> tuple[str | None, list[SkippedFallback]]:
        """Pick where a failover goes: the first effective fallback not tried yet, if
        allowed; and the untried fallbacks passed over before it because the registry
        refused them (each with its reason, for ``record_skipped``), in route order.

        None when ``max_attempts`` is reached, when another attempt of the job is still in
        play (R4: a hedge may be running), or when every certified fallback was tried.
        """
        route = self.settings.route_for(job.contract)
        if route is None or len(job.attempts) >= route.max_attempts:
            return None, []
        if any(not a.state.terminal for a in job.attempts if a.id != failed.id):
            return None, []
        tried = {a.provider for a in job.attempts}
        skipped: list[SkippedFallback] = []
        for name, refusal in self._verdicts(job.contract, job.provider):
            if name in tried:
                continue
            if refusal is None:
                return name, skipped
            skipped.append(SkippedFallback(name, refusal))
        return None, skipped

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
