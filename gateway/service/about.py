"""What the gateway tells about itself: its contracts and their routes, the failover matrix
the certification registry allows (``GET /v1/certifications``), and its metrics."""

from __future__ import annotations

from typing import Any

from gateway.service.base import ServiceBase

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
        rows: list[dict[str, Any]] = []
        for name in sorted(self.catalog):
            route = self.settings.route_for(name)
            if route is None:
                continue
            primary = self.settings.providers.get(route.primary)
            for fallback_name in route.fallbacks:
                fallback = self.settings.providers.get(fallback_name)
                detail = ""
                if primary is None or fallback is None:
                    allowed, reason = False, "provider not configured"
                else:
                    verdict = self.certifications.can_failover(
                        self.catalog[name], primary, fallback
                    )
                    allowed, reason = verdict.allowed, str(verdict.reason)
                    detail = str(getattr(verdict, "detail", ""))
                rows.append(
                    {
                        "contract": name,
                        "primary": route.primary,
                        "fallback": fallback_name,
                        "allowed": allowed,
                        "reason": reason,
                        "detail": detail,
                        "fingerprint": getattr(self.catalog[name], "fingerprint", None),
                        "primary_certificate": self._certificate(name, route.primary),
                        "fallback_certificate": self._certificate(name, fallback_name),
                    }
                )
        return rows

    def _certificate(self, contract: str, provider: str) -> dict[str, Any] | None:
        """Summarize the newest certificate behind a verdict (when the policy keeps them)."""
        lookup = getattr(self.certifications, "latest_certificate", None)
        entry = lookup(contract, provider) if lookup is not None else None
        if entry is None:
            return None
        return {field: entry.get(field) for field in CERTIFICATE_FIELDS}

    async def render_metrics(self) -> tuple[bytes, str]:
        """Refresh the database-derived gauges and return the Prometheus exposition."""
        await self.metrics.refresh(self.store)
        return self.metrics.render()
