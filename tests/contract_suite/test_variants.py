"""Variants of the catalog's cases, drawn fresh each session, against the faithful providers.

Cassettes hold the catalog's own cases only: variants are new inputs by design, so in
every mode (replay included) the in-process simulator answers them live, offline, over an
ASGI transport. The session's seed is in the header (``onejob variants seed: ...``); give
it back with ``--onejob-seed`` to draw the same variants again. One test per contract,
recorded provider and slot of the contract's ``[variants] per_run``.
"""

from __future__ import annotations

import functools

import httpx
import pytest

from certify.checks import CASE_LAYERS
from certify.results import Mode
from certify.runner import Runner
from certify.simulated import sim_providers
from contracts.loader import load_catalog
from contracts.variants import Variant, draw_variants
from providers.simulator import create_sim_app

CATALOG = load_catalog()
SLOTS = [(name, i) for name in CATALOG for i in range(CATALOG[name].variants_per_run)]
RECORDED = ("faithful", "faithful-claude")
SIM_URL = "http://simulator.invalid"


@functools.cache
def drawn(contract_name: str, seed: str) -> tuple[Variant, ...]:
    """Return the session's variants of one contract (drawn once per worker)."""
    contract = CATALOG[contract_name]
    return draw_variants(contract, seed, contract.variants_per_run)


@pytest.mark.parametrize("provider_name", RECORDED)
@pytest.mark.parametrize(("contract_name", "slot"), SLOTS, ids=[f"{c}:v{i + 1}" for c, i in SLOTS])
async def test_variant_passes_every_layer(
    provider_name: str,
    contract_name: str,
    slot: int,
    onejob_mode: Mode,
    onejob_repeats: int,
    onejob_seed: str,
) -> None:
    """Draw the session's variant in this slot and run it k times; every layer must pass."""
    contract = CATALOG[contract_name]
    variant = drawn(contract_name, onejob_seed)[slot]
    provider = sim_providers(SIM_URL)[provider_name]
    # Live against the simulator whatever the mode: no cassette holds a variant.
    runner = Runner(Mode.LIVE, repeats=onejob_repeats, seed=onejob_seed)
    transport = httpx.ASGITransport(app=create_sim_app(catalog=CATALOG))
    async with httpx.AsyncClient(transport=transport) as client:
        result = await runner.run_case(client, contract, variant, provider)
    broken = [
        f"{layer.value}: {result.checks[layer].reason} | {result.checks[layer].excerpt}"
        for layer in CASE_LAYERS
        if not result.checks[layer].passed
    ]
    where = f"variant {variant.id} ({variant.variation} of {variant.origin}), seed {onejob_seed}"
    assert not broken, where + "\n" + "\n".join(broken)
