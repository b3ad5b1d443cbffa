"""Every catalog case against the simulated providers, as one pytest test each.

Run on its own (the default ``pytest`` run leaves this folder out, see pyproject.toml):
``pytest tests/contract_suite --onejob-mode replay -n auto``. Replay mode (the default)
serves the committed cassettes, offline; live and record modes start an in-process
simulator. A failing test names the broken layer and its reason.
"""

from __future__ import annotations

import pytest

from certify.checks import CASE_LAYERS
from certify.results import Mode
from certify.runner import Runner
from certify.simulated import sim_providers
from contracts.loader import load_catalog
from providers.simulator import run_simulator

CATALOG = load_catalog()
CASES = [(name, case.id) for name in CATALOG for case in CATALOG[name].cases]
#: The simulated providers whose cassettes are committed (both faithful profile).
RECORDED = ("faithful", "faithful-claude")


@pytest.mark.parametrize("provider_name", RECORDED)
@pytest.mark.parametrize(("contract_name", "case_id"), CASES, ids=[f"{c}:{k}" for c, k in CASES])
async def test_case_passes_every_layer(
    provider_name: str, contract_name: str, case_id: str, onejob_mode: Mode, onejob_repeats: int
) -> None:
    """Run one case k times; every layer must pass."""
    contract = CATALOG[contract_name]
    case = contract.case(case_id)
    runner = Runner(onejob_mode, repeats=onejob_repeats)
    if onejob_mode is Mode.REPLAY:
        provider = sim_providers()[provider_name]
        async with runner.client_for([provider]) as client:
            result = await runner.run_case(client, contract, case, provider)
    else:
        async with run_simulator(port=0, catalog=CATALOG) as sim:
            provider = sim_providers(sim.base_url)[provider_name]
            async with runner.client_for([provider]) as client:
                result = await runner.run_case(client, contract, case, provider)
    if result.error:
        pytest.fail(f"harness error: {result.error}", pytrace=False)
    broken = [
        f"{layer.value}: {result.checks[layer].reason} | {result.checks[layer].excerpt}"
        for layer in CASE_LAYERS
        if not result.checks[layer].passed
    ]
    assert not broken, "\n".join(broken)
