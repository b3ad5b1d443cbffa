from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from contracts.loader import load_catalog as contract_catalog
from providers.config import ProviderConfig
from providers.factory import build_provider
from providers.simulator import RunningSimulator, run_simulator

catalog_module = pytest.importorskip("contracts.loader")

PROTOCOLS = ("openai", "anthropic", "gemini", "openai-compatible")
CATALOG = catalog_module.load_catalog()
CASES = [(name, contract.cases[0]) for name, contract in CATALOG.items() if contract.cases]

on_module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def real_sim() -> AsyncIterator[tuple[RunningSimulator, httpx.AsyncClient]]:
    """A simulator that loads the shipped catalog itself (``catalog=None``)."""
    async with (
        run_simulator(catalog=contract_catalog) as running,
        httpx.AsyncClient(verify=ssl.create_default_context()) as client,
    ):
        yield running, client


async def _call(
    real_sim: tuple[RunningSimulator, httpx.AsyncClient],
    provider: str,
    protocol: str,
    contract_name: str,
    case: Any,
) -> Any:
    running, client = real_sim
    contract = CATALOG[contract_name]
    config = ProviderConfig(
        name=provider,
        protocol=protocol,  # type: ignore[arg-type]
        base_url=running.provider_url(provider, protocol),
        model="sim-model",
    )
    request = contract.provider_request(
        case.input, model="sim-model", timeout=5.0, idempotency_key=f"job_{case.id}/1"
    )
    return await build_provider(config, client).call(request)


def test_the_catalog_has_cases_to_simulate() -> None:
    assert CASES, "the shipped catalog should have at least one contract with cases"


@on_module_loop
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("contract_name", "case"), CASES, ids=[n for n, _ in CASES])
async def test_faithful_simulator_answers_every_catalog_contract_validly(
    real_sim: tuple[RunningSimulator, httpx.AsyncClient],
    protocol: str,
    contract_name: str,
    case: Any,
) -> None:
    contract = CATALOG[contract_name]
    result = await _call(real_sim, "faithful", protocol, contract_name, case)
    assert result.output == contract.simulate(case.input)
    assert contract.validate_output(result.output) == []
    assert contract.semantic_errors(case.input, result.output, case.expect) == []


@on_module_loop
@pytest.mark.parametrize(("contract_name", "case"), CASES, ids=[n for n, _ in CASES])
async def test_sloppy_simulator_is_schema_valid_but_caught_by_the_semantics(
    real_sim: tuple[RunningSimulator, httpx.AsyncClient], contract_name: str, case: Any
) -> None:
    contract = CATALOG[contract_name]
    result = await _call(real_sim, "sloppy", "openai", contract_name, case)
    assert contract.validate_output(result.output) == []
    assert contract.semantic_errors(case.input, result.output, case.expect) != []
