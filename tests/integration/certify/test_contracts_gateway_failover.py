"""End to end: a real certification run decides which failovers a real gateway takes.

``certify --sim`` issues the certificates; a gateway on loopback with the dispatcher routes
ticket-triage@1 to ``faithful`` with four configured fallbacks. When the primary fails
definitely, the job fails over to ``faithful-claude`` (certified) and never calls
``drifting``, ``sloppy`` or ``no-system``; the fallback button refuses them with 422.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "dispatch"))  # the dispatcher's harness

from dispatch_harness import Api, run_gateway

from certify.simulated import sim_providers
from cli.certify import certify
from contracts.loader import load_catalog
from contracts.loader import load_catalog as contract_catalog
from gateway.settings import DatabaseConfig, Settings, ShortcutsConfig
from gateway.store import open_store
from providers.simulator import Behaviour, BehaviourKind, run_simulator

from .conftest import parse

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::litestar.exceptions.LitestarDeprecationWarning"),
]
CONTRACT = "ticket-triage@1"
MISBEHAVING = ("drifting", "sloppy", "no-system")


async def test_gateway_fails_over_only_to_the_fallback_that_certified(
    tmp_path: Path, database_url: str
) -> None:
    registry = tmp_path / "certs.json"
    args = parse(
        "certify", "--sim", "--repeats", "1", "--contract", CONTRACT,
        "--registry", str(registry), "--report-dir", str(tmp_path / "out"),
    )  # fmt: skip
    assert await certify(args, io.StringIO()) == 1  # the misbehaving three fail

    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        _, key = await store.create_api_key("alice", frozenset({"jobs"}))
        _, admin = await store.create_api_key("ops", frozenset({"jobs", "admin"}))
    finally:
        await store.close()

    async with run_simulator(port=0, catalog=contract_catalog) as sim:
        providers = {n: p.model_dump() for n, p in sim_providers(sim.base_url).items()}
        settings = Settings.model_validate(
            {
                "database_url": database_url,
                "certifications_path": str(registry),
                "providers": providers,
                "routes": {
                    CONTRACT: {
                        "primary": "faithful",
                        "fallbacks": [*MISBEHAVING, "faithful-claude"],
                        "max_attempts": 5,
                    }
                },
                "dispatcher": {"runners": 2, "poll_interval": 0.2, "reap_interval": 0.2},
            }
        )
        sim.app.script.queue("faithful", [Behaviour(BehaviourKind.STATUS, code=500)])
        async with run_gateway(settings) as gw:
            api = Api(gw, key, admin)
            ticket = load_catalog()[CONTRACT].case("double-charge-march").input
            created = await api.create(ticket, wait=15, contract=CONTRACT)
            assert created.status_code == 201, created.text
            job = await api.until(created.json()["id"], lambda j: j["status"] == "succeeded")
            # A second job fails on both certified providers; the fallback button then
            # refuses the uncertified ones and accepts the certified one.
            sim.app.script.queue("faithful", [Behaviour(BehaviourKind.STATUS, code=500)])
            sim.app.script.queue("faithful-claude", [Behaviour(BehaviourKind.STATUS, code=500)])
            other = load_catalog()[CONTRACT].case("office-in-lisbon").input
            second = (await api.create(other, wait=15, contract=CONTRACT)).json()
            second = await api.until(second["id"], lambda j: j["status"] == "failed")
            refused = {
                name: await gw.client.post(
                    f"/v1/jobs/{second['id']}/attempts", json={"provider": name}, headers=api.auth
                )
                for name in MISBEHAVING
            }
            accepted = await gw.client.post(
                f"/v1/jobs/{second['id']}/attempts",
                json={"provider": "faithful-claude"},
                headers=api.auth,
            )
            matrix = (await gw.client.get("/v1/certifications", headers=api.auth)).json()

        assert [(a["provider"], a["state"]) for a in job["attempts"]] == [
            ("faithful", "failed"),
            ("faithful-claude", "succeeded"),
        ]
        assert job["result"]["category"] == "billing"
        for name in MISBEHAVING:
            assert sim.calls(name) == [], name
        assert [a["provider"] for a in second["attempts"]] == ["faithful", "faithful-claude"]
        for name, r in refused.items():
            assert r.status_code == 422, (name, r.text)
            assert r.json()["type"] == "urn:onejob:fallback-not-certified"
        assert accepted.status_code == 202, accepted.text
        rows = {r["fallback"]: r for r in matrix["certifications"] if r["contract"] == CONTRACT}
        assert rows["faithful-claude"]["allowed"] is True
        assert {n: rows[n]["allowed"] for n in MISBEHAVING} == dict.fromkeys(MISBEHAVING, False)
