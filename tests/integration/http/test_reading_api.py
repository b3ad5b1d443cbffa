"""Reading: paging, contracts, health, OpenAPI, Prefer: wait, access log lines."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import httpx
import pytest

from gateway.store import SqlJobStore

ECHO = "echo@1"
LEASE = {"lease_ttl": 30.0, "deadline_s": {}, "default_deadline_s": 30.0}


async def create(client: httpx.AsyncClient, keys: Any, n: int, who: str = "alice") -> str:
    r = await client.post(
        "/v1/jobs", json={"contract": ECHO, "input": {"n": n}}, headers=keys.job(who, f"k-{n}")
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def test_jobs_are_listed_newest_first_a_page_at_a_time(
    client: httpx.AsyncClient, keys: Any
) -> None:
    ids = [await create(client, keys, n) for n in range(5)]
    await create(client, keys, 99, who="bob")
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        r = await client.get("/v1/jobs", params=params, headers=keys.auth())
        assert r.status_code == 200, r.text
        page = r.json()
        seen += [j["id"] for j in page["jobs"]]
        assert all(j["owner"] == "alice" for j in page["jobs"])
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert pages < 10
    assert seen == list(reversed(ids))
    assert pages == 3


async def test_jobs_can_be_filtered_by_status(client: httpx.AsyncClient, keys: Any) -> None:
    first = await create(client, keys, 1)
    await create(client, keys, 2)
    await client.post(f"/v1/jobs/{first}/cancel", headers=keys.auth())
    r = await client.get("/v1/jobs?status=cancelled", headers=keys.auth())
    assert [j["id"] for j in r.json()["jobs"]] == [first]
    r = await client.get("/v1/jobs?status=queued", headers=keys.auth())
    assert len(r.json()["jobs"]) == 1


async def test_contracts_are_listed_with_schemas_and_routes(
    client: httpx.AsyncClient, keys: Any
) -> None:
    r = await client.get("/v1/contracts", headers=keys.auth())
    assert r.status_code == 200
    by_name = {c["name"]: c for c in r.json()["contracts"]}
    triage = by_name["ticket-triage@1"]
    assert triage["input_schema"]["type"] == "object"
    assert "category" in triage["output_schema"]["properties"]
    assert triage["route"] == {"primary": "sim-openai", "fallbacks": ["sim-anthropic"]}
    assert isinstance(triage["hedgeable"], bool)


async def test_health_readiness_and_openapi_need_no_key(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).json()["status"] == "ready"
    schema = await client.get("/schema/openapi.json")
    assert schema.status_code == 200
    assert "/v1/jobs" in schema.json()["paths"]


async def test_readiness_fails_as_a_problem_when_the_database_is_gone(
    client: httpx.AsyncClient, store: SqlJobStore
) -> None:
    original = store.ping

    async def broken() -> None:
        raise ConnectionError("database unreachable")

    store.ping = broken  # type: ignore[method-assign]
    try:
        r = await client.get("/readyz")
    finally:
        store.ping = original  # type: ignore[method-assign]
    assert r.status_code == 503
    assert r.headers["content-type"].startswith("application/problem+json")


async def test_prefer_wait_returns_when_the_job_settles(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    job_id = await create(client, keys, 1)
    claimed = await store.claim_next_attempt("w1", **LEASE)
    assert claimed is not None

    async def finish_soon() -> None:
        await asyncio.sleep(0.3)
        await store.finalize(claimed.attempt.id, {"echo": 1})

    started = time.monotonic()
    finisher = asyncio.create_task(finish_soon())
    r = await client.get(f"/v1/jobs/{job_id}", headers={**keys.auth(), "Prefer": "wait=10"})
    elapsed = time.monotonic() - started
    await finisher
    assert r.status_code == 200
    assert r.json()["status"] == "succeeded"
    assert r.headers["preference-applied"] == "wait=10"
    assert 0.25 <= elapsed < 5


async def test_prefer_wait_gives_up_after_the_time_asked(
    client: httpx.AsyncClient, keys: Any
) -> None:
    job_id = await create(client, keys, 1)
    started = time.monotonic()
    r = await client.get(f"/v1/jobs/{job_id}", headers={**keys.auth(), "Prefer": "wait=1"})
    assert 0.9 <= time.monotonic() - started < 3
    assert r.json()["status"] == "queued"
    assert r.headers["preference-applied"] == "wait=1"


async def test_every_request_logs_one_access_line_with_its_job(
    client: httpx.AsyncClient, keys: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="onejob.access"):
        job_id = await create(client, keys, 1)
        await client.get("/v1/jobs/job_missing", headers=keys.auth())
    lines = [r for r in caplog.records if r.name == "onejob.access"]
    assert [(r.method, r.path, r.status) for r in lines] == [  # type: ignore[attr-defined]
        ("POST", "/v1/jobs", 201),
        ("GET", "/v1/jobs/job_missing", 404),
    ]
    assert lines[0].job_id == job_id  # type: ignore[attr-defined]


async def test_the_console_s_reads_are_logged_at_debug_its_writes_and_refusals_at_info(
    client: httpx.AsyncClient, keys: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Console polling was 243 of a serve log's 401 lines (issue 47, 8)."""
    console = {**keys.auth(), "X-Onejob-Client": "console"}
    job_id = await create(client, keys, 1)
    with caplog.at_level(logging.DEBUG, logger="onejob.access"):
        await client.get(f"/v1/jobs/{job_id}", headers=console)
        await client.get("/v1/jobs/job_missing", headers=console)
        await client.post(f"/v1/jobs/{job_id}/cancel", headers=console)
        await client.get(f"/v1/jobs/{job_id}", headers=keys.auth())
    levels = [
        (r.levelname, r.method, r.status)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "onejob.access"
    ]
    assert levels == [
        ("DEBUG", "GET", 200),
        ("INFO", "GET", 404),
        ("INFO", "POST", 200),
        ("INFO", "GET", 200),  # not the console: every read stays INFO
    ]


def test_log_lines_are_json_objects() -> None:
    from gateway.logging import JsonFormatter

    record = logging.LogRecord("onejob.access", logging.INFO, "x", 1, "GET / 200", None, None)
    record.job_id = "job_1"
    line = json.loads(JsonFormatter().format(record))
    assert (line["level"], line["msg"], line["job_id"]) == ("INFO", "GET / 200", "job_1")


async def test_the_certification_matrix_shows_each_configured_fallback(
    client: httpx.AsyncClient, keys: Any, certifications: Any
) -> None:
    certifications.pairs.add(("sim-openai", "sim-anthropic"))
    r = await client.get("/v1/certifications", headers=keys.auth())
    assert r.status_code == 200
    rows = {row["contract"]: row for row in r.json()["certifications"]}
    assert rows["echo@1"]["fallback"] == "sim-anthropic"
    assert rows["echo@1"]["allowed"] is True
    certifications.pairs.clear()
    r = await client.get("/v1/certifications", headers=keys.auth())
    assert all(not row["allowed"] for row in r.json()["certifications"])
    assert (await client.get("/v1/certifications")).status_code == 401


async def test_metrics_count_creations_replays_and_conflicts(
    client: httpx.AsyncClient, keys: Any
) -> None:
    await create(client, keys, 1)
    await client.post(
        "/v1/jobs", json={"contract": ECHO, "input": {"n": 1}}, headers=keys.job(key="k-1")
    )
    await client.post(
        "/v1/jobs", json={"contract": ECHO, "input": {"n": 2}}, headers=keys.job(key="k-1")
    )
    r = await client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    for name in ("created", "replayed", "conflicted"):
        assert f"onejob_jobs_{name}_total 1.0" in r.text
    assert "onejob_attempts_unknown 0.0" in r.text
