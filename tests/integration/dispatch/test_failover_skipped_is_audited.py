"""A configured fallback passed over because it is not certified leaves an audit event on
the job, with the registry's reason: the job says why it failed without a failover."""

from __future__ import annotations

from pathlib import Path

import pytest
from dispatch_harness import Api, SimControl, case_input, certify, run_gateway, sim_settings

from providers.simulator.server import RunningSimulator

pytestmark = [pytest.mark.slow]


async def test_a_failure_with_an_uncertified_fallback_records_why_it_was_skipped(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path)
    certify(cert_path, [settings.providers["sim-openai"]])  # the fallback holds none
    await sim_control.script("sim-openai", {"kind": "status", "code": 500})
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        job = (await api.create(case_input(0), wait=10)).json()
        events = (await gw.client.get(f"/v1/jobs/{job['id']}/events", headers=api.auth)).json()

    assert job["status"] == "failed", job
    [attempt] = job["attempts"]
    kinds = [e["kind"] for e in events["events"]]
    [skipped] = [e for e in events["events"] if e["kind"] == "failover_skipped"]
    assert kinds.index("attempt_failed") < kinds.index("failover_skipped")
    assert skipped["attempt_id"] == attempt["id"]
    assert skipped["detail"]["fallback"] == "sim-anthropic"
    assert skipped["detail"]["primary"] == "sim-openai"
    assert "sim-anthropic" in skipped["detail"]["reason"], skipped
    assert await sim_control.calls("sim-anthropic") == []


async def test_a_failover_to_a_certified_fallback_records_no_skip(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path)
    certify(cert_path, list(settings.providers.values()))
    await sim_control.script("sim-openai", {"kind": "status", "code": 500})
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        job = (await api.create(case_input(0), wait=10)).json()
        events = (await gw.client.get(f"/v1/jobs/{job['id']}/events", headers=api.auth)).json()

    assert job["status"] == "succeeded", job
    assert "failover_skipped" not in [e["kind"] for e in events["events"]]
