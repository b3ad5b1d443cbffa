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

    async def reset(self) -> None:
        """Forget every call, script and profile override."""
        await self._send("POST", "/_sim/reset")

    async def _send(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        response = await self.client.request(method, f"{self.base_url}{path}", **options)
        if response.status_code >= 300:
            raise SimulatorControlError(
                f"{method} {path} answered {response.status_code}: {response.text[:300]}"
            )
        body: dict[str, Any] = response.json()
        return body
