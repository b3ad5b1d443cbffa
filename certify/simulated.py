"""The simulated providers ``onejob certify --sim`` certifies, and the simulator they run on.

Each is one profile of the bundled simulator behind its own base URL
(``/p/<name>``), so a run certifies the faithful ones and catches the misbehaving ones
(drifting, sloppy, another language or model, replayed answers, answers learnt from the
catalog) without a real API; ``no-usage`` is faithful but reports no token usage. They
are priced at ``SIM_PRICE_PER_MTOK`` so reports show a cost; in replay mode
``simulator_client`` answers the variants, which cassettes do not hold.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx

from certify.usage import SIM_PRICE_PER_MTOK, Price
from contracts.loader import load_catalog
from providers.config import ProviderConfig
from providers.registry import plugin_for

SIM_CONTEXT_WINDOW = 16_384  # tokens: small on purpose, so the long cases sit near the limit
#: ``--sim`` providers: name -> (protocol, model, simulator profile).
SIM_PROVIDERS: dict[str, tuple[str, str, str]] = {
    "faithful": ("openai", "sim-gpt", "faithful"),
    "faithful-claude": ("anthropic", "sim-claude", "faithful"),
    "drifting": ("openai", "sim-gpt", "drifting"),
    "sloppy": ("openai", "sim-gpt", "sloppy"),
    "no-system": ("openai", "sim-gpt", "no-system"),
    "wrong-language": ("openai", "sim-gpt", "wrong-language"),
    "wrong-language-claude": ("anthropic", "sim-claude", "wrong-language"),
    "other-model": ("openai", "sim-gpt", "other-model"),
    "other-model-claude": ("anthropic", "sim-claude", "other-model"),
    "replaying": ("openai", "sim-gpt", "replaying"),
    "replaying-claude": ("anthropic", "sim-claude", "replaying"),
    "catalog-only": ("openai", "sim-gpt", "catalog-only"),
    "catalog-only-claude": ("anthropic", "sim-claude", "catalog-only"),
    # A local OpenAI-compatible server whose answers carry no usage: its tokens are counted
    # offline and marked estimated (``certify.estimated``).
    "no-usage": ("openai-compatible", "sim-llama", "no-usage"),
}
SIM_PRIMARY = "faithful"
REPLAY_BASE_URL = "http://replay.invalid"


def sim_providers(base_url: str = REPLAY_BASE_URL) -> dict[str, ProviderConfig]:
    """Return the ``--sim`` provider configurations against a simulator at ``base_url``."""
    out = {}
    for name, (protocol, model, _) in SIM_PROVIDERS.items():
        root = f"{base_url}/p/{name}"
        out[name] = ProviderConfig(
            name=name,
            protocol=protocol,
            base_url=f"{root}{plugin_for(protocol).base_path}",
            model=model,
            timeout=10.0,
            context_window=SIM_CONTEXT_WINDOW,
        )
    return out


def sim_prices() -> dict[str, Price]:
    """Return the price of every ``--sim`` provider."""
    return {name: Price(*SIM_PRICE_PER_MTOK) for name in SIM_PROVIDERS}


def sim_profiles() -> dict[str, str]:
    """Return the simulator profile of every ``--sim`` provider."""
    return {name: profile for name, (_, _, profile) in SIM_PROVIDERS.items()}


def sim_origin(provider: ProviderConfig) -> str:
    """Say where a ``--sim`` provider's recorded answers came from (kept in cassettes)."""
    profile = sim_profiles().get(provider.name, "faithful")
    return f"onejob provider simulator (in-process), profile {profile!r}, {provider.protocol} wire"


def sim_pairs() -> list[tuple[str, str]]:
    """Return the ``--sim`` primary -> fallback pairs compared for agreement."""
    return [(SIM_PRIMARY, name) for name in SIM_PROVIDERS if name != SIM_PRIMARY]


@contextlib.asynccontextmanager
async def in_process_simulator(enabled: bool) -> AsyncIterator[str | None]:
    """Run the simulator with every ``--sim`` profile for the block; yield its base URL."""
    if not enabled:
        yield None
        return
    from providers.simulator import run_simulator

    async with run_simulator(port=0, profiles=sim_profiles(), catalog=load_catalog) as sim:
        yield sim.base_url


def simulator_client() -> httpx.AsyncClient:
    """Return a client an in-process simulator answers over ASGI: no socket, offline.

    Replay mode's variants go here (cassettes hold the catalog's cases only).
    """
    from providers.simulator import create_sim_app

    app = create_sim_app(profiles=sim_profiles(), catalog=load_catalog)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
