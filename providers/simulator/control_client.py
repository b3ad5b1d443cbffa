"""The simulator's control API (``/_sim/*``) as a small async client, for scenarios and tests."""

from __future__ import annotations

from typing import Any

import httpx


class SimulatorControlError(Exception):
    """The simulator refused a control request; the message says which and why."""


class SimulatorControl:
    """Script, configure, inspect and reset one running simulator over HTTP.

    It takes the ``httpx.AsyncClient`` to send with (and never closes it): pass ``base_url``
    when the client has none, or leave it empty when the client's ``base_url`` is the simulator.
    """

    def __init__(self, client: httpx.AsyncClient, base_url: str = "") -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")

    async def script(
        self, provider: str | None, *behaviours: dict[str, Any], count: int = 1
    ) -> None:
        """Queue ``behaviours`` for the next ``count`` calls to ``provider`` (any when None)."""
        body: dict[str, Any] = {"behaviours": list(behaviours), "count": count}
        if provider is not None:
            body["provider"] = provider
        await self._send("POST", "/_sim/script", json=body)

    async def profiles(self, **profiles: str) -> dict[str, Any]:
        """Set the answer profile of each named provider; return every provider's profile."""
        return await self._send("POST", "/_sim/profiles", json=profiles)

    async def calls(self, provider: str | None = None) -> list[dict[str, Any]]:
        """Return the simulator's call log, oldest first (one provider's when named)."""
        params = {"provider": provider} if provider is not None else {}
        calls: list[dict[str, Any]] = (await self._send("GET", "/_sim/calls", params=params))[
            "calls"
        ]
        return calls

    async def limit(
        self, provider: str, requests_per_second: float | None, burst: int | None = None
    ) -> dict[str, Any]:
        """Give ``provider`` a token bucket (``burst`` requests, refilled at
        ``requests_per_second``; it starts full), or remove it when the rate is None; a
        call that finds no token is answered the API's 429. Return every provider's limit."""
        body: dict[str, Any] = {"provider": provider, "requests_per_second": requests_per_second}
        if burst is not None:
            body["burst"] = burst
        limits: dict[str, Any] = (await self._send("POST", "/_sim/limits", json=body))["limits"]
        return limits

    async def clear_limit(self, provider: str) -> None:
        """Remove ``provider``'s rate limit."""
        await self.limit(provider, None)

    async def limits(self) -> dict[str, Any]:
        """Return every provider's rate limit and where its bucket stands."""
        limits: dict[str, Any] = (await self._send("GET", "/_sim/limits"))["limits"]
        return limits

    async def outage(
        self,
        provider: str,
        seconds: float,
        code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Make every call to ``provider`` answer the API's overload (``code``: that status
        instead of its usual 503/529) for ``seconds`` from now; 0 ends an outage."""
        body = {"provider": provider, "seconds": seconds, "code": code, "retry_after": retry_after}
        await self._send("POST", "/_sim/outage", json=body)

    async def reset(self) -> None:
        """Forget every call, script, profile override, rate limit and outage."""
        await self._send("POST", "/_sim/reset")

    async def _send(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        response = await self.client.request(method, f"{self.base_url}{path}", **options)
        if response.status_code >= 300:
            raise SimulatorControlError(
                f"{method} {path} answered {response.status_code}: {response.text[:300]}"
            )
        body: dict[str, Any] = response.json()
        return body
