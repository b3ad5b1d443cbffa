"""What the gateway tells about itself: its contracts and their routes, the failover matrix
the certification registry allows (``GET /v1/certifications``), and its metrics.

Each matrix row carries, beside the verdict (issue 38): when the pair's first certificate
expires (``expires_at``, ``days_to_expiry``, ``recertify_due`` within ``[certification]
within_days``), the suspension the shadow checks recorded (``suspended``: null, or since,
reason, disagreement_rate, checks, disagreements, threshold, min_samples, fields,
fallback_run_id, by) and, from the database, the shadow checks since the fallback's
certificate (``shadow``: null when off, or checks, disagreements, errors,
disagreement_rate, since, sample_rate, threshold, min_samples).

And what the pair costs (issue 38, "latency and cost are part of the contract"): the
contract's ``budget`` (its declared limits, null when it declares none) and, on each
certificate, ``usage`` (calls, p50 and p95 latency in milliseconds, output tokens and cost
per case, and ``over_budget``: the limits of the contract's current budget those figures
exceed; null for a certificate recorded without usage) and ``budget_verdict`` (whether
the certificate passed the budget it was judged against, and why not; null when none was
recorded).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from contracts.budget import Budget, usage_figures
from contracts.registry_file import days_to_expiry
from contracts.suspensions import public as public_suspension
from gateway.domain.shadow import HOUR
from gateway.service.base import ServiceBase
from gateway.shadow import certified_since

#: What ``GET /v1/certifications`` shows of each certificate behind a verdict.
CERTIFICATE_FIELDS = (
    "verdict",
    "mode",
    "model",
    "adapter_version",
    "contract_fingerprint",
    "certified_at",
    "expires_at",
    "repeats",
    "cases",
    "pass_rates",
    "failures",
    "run_id",
    "production",
)


class About(ServiceBase):
    """Describe the contracts, the failovers they may take, and the metrics."""

    def contracts(self) -> list[dict[str, Any]]:
        """Describe the contracts a client may name, with their routes."""
        out: list[dict[str, Any]] = []
        for name in sorted(self.catalog):
            contract = self.catalog[name]
            route = self.settings.route_for(name)
            out.append(
                {
                    "name": name,
                    "description": contract.description,
                    "hedgeable": contract.hedgeable,
                    "input_schema": contract.input_schema,
                    "output_schema": contract.output_schema,
                    "route": None
                    if route is None
                    else {"primary": route.primary, "fallbacks": list(route.fallbacks)},
                }
            )
        return out

    def certifications_matrix(self) -> list[dict[str, Any]]:
        """Return the effective failover matrix: one row per contract and configured fallback."""
        now = dt.datetime.now(dt.UTC)
        rows: list[dict[str, Any]] = []
        for name, primary_name, fallback_name in self._pairs():
            primary = self.settings.providers.get(primary_name)
            fallback = self.settings.providers.get(fallback_name)
            detail = ""
            if primary is None or fallback is None:
                allowed, reason = False, "provider not configured"
            else:
                verdict = self.certifications.can_failover(self.catalog[name], primary, fallback)
                allowed, reason = verdict.allowed, str(verdict.reason)
                detail = str(getattr(verdict, "detail", ""))
            budget = getattr(self.catalog[name], "budget", None) or Budget()
            certs = [
                self._certificate(name, primary_name, now, budget),
                self._certificate(name, fallback_name, now, budget),
            ]
            expiring = [c for c in certs if c is not None and c.get("expires_at")]
            first = (
                min(expiring, key=lambda c: str(c["expires_at"])) if len(expiring) == 2 else None
            )
            days = first["days_to_expiry"] if first is not None else None
            rows.append(
                {
                    "contract": name,
                    "primary": primary_name,
                    "fallback": fallback_name,
                    "allowed": allowed,
                    "reason": reason,
                    "detail": detail,
                    "fingerprint": getattr(self.catalog[name], "fingerprint", None),
                    "budget": budget.as_dict() if budget.declared else None,
                    "primary_certificate": certs[0],
                    "fallback_certificate": certs[1],
                    "expires_at": first["expires_at"] if first is not None else None,
                    "days_to_expiry": days,
                    "recertify_due": days is not None
                    and days <= self.settings.certification.within_days,
                    "suspended": self._suspension(name, primary_name, fallback_name),
                }
            )
        return rows

    async def certifications_view(self) -> list[dict[str, Any]]:
        """Return the matrix with each pair's shadow checks read from the database."""
        rows = self.certifications_matrix()
        for row in rows:
            row["shadow"] = await self._shadow(row["contract"], row["primary"], row["fallback"])
        return rows

    def _pairs(self) -> list[tuple[str, str, str]]:
        """Return (contract, primary, fallback) for every contract's configured fallbacks."""
        pairs: list[tuple[str, str, str]] = []
        for name in sorted(self.catalog):
            route = self.settings.route_for(name)
            if route is not None:
                pairs += [(name, route.primary, fallback) for fallback in route.fallbacks]
        return pairs

    def _certificate(
        self,
        contract: str,
        provider: str,
        now: dt.datetime | None = None,
        budget: Budget | None = None,
    ) -> dict[str, Any] | None:
        """Summarize the newest certificate behind a verdict (when the policy keeps them),
        with its usage judged against the contract's current ``budget``."""
        entry = self._latest_certificate(contract, provider)
        if entry is None:
            return None
        out = {field: entry.get(field) for field in CERTIFICATE_FIELDS}
        out["days_to_expiry"] = days_to_expiry(entry, now or dt.datetime.now(dt.UTC))
        usage = usage_figures(entry.get("usage"))
        if usage is not None:
            usage["over_budget"] = (budget or Budget()).over(usage)
        out["usage"] = usage
        out["budget_verdict"] = _budget_verdict(entry.get("budget"))
        return out

    def _latest_certificate(self, contract: str, provider: str) -> dict[str, Any] | None:
        """The newest certificate behind a verdict, when the policy keeps them."""
        if self.suspensions is None:
            return None
        return self.suspensions.latest_certificate(contract, provider)

    def _suspension(self, contract: str, primary: str, fallback: str) -> dict[str, Any] | None:
        if self.suspensions is None:
            return None
        return public_suspension(self.suspensions.suspension(contract, primary, fallback))

    async def _shadow(self, contract: str, primary: str, fallback: str) -> dict[str, Any] | None:
        """Tally the pair's shadow checks since the fallback's certificate (None: off)."""
        config = self.settings.shadow
        registry, shadows = self.suspensions, self.shadows
        if (
            config.sample_rate <= 0
            or shadows is None
            or registry is None
            or not getattr(self.catalog.get(contract), "hedgeable", False)
        ):
            return None
        since = certified_since(registry, contract, fallback)
        tally = await shadows.shadow_tally(
            contract, primary, fallback, since=since, window=config.window
        )
        return {
            "checks": tally.checks,
            "disagreements": tally.disagreements,
            "errors": tally.errors,
            "disagreement_rate": tally.rate,
            "fields": tally.fields,
            "since": since.isoformat().replace("+00:00", "Z"),
            "sample_rate": config.sample_rate,
            "threshold": config.threshold,
            "min_samples": config.min_samples,
        }

    def providers_view(self) -> list[dict[str, Any]]:
        """Each configured provider and its capacity as this process sees it (issue 43):
        its circuit, a pause it asked for, the pace this process keeps to (its slice of a
        known limit), calls in flight here, and the queue's attempts for it (every
        process's, as last counted)."""
        queue = self.admission.by_provider
        out = []
        for state in self.capacity.states():
            cfg = self.settings.providers[state.provider]
            out.append(
                {
                    "name": state.provider,
                    "protocol": cfg.protocol,
                    "model": cfg.model,
                    "circuit": state.circuit,
                    "circuit_until": _iso(state.circuit_until),
                    "paused_until": _iso(state.paused_until),
                    "pause_reason": state.pause_reason,
                    "pace_requests_per_minute": state.requests_per_minute,
                    "pace_tokens_per_minute": state.tokens_per_minute,
                    "share": state.share,
                    "in_flight": state.in_flight,
                    "consecutive_failures": state.consecutive_failures,
                    "queued": queue.get(state.provider, {}).get("starting", 0),
                    "waiting": queue.get(state.provider, {}).get("waiting", 0),
                }
            )
        return out

    def circuits(self) -> dict[str, dict[str, Any]]:
        """Each provider's circuit and pause, for ``/readyz`` (a detail: not readiness)."""
        return {
            state.provider: {
                "circuit": state.circuit,
                "paused_until": _iso(state.paused_until),
            }
            for state in self.capacity.states()
        }

    async def render_metrics(self) -> tuple[bytes, str]:
        """Refresh the database-derived gauges and return the Prometheus exposition."""
        await self.metrics.refresh(self.store)
        await self.refresh_certification_gauges()
        self.metrics.capacity.show(self.capacity.states())
        return self.metrics.render()

    async def refresh_certification_gauges(self) -> None:
        """Set days to expiry, suspensions, disagreement rates and the shadow call count."""
        gauges = self.metrics.certification
        now = dt.datetime.now(dt.UTC)
        seen: set[tuple[str, str]] = set()
        for contract, primary, fallback in self._pairs():
            for provider in (primary, fallback):
                if (contract, provider) in seen:
                    continue
                seen.add((contract, provider))
                entry = self._latest_certificate(contract, provider)
                days = days_to_expiry(entry, now) if entry is not None else None
                if days is not None:
                    gauges.days_to_expiry.labels(contract, provider).set(days)
            suspended = self._suspension(contract, primary, fallback) is not None
            gauges.suspended.labels(contract, primary, fallback).set(1 if suspended else 0)
            shadow = await self._shadow(contract, primary, fallback)
            if shadow is not None:
                gauges.judged.labels(contract, primary, fallback).set(shadow["checks"])
                if shadow["disagreement_rate"] is not None:
                    rate = shadow["disagreement_rate"]
                    gauges.disagreement_rate.labels(contract, primary, fallback).set(rate)
        shadow_on = self.settings.shadow.sample_rate > 0
        gauges.shadow_calls_limit.set(self.settings.shadow.calls_per_hour if shadow_on else 0)
        if shadow_on and self.shadows is not None:
            since = now - dt.timedelta(seconds=HOUR)
            gauges.shadow_calls_last_hour.set(await self.shadows.shadow_calls_since(since))


def _budget_verdict(recorded: Any) -> dict[str, Any] | None:
    """Return ``{passed, reason}`` of the budget check a certificate recorded, or None."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("passed"), bool):
        return None
    return {"passed": recorded["passed"], "reason": str(recorded.get("reason") or "")}


def _iso(value: dt.datetime | None) -> str | None:
    return (
        None if value is None else value.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )
