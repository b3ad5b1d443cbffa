"""POST /v1/jobs: idempotent creation, replay, conflict, owners (DESIGN R1, R2)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from litestar import Litestar

from gateway.store import SqlJobStore

ECHO = "echo@1"
TRIAGE = "ticket-triage@1"
TRIAGE_INPUT = {
    "ticket_id": "SUP-1",
    "channel": "email",
    "customer": {"name": "Ada", "plan": "pro"},
    "subject": "Charged twice",
    "body": "I was charged twice this month.",
}

pytestmark = pytest.mark.slow

N_CLICKS = 50


def triage_body(**changes: object) -> dict[str, object]:
    return {"contract": TRIAGE, "input": {**TRIAGE_INPUT, **changes}}


async def test_a_new_key_creates_a_job_with_its_first_attempt(
    client: httpx.AsyncClient, keys: Any
) -> None:
    r = await client.post("/v1/jobs", json=triage_body(), headers=keys.job())
    assert r.status_code == 201, r.text
    job = r.json()
    assert r.headers["location"] == f"/v1/jobs/{job['id']}"
    assert "idempotent-replayed" not in r.headers
    assert job["owner"] == "alice"
    assert job["idempotency_key"] == "k-1"
    assert job["contract"] == TRIAGE
    assert job["provider"] == "sim-openai"  # the route's primary
    assert (job["status"], job["version"], job["result"]) == ("queued", 1, None)
    assert [(a["number"], a["reason"], a["state"]) for a in job["attempts"]] == [
        (1, "initial", "starting")
    ]
    fetched = await client.get(r.headers["location"], headers=keys.auth("alice"))
    assert fetched.status_code == 200
    assert fetched.json() == job


async def test_second_click_with_same_key_returns_same_job(
    client: httpx.AsyncClient, keys: Any, count_rows: Any
) -> None:
    first = await client.post("/v1/jobs", json=triage_body(), headers=keys.job())
    second = await client.post("/v1/jobs", json=triage_body(), headers=keys.job())
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.headers["idempotent-replayed"] == "true"
    assert second.json()["id"] == first.json()["id"]
    assert await count_rows() == (1, 1)


async def test_fifty_concurrent_clicks_on_a_served_app_make_one_job(
    app: Litestar, keys: Any, count_rows: Any, served: Any
) -> None:
    async with served(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:

        async def click() -> httpx.Response:
            return await http.post("/v1/jobs", json=triage_body(), headers=keys.job())

        responses = await asyncio.gather(*(click() for _ in range(N_CLICKS)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * (N_CLICKS - 1) + [201]
    assert all(
        r.headers["idempotent-replayed"] == "true" for r in responses if r.status_code == 200
    )
    assert len({r.json()["id"] for r in responses}) == 1
    assert await count_rows() == (1, 1)


async def test_fifty_concurrent_clicks_across_two_gateways_on_one_database_make_one_job(
    app: Litestar, keys: Any, count_rows: Any, served: Any, second_gateway: Any
) -> None:
    async with (
        served(app) as url_a,
        second_gateway() as url_b,
        httpx.AsyncClient(timeout=30) as http,
    ):

        async def click(i: int) -> httpx.Response:
            base = url_a if i % 2 else url_b
            return await http.post(f"{base}/v1/jobs", json=triage_body(), headers=keys.job())

        responses = await asyncio.gather(*(click(i) for i in range(N_CLICKS)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * (N_CLICKS - 1) + [201], [
        r.text for r in responses if r.status_code >= 300
    ]
    assert len({r.json()["id"] for r in responses}) == 1
    assert await count_rows() == (1, 1)


@pytest.mark.parametrize(
    "replay_text",
    [
        '{"input": {"b": [1, 2], "a": 1}, "contract": "echo@1"}',  # keys reordered
        '{"contract": "echo@1", "input": {"a": 1.0, "b": [1.0, 2e0]}}',  # 1 vs 1.0
        '{"contract": "echo@1", "input": {"a": 1, "b": [1, 2]}, "provider": null}',
    ],
)
async def test_the_same_request_spelled_differently_is_a_replay(
    client: httpx.AsyncClient, keys: Any, replay_text: str
) -> None:
    original = {"contract": ECHO, "input": {"a": 1, "b": [1, 2]}}
    first = await client.post("/v1/jobs", json=original, headers=keys.job())
    assert first.status_code == 201
    again = await client.post(
        "/v1/jobs",
        content=replay_text,
        headers={**keys.job(), "Content-Type": "application/json"},
    )
    assert again.status_code == 200, again.text
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]


@pytest.mark.parametrize(
    "other",
    [
        {"contract": ECHO, "input": {"a": 2, "b": [1, 2]}},
        {"contract": ECHO, "input": {"a": 1, "b": [2, 1]}},
        {"contract": ECHO, "input": {"a": "1", "b": [1, 2]}},
        {"contract": ECHO, "input": {"a": 1, "b": [1, 2], "c": None}},
        {"contract": ECHO, "input": {"a": 1, "b": [1, 2]}, "provider": "sim-openai"},
        {"contract": TRIAGE, "input": TRIAGE_INPUT},
    ],
)
async def test_the_same_key_with_a_different_request_is_a_conflict_that_changes_nothing(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore, other: dict, count_rows: Any
) -> None:
    original = {"contract": ECHO, "input": {"a": 1, "b": [1, 2]}}
    first = await client.post("/v1/jobs", json=original, headers=keys.job())
    before = await store.get_job(first.json()["id"])
    r = await client.post("/v1/jobs", json=other, headers=keys.job())
    assert r.status_code == 409
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["type"] == "urn:onejob:idempotency-key-reused"
    assert problem["job_id"] == first.json()["id"]
    after = await store.get_job(first.json()["id"])
    assert after == before
    assert await count_rows() == (1, 1)


async def test_the_same_key_under_two_owners_makes_two_jobs(
    client: httpx.AsyncClient, keys: Any, count_rows: Any
) -> None:
    a = await client.post("/v1/jobs", json=triage_body(), headers=keys.job("alice"))
    b = await client.post("/v1/jobs", json=triage_body(), headers=keys.job("bob"))
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]
    assert (a.json()["owner"], b.json()["owner"]) == ("alice", "bob")
    assert await count_rows() == (2, 2)


async def test_another_owners_job_does_not_exist_for_you(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    a = await client.post("/v1/jobs", json=triage_body(), headers=keys.job())
    job_id = a.json()["id"]
    for r in (
        await client.get(f"/v1/jobs/{job_id}", headers=keys.auth("bob")),
        await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.auth("bob")),
        await client.post(
            f"/v1/jobs/{job_id}/attempts", json={"provider": "sim-openai"}, headers=keys.auth("bob")
        ),
    ):
        assert r.status_code == 404, r.text
        assert r.json()["type"] == "urn:onejob:not-found"
    listed = await client.get("/v1/jobs", headers=keys.auth("bob"))
    assert listed.json()["jobs"] == []
    job = await store.get_job(job_id)
    assert job is not None and job.status.value == "queued"


async def test_naming_a_provider_makes_it_the_jobs_primary(
    client: httpx.AsyncClient, keys: Any
) -> None:
    body = {**triage_body(), "provider": "sim-anthropic"}
    r = await client.post("/v1/jobs", json=body, headers=keys.job())
    assert r.status_code == 201
    assert r.json()["provider"] == "sim-anthropic"
    assert r.json()["attempts"][0]["provider"] == "sim-anthropic"


async def test_the_problem_of_a_conflict_is_valid_json_problem(
    client: httpx.AsyncClient, keys: Any
) -> None:
    await client.post("/v1/jobs", json=triage_body(), headers=keys.job())
    r = await client.post("/v1/jobs", json=triage_body(subject="x"), headers=keys.job())
    body = json.loads(r.content)
    assert set(body) >= {"type", "title", "status", "detail", "job_id"}
    assert body["status"] == 409


async def test_an_oversized_body_on_a_real_socket_is_a_413(
    app: Litestar, keys: Any, count_rows: Any, served: Any
) -> None:
    big = b'{"contract": "echo@1", "input": {"s": "' + b"x" * (2 * 1024 * 1024) + b'"}}'
    async with served(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        r = await http.post("/v1/jobs", content=big, headers=keys.job())
        assert r.status_code == 413
        assert r.json()["type"] == "urn:onejob:payload-too-large"

        async def chunks() -> Any:  # no Content-Length: the limit applies while streaming
            for _ in range(4):
                yield b"x" * (512 * 1024)

        r = await http.post("/v1/jobs", content=chunks(), headers=keys.job())
        assert r.status_code == 413
        ok = await http.get("/healthz")  # the server is still fine
        assert ok.status_code == 200
    assert await count_rows() == (0, 0)


async def test_a_conflict_does_not_wait_even_when_asked_to(
    client: httpx.AsyncClient, keys: Any
) -> None:
    await client.post("/v1/jobs", json=triage_body(), headers=keys.job())
    r = await client.post(
        "/v1/jobs",
        json=triage_body(subject="other"),
        headers={**keys.job(), "Prefer": "wait=30"},
    )
    assert r.status_code == 409
    assert "preference-applied" not in r.headers


async def test_prefer_wait_counts_from_the_requests_arrival_not_the_jobs_creation(
    app: Litestar, client: httpx.AsyncClient, keys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RFC 7240's wait is the time the client gives the whole request: a creation that
    took 0.6 s of a ``wait=1`` leaves at most 0.4 s to wait (with 2 s of database latency,
    a creation of 4.5 s then a full 3 s wait answered after 7.5 s; issue 46)."""
    service = app.state.service
    create, asked = service.create_job_for_key, []

    async def slow_create(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.6)
        return await create(*args, **kwargs)

    async def wait_for(job: Any, seconds: float, *, fresh: bool = False) -> Any:
        asked.append(seconds)
        return job

    monkeypatch.setattr(service, "create_job_for_key", slow_create)
    monkeypatch.setattr(service, "wait_for", wait_for)
    r = await client.post(
        "/v1/jobs", json=triage_body(), headers={**keys.job(), "Prefer": "wait=1"}
    )
    assert r.status_code == 201 and r.headers["preference-applied"] == "wait=1"
    assert len(asked) == 1 and 0 <= asked[0] <= 0.4
