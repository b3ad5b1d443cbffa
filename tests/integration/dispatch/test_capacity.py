"""A provider that says "not now" (issue 43): the job waits, fails over, or expires.

Each test runs a gateway with its dispatcher against the simulator over loopback sockets,
on SQLite and PostgreSQL, and scripts what the primary answers.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from dispatch_harness import Api, SimControl, case_input, certify, run_gateway, sim_settings

from providers.simulator.server import RunningSimulator


def events_of(kind: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind]


async def job_events(api: Api, job_id: str) -> list[dict[str, Any]]:
    response = await api.gw.client.get(f"/v1/jobs/{job_id}/events", headers=api.auth)
    events: list[dict[str, Any]] = response.json()["events"]
    return events


async def test_a_429_that_names_its_time_waits_that_long_and_the_same_attempt_succeeds(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    """Before issue 43 this job ended ``failed`` (``status_429``) without a fallback."""
    settings = sim_settings(sim, database_url, cert_path)
    await sim_control.script("sim-openai", {"kind": "status", "code": 429, "retry_after": 1})
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        began = time.monotonic()
        created = (await api.create(case_input(0))).json()
        waiting = await api.until(created["id"], lambda j: j["waiting"] is not None, timeout=5)
        job = await api.until(created["id"], lambda j: j["status"] == "succeeded", timeout=10)
        took = time.monotonic() - began
        events = await job_events(api, created["id"])

    assert waiting["status"] == "queued"
    assert waiting["waiting"]["reason"] == "rate_limited"
    assert waiting["waiting"]["provider"] == "sim-openai" and waiting["waiting"]["until"]
    [attempt] = job["attempts"]  # one attempt: a wait is not a new attempt
    assert attempt["state"] == "succeeded" and attempt["waits"] == 1
    calls = await sim_control.calls("sim-openai")
    assert [c["idempotency_key"] for c in calls] == [f"{job['id']}/1"] * 2
    assert [c["status"] for c in calls] == [429, 200]
    assert calls[1]["received_at"] - calls[0]["received_at"] >= 0.95  # as asked, not sooner
    assert took < 5
    [waited] = events_of("attempt_waiting", events)
    assert waited["detail"]["retry_after_s"] == 1.0 and waited["detail"]["waits"] == 1
    assert not events_of("attempt_failed", events)


async def test_a_long_wait_with_a_certified_fallback_fails_over_at_once(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path)
    certify(cert_path, list(settings.providers.values()))
    await sim_control.script("sim-openai", {"kind": "status", "code": 429, "retry_after": 60})
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        began = time.monotonic()
        job = (await api.create(case_input(0), wait=10)).json()
        took = time.monotonic() - began
        # The primary asked everyone for 60 s: the next job does not even try it.
        second = (await api.create(case_input(1), wait=10)).json()

    assert job["status"] == "succeeded" and took < 5, (took, job)
    first, fallback = job["attempts"]
    assert first["state"] == "failed" and first["error"]["failover"] == "capacity"
    assert fallback["provider"] == "sim-anthropic" and fallback["state"] == "succeeded"
    assert second["status"] == "succeeded", second
    assert [a["provider"] for a in second["attempts"]] == ["sim-openai", "sim-anthropic"]
    assert second["attempts"][0]["error"]["sent"] is False
    assert len(await sim_control.calls("sim-openai")) == 1


async def test_a_short_wait_is_waited_for_even_with_a_certified_fallback(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path)
    certify(cert_path, list(settings.providers.values()))
    await sim_control.script("sim-openai", {"kind": "status", "code": 503, "retry_after": 1})
    async with run_gateway(settings) as gw:
        job = (await Api(gw, *keys).create(case_input(0), wait=10)).json()

    assert job["status"] == "succeeded", job
    [attempt] = job["attempts"]
    assert attempt["provider"] == "sim-openai" and attempt["waits"] == 1
    assert await sim_control.calls("sim-anthropic") == []


async def test_the_fallback_button_replaces_an_attempt_waiting_for_capacity(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path)
    certify(cert_path, list(settings.providers.values()))
    # Shorter than the patience: the job waits for the primary rather than failing over.
    await sim_control.script("sim-openai", {"kind": "status", "code": 429, "retry_after": 4})
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        created = (await api.create(case_input(0))).json()
        await api.until(created["id"], lambda j: j["waiting"] is not None, timeout=5)
        pressed = await gw.client.post(
            f"/v1/jobs/{created['id']}/attempts",
            json={"provider": "sim-anthropic"},
            headers=api.auth,
        )
        job = (await api.job(created["id"], wait=10)).json()
        await asyncio.sleep(4.5)  # past the primary's wait: it must not be sent again
        later = (await api.job(created["id"])).json()
        events = await job_events(api, created["id"])

    assert pressed.status_code == 202, pressed.text
    assert job["status"] == "succeeded", job
    primary, manual = job["attempts"]
    assert primary["state"] == "cancelled" and primary["error"]["reason"] == "superseded"
    assert (manual["provider"], manual["reason"], manual["state"]) == (
        "sim-anthropic",
        "manual",
        "succeeded",
    )
    assert later["attempts"] == job["attempts"]
    assert len(await sim_control.calls("sim-openai")) == 1
    assert any(
        e["detail"].get("why") == "superseded" for e in events_of("attempt_cancelled", events)
    )


async def test_a_wait_that_would_outlast_the_job_deadline_fails_the_job_and_sends_nothing_more(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = sim_settings(sim, database_url, cert_path)
    await sim_control.script(
        "sim-openai", {"kind": "status", "code": 429, "retry_after": 2}, count=5
    )
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        headers = {**api.auth, "Idempotency-Key": "deadline-1", "Prefer": "wait=10"}
        body = {"contract": "ticket-triage@1", "input": case_input(0), "deadline_s": 3}
        job = (await gw.client.post("/v1/jobs", json=body, headers=headers)).json()
        await asyncio.sleep(2.5)  # the deadline has passed: nothing more may be sent
        # A retry without the field replays the same job: the deadline is not fingerprinted.
        replay = await gw.client.post(
            "/v1/jobs", json={**body, "deadline_s": None}, headers=headers
        )

    assert job["status"] == "failed", job
    assert job["error"]["reason"] == "job_deadline"
    assert job["deadline_at"] is not None
    [attempt] = job["attempts"]
    assert attempt["state"] == "failed" and attempt["error"]["reason"] == "job_deadline"
    calls = await sim_control.calls("sim-openai")
    assert len(calls) == 2, calls  # the first try, and one after its 2 s wait
    assert replay.status_code == 200 and replay.json()["id"] == job["id"]


async def test_a_job_deadline_longer_than_the_route_s_is_refused(
    sim: RunningSimulator, database_url: str, cert_path: Path, keys: tuple[str, str]
) -> None:
    settings = sim_settings(sim, database_url, cert_path, route={"job_deadline_s": 60})
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        headers = {**api.auth, "Idempotency-Key": "too-long"}
        body = {"contract": "ticket-triage@1", "input": case_input(0), "deadline_s": 61}
        refused = await gw.client.post("/v1/jobs", json=body, headers=headers)
        fine = await gw.client.post("/v1/jobs", json={**body, "deadline_s": 30}, headers=headers)

    assert refused.status_code == 422, refused.text
    assert refused.json()["type"] == "urn:onejob:invalid-input"
    assert "deadline_s" in refused.json()["detail"]
    assert fine.status_code == 201


async def test_a_full_queue_refuses_new_jobs_but_still_answers_replays(
    sim: RunningSimulator, database_url: str, cert_path: Path, keys: tuple[str, str]
) -> None:
    settings = sim_settings(sim, database_url, cert_path, dispatcher={"enabled": False})
    settings = settings.model_copy(
        update={
            "admission": settings.admission.model_copy(update={"max_queued": 2, "interval": 0.05})
        }
    )
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        first = await api.create(case_input(0), key="q-1")
        await api.create(case_input(1), key="q-2")
        await asyncio.sleep(0.3)  # the queue is counted again
        refused = await api.create(case_input(2), key="q-3")
        replay = await api.create(case_input(0), key="q-1")
        conflict = await api.create(case_input(5), key="q-1")
        listed = await gw.client.get("/v1/jobs", headers=api.auth)
        metrics = (await gw.client.get("/metrics")).text

    assert first.status_code == 201
    assert refused.status_code == 503, refused.text
    assert refused.headers["retry-after"] == "5"
    assert refused.json()["type"] == "urn:onejob:queue-full"
    assert replay.status_code == 200 and replay.json()["id"] == first.json()["id"]
    assert conflict.status_code == 409
    assert len(listed.json()["jobs"]) == 2  # nothing was created for the refused one
    assert 'onejob_jobs_refused_total{reason="queue_full"} 1.0' in metrics


def with_limits(settings: Any, provider: str, **limits: int) -> Any:
    """``settings`` with ``[providers.<provider>.limits]`` set."""
    data = settings.model_dump()
    data["providers"][provider]["limits"] = limits
    return type(settings).model_validate(data)


async def test_a_configured_limit_paces_the_calls_and_no_job_fails(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = with_limits(
        sim_settings(sim, database_url, cert_path, dispatcher={"runners": 8}),
        "sim-openai",
        requests_per_minute=600,  # 10 a second
    )
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        jobs = await asyncio.gather(*(api.create(case_input(i), wait=30) for i in range(30)))

    assert all(j.json()["status"] == "succeeded" for j in jobs), [j.json() for j in jobs]
    times = sorted(c["received_at"] for c in await sim_control.calls("sim-openai"))
    assert len(times) == 30
    # At most 10 calls in any second (and a little slack for the clock's resolution).
    assert max(sum(1 for t in times if s <= t < s + 1.0) for s in times) <= 11
    assert times[-1] - times[0] >= 2.5  # 30 calls at 10 a second take about 3 s


async def test_one_owner_s_burst_does_not_hold_back_another_owner_s_job(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    cert_path: Path,
    keys: tuple[str, str],
) -> None:
    settings = with_limits(
        sim_settings(sim, database_url, cert_path, dispatcher={"runners": 8}),
        "sim-openai",
        requests_per_minute=300,  # 5 a second: alice's burst queues
    )
    alice, bob = keys  # the admin key's owner ("ops") stands for a second owner
    async with run_gateway(settings) as gw:
        burst = Api(gw, alice, bob)
        other = Api(gw, bob, bob)
        # The figure: 300 of one owner's jobs in line (about a minute of them at
        # this pace; the gateway stops with most of them still queued, which is fine).
        made = await asyncio.gather(*(burst.create(case_input(i)) for i in range(300)))
        assert {m.status_code for m in made} == {201}
        await asyncio.sleep(1.0)
        began = time.time()
        job = (await other.create(case_input(0), wait=30)).json()

    assert job["status"] == "succeeded", job
    calls = await sim_control.calls("sim-openai")
    theirs = next(c for c in calls if c["idempotency_key"] == f"{job['id']}/1")
    alices_meanwhile = [
        c for c in calls if began <= c["received_at"] < theirs["received_at"] and c is not theirs
    ]
    assert len(alices_meanwhile) < 10, len(alices_meanwhile)
