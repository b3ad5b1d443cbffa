"""Simulator-over-real-sockets fixtures: a fake two-contract catalog and a running simulator."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import pytest_asyncio

from providers.base import ProviderRequest
from providers.config import ProviderConfig
from providers.factory import build_provider
from providers.simulator import RunningSimulator, run_simulator

PROTOCOLS = ("openai", "anthropic", "gemini", "openai-compatible")

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "category": {"type": "string", "enum": ["billing", "shipping", "other"]},
        "total": {"type": "integer"},
    },
    "required": ["category", "total"],
    "additionalProperties": False,
}


class FakeTriage:
    """Keyword rules: 'refund'/'charge' is billing, 'parcel' is shipping; total = sum(items)."""

    def simulate(self, input: Any) -> dict[str, Any]:
        text = input["text"].lower()
        category = (
            "billing"
            if ("refund" in text or "charge" in text)
            else "shipping"
            if "parcel" in text
            else "other"
        )
        return {"category": category, "total": sum(input.get("items", []))}

    def simulate_sloppy(self, input: Any) -> dict[str, Any]:
        right = self.simulate(input)
        wrong = "other" if right["category"] != "other" else "billing"
        return {"category": wrong, "total": right["total"] + 1}


CATALOG = {"fake-triage@1": FakeTriage()}


@dataclasses.dataclass
class Sim:
    """A running simulator plus helpers to call it through the real adapters."""

    running: RunningSimulator
    client: httpx.AsyncClient

    @property
    def base_url(self) -> str:
        return self.running.base_url

    def config(self, provider: str, protocol: str, **fields: Any) -> ProviderConfig:
        return ProviderConfig(
            name=provider,
            protocol=protocol,
            base_url=self.running.provider_url(provider, protocol),
            model="sim-model",
            connect_timeout=1.0,
            **fields,
        )

    async def call(
        self, provider: str, protocol: str, request: ProviderRequest, **fields: Any
    ) -> Any:
        adapter = build_provider(self.config(provider, protocol, **fields), self.client)
        return await adapter.call(request)

    async def script(self, *behaviours: dict[str, Any], provider: str | None = None) -> None:
        payload = {"provider": provider, "behaviours": list(behaviours)}
        response = await self.client.post(f"{self.base_url}/_sim/script", json=payload)
        assert response.status_code == 200, response.text

    async def calls(self, provider: str | None = None) -> list[dict[str, Any]]:
        params = {"provider": provider} if provider else {}
        response = await self.client.get(f"{self.base_url}/_sim/calls", params=params)
        assert response.status_code == 200
        calls: list[dict[str, Any]] = response.json()["calls"]
        return calls


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def module_sim() -> AsyncIterator[Sim]:
    async with run_simulator(catalog=CATALOG) as running, httpx.AsyncClient() as client:
        yield Sim(running, client)


@pytest_asyncio.fixture(loop_scope="module")
async def sim(module_sim: Sim) -> AsyncIterator[Sim]:
    """One simulator per module (starting one costs ~0.2 s), reset before every test."""
    response = await module_sim.client.post(f"{module_sim.base_url}/_sim/reset")
    assert response.status_code == 200
    yield module_sim


@pytest.fixture
def make_request() -> Callable[..., ProviderRequest]:
    def make(
        text: str = "Please refund the double charge",
        items: tuple[int, ...] = (3, 4),
        contract: str = "fake-triage@1",
        **overrides: Any,
    ) -> ProviderRequest:
        import json

        block = json.dumps({"text": text, "items": list(items)})
        fields: dict[str, Any] = {
            "system": "Classify the ticket. Answer with the JSON object only.",
            "user": f'Ticket follows.\n<input contract="{contract}">\n{block}\n</input>',
            "output_schema": OUTPUT_SCHEMA,
            "schema_name": "fake_triage_v1",
            "model": "sim-model",
            "timeout": 5.0,
            "idempotency_key": "job_01/1",
        }
        fields.update(overrides)
        return ProviderRequest(**fields)

    return make
