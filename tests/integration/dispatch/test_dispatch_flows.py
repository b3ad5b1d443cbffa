"""The dispatcher end to end: gateway and simulator on loopback, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from dispatch_harness import (
    CONTRACT,
    Api,
    SimControl,
    case_input,
    certify,
    run_gateway,
    sim_settings,
)

from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import open_store
from providers.simulator.server import RunningSimulator

pytestmark = [
    pytest.mark.slow,
]


def settled(job: dict[str, Any]) -> bool:
    return job["status"] in ("succeeded", "failed", "cancelled", "unknown")


async def test_job_succeeds_with_the_simulators_answer_in_one_waiting_request(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path)
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        r = await api.create(case_input(0), wait=10)
        scraped = await gw.client.get("/metrics")

    assert r.status_code == 201, r.text
    assert r.headers["Preference-Applied"] == "wait=10"
    job = r.json()
    assert job["status"] == "succeeded"
    assert job["result"]["category"] == "billing"
    [attempt] = job["attempts"]
    assert attempt["state"] == "succeeded" and attempt["provider"] == "sim-openai"
    assert job["completed_by"] == attempt["id"]
    calls = await sim_control.calls()
    assert [c["idempotency_key"] for c in calls] == [f"{job['id']}/1"]
    assert scraped.status_code == 200
    assert 'onejob_attempts_total{outcome="succeeded",provider="sim-openai"} 1.0' in scraped.text
    assert "onejob_jobs_created_total 1.0" in scraped.text
    assert 'onejob_attempt_seconds_count{provider="sim-openai"} 1.0' in scraped.text


async def test_hang_past_the_deadline_is_unknown_and_nothing_follows_until_resolved(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path, primary_timeout=1.0)
    certify(cert_path, list(settings.providers.values()))
    await sim_control.script("sim-openai", {"kind": "hang"})
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        r = await api.create(case_input(0), wait=10)
        job = r.json()
        assert job["status"] == "unknown", job
        [attempt] = job["attempts"]
        assert attempt["state"] == "unknown"
        assert attempt["error"]["outcome"] == "unknown"

        await asyncio.sleep(1.0)  # give a wrong dispatcher time to fail over on its own
        assert await sim_control.calls("sim-anthropic") == []
        blocked = await gw.client.post(
            f"/v1/jobs/{job['id']}/attempts",
            json={"provider": "sim-anthropic"},
            headers=api.auth,
        )
        assert blocked.status_code == 409, blocked.text
        assert blocked.json()["type"] == "urn:onejob:attempt-in-progress"

        resolved = await gw.client.post(
            f"/v1/admin/attempts/{attempt['id']}/resolve",
            json={"outcome": "failed", "note": "provider says it never ran"},
            headers=api.admin,
        )
        assert resolved.status_code == 200, resolved.text
        # A resolution to `failed` is a definite failure: the certified fallback takes over
        # in the same transaction, so the fallback button now finds an attempt in progress.
        resolved_job = resolved.json()["job"]
        assert [(a["provider"], a["reason"]) for a in resolved_job["attempts"]] == [
            ("sim-openai", "initial"),
            ("sim-anthropic", "failover"),
        ]
        manual = await gw.client.post(
            f"/v1/jobs/{job['id']}/attempts",
            json={"provider": "sim-anthropic"},
            headers=api.auth,
        )
        assert manual.status_code == 409, manual.text
        final = (await api.job(job["id"], wait=10)).json()

    assert final["status"] == "succeeded", final
    assert [a["state"] for a in final["attempts"]] == ["failed", "succeeded"]
    assert final["completed_by"] == final["attempts"][1]["id"]
    assert [c["idempotency_key"] for c in await sim_control.calls("sim-openai")] == [
        f"{job['id']}/1"
    ]
    assert [c["idempotency_key"] for c in await sim_control.calls("sim-anthropic")] == [
        f"{job['id']}/2"
    ]


async def test_hedge_on_a_fast_fallback_wins_and_the_slow_primary_loses_the_race(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path, route={"hedge_after_s": 1.0})
    certify(cert_path, list(settings.providers.values()))
    await sim_control.script("sim-openai", {"kind": "delay", "seconds": 3})
    await sim_control.script("sim-anthropic", {"kind": "delay", "seconds": 0.5})
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        began = time.monotonic()
        won = (await api.create(case_input(1), wait=10)).json()
        answered_after = time.monotonic() - began
        final = await api.until(
            won["id"], lambda j: j["attempts"][0]["state"] != "running", timeout=8.0
        )

    assert won["status"] == "succeeded", won
    assert answered_after >= 1.0  # the hedge started only after hedge_after_s
    primary, hedge = final["attempts"]
    assert (primary["provider"], primary["reason"]) == ("sim-openai", "initial")
    assert (hedge["provider"], hedge["reason"]) == ("sim-anthropic", "hedge")
    assert hedge["state"] == "succeeded" and primary["state"] == "lost"
    assert hedge["finished_at"] < primary["finished_at"]  # reverse order: the hedge first
    assert final["completed_by"] == hedge["id"]
    assert final["result"] == won["result"] and final["version"] == won["version"]
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        events = await store.events(won["id"])
    finally:
        await store.close()
    [race] = [e for e in events if e.kind == "race_lost"]
    assert race.attempt_id == primary["id"]
    body, _ = gw.metrics.render()
    assert b"onejob_races_lost_total 1.0" in body


async def test_definite_failure_with_an_uncertified_fallback_fails_without_calling_it(
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
        job = (await Api(gw, *keys).create(case_input(0), wait=10)).json()

    assert job["status"] == "failed", job
    [attempt] = job["attempts"]
    assert attempt["state"] == "failed" and attempt["error"]["status_code"] == 500
    assert await sim_control.calls("sim-anthropic") == []


async def test_definite_failure_fails_over_to_a_certified_fallback(
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
        job = (await Api(gw, *keys).create(case_input(0), wait=10)).json()

    assert job["status"] == "succeeded", job
    first, second = job["attempts"]
    assert first["state"] == "failed" and first["error"]["status_code"] == 500
    assert (second["provider"], second["reason"], second["state"]) == (
        "sim-anthropic",
        "failover",
        "succeeded",
    )
    assert [c["idempotency_key"] for c in await sim_control.calls("sim-anthropic")] == [
        f"{job['id']}/2"
    ]


async def test_an_answer_that_breaks_the_contract_is_a_failure_that_fails_over(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path)
    certify(cert_path, list(settings.providers.values()))
    await sim_control.profiles(**{"sim-openai": "drifting"})
    async with run_gateway(settings) as gw:
        job = (await Api(gw, *keys).create(case_input(0), wait=10)).json()

    assert job["status"] == "succeeded", job
    first, second = job["attempts"]
    assert first["state"] == "failed"
    assert first["error"]["reason"] == "contract_violation"
    assert any("unexpected top-level key" in e for e in first["error"]["errors"])
    assert second["provider"] == "sim-anthropic" and second["state"] == "succeeded"


async def test_failover_stops_at_max_attempts_and_the_job_fails(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path, route={"max_attempts": 1})
    certify(cert_path, list(settings.providers.values()))
    await sim_control.script("sim-openai", {"kind": "status", "code": 500})
    async with run_gateway(settings) as gw:
        job = (await Api(gw, *keys).create(case_input(0), wait=10)).json()

    assert job["status"] == "failed", job
    assert len(job["attempts"]) == 1
    assert await sim_control.calls("sim-anthropic") == []


@pytest.mark.parametrize(
    "behaviour",
    [{"kind": "status", "code": 502}, {"kind": "drop_after_headers"}, {"kind": "truncated"}],
    ids=["502", "drop-after-headers", "truncated"],
)
async def test_ambiguous_outcomes_make_attempt_and_job_unknown_without_failover(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
    behaviour: dict[str, Any],
) -> None:
    settings = sim_settings(sim, database_url, cert_path)
    certify(cert_path, list(settings.providers.values()))
    await sim_control.script("sim-openai", behaviour)
    async with run_gateway(settings) as gw:
        job = (await Api(gw, *keys).create(case_input(0), wait=10)).json()
        await asyncio.sleep(0.5)
        again = (await Api(gw, *keys).job(job["id"])).json()

    assert job["status"] == "unknown", job
    assert [a["state"] for a in again["attempts"]] == ["unknown"]
    assert await sim_control.calls("sim-anthropic") == []


async def test_a_certificate_written_while_serving_enables_failover_without_restart(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path)
    certify(cert_path, [settings.providers["sim-openai"]])
    await sim_control.script("sim-openai", {"kind": "status", "code": 500}, count=2)
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        before = (await api.create(case_input(0), wait=10)).json()
        matrix_before = (await gw.client.get("/v1/certifications", headers=api.auth)).json()
        certify(cert_path, [settings.providers["sim-anthropic"]])
        after = (await api.create(case_input(1), wait=10)).json()
        matrix_after = (await gw.client.get("/v1/certifications", headers=api.auth)).json()

    assert before["status"] == "failed" and len(before["attempts"]) == 1
    assert after["status"] == "succeeded", after
    assert [a["provider"] for a in after["attempts"]] == ["sim-openai", "sim-anthropic"]
    assert [c["idempotency_key"] for c in await sim_control.calls("sim-anthropic")] == [
        f"{after['id']}/2"
    ]
    allowed = {
        (r["contract"], r["fallback"]): r["allowed"] for r in matrix_before["certifications"]
    }
    assert allowed[(CONTRACT, "sim-anthropic")] is False
    allowed = {(r["contract"], r["fallback"]): r["allowed"] for r in matrix_after["certifications"]}
    assert allowed[(CONTRACT, "sim-anthropic")] is True


async def test_an_attempt_left_starting_is_claimed_by_the_next_dispatcher(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path)
    async with run_gateway(settings, background=[]) as gw:  # a gateway without a dispatcher
        queued = (await Api(gw, *keys).create(case_input(0))).json()
    assert queued["status"] == "queued"
    assert queued["attempts"][0]["state"] == "starting"

    async with run_gateway(settings) as gw:
        done = (await Api(gw, *keys).job(queued["id"], wait=10)).json()

    assert done["status"] == "succeeded", done
    assert [a["state"] for a in done["attempts"]] == ["succeeded"]
    assert [c["idempotency_key"] for c in await sim_control.calls()] == [f"{queued['id']}/1"]


async def test_an_answer_from_another_model_is_recorded_counted_and_audited(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path)
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        faithful = (await api.create(case_input(0), wait=10)).json()
        await sim_control.profiles(**{"sim-openai": "other-model"})
        downgraded = (await api.create(case_input(1), wait=10)).json()
        scraped = (await gw.client.get("/metrics")).text
        events = {
            job["id"]: [
                e
                for e in (
                    await gw.client.get(f"/v1/jobs/{job['id']}/events", headers=api.auth)
                ).json()["events"]
                if e["kind"] == "model_mismatch"
            ]
            for job in (faithful, downgraded)
        }
        admin = (
            await gw.client.get(
                "/v1/admin/attempts", params={"state": "succeeded"}, headers=api.admin
            )
        ).json()["attempts"]

    # The answer still decides the job (the contract checked it); the mismatch is visible.
    assert faithful["status"] == downgraded["status"] == "succeeded"
    models = {a["job_id"]: a["reported_model"] for a in admin}
    assert models[faithful["id"]] == "sim-gpt"
    assert models[downgraded["id"]] == "sim-gpt-mini"
    assert events[faithful["id"]] == []
    [mismatch] = events[downgraded["id"]]
    assert mismatch["detail"]["configured"] == "sim-gpt"
    assert mismatch["detail"]["reported"] == "sim-gpt-mini"
    assert 'onejob_provider_model_mismatches_total{provider="sim-openai"} 1.0' in scraped
