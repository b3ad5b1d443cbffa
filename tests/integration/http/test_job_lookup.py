"""Finding a job by its owner and Idempotency-Key, and an admin listing another owner's jobs
(``GET /v1/jobs?owner=&idempotency_key=``), on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx

ECHO = "echo@1"


async def create(client: httpx.AsyncClient, keys: Any, n: int, who: str, key: str) -> str:
    r = await client.post(
        "/v1/jobs", json={"contract": ECHO, "input": {"n": n}}, headers=keys.job(who, key)
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def test_an_owner_finds_its_own_job_by_its_idempotency_key(
    client: httpx.AsyncClient, keys: Any
) -> None:
    mine = await create(client, keys, 1, "alice", '"order-42-triage"')
    await create(client, keys, 2, "alice", "order-43")
    await create(client, keys, 3, "bob", '"order-42-triage"')  # the same key, another owner
    r = await client.get(
        "/v1/jobs", params={"idempotency_key": "order-42-triage"}, headers=keys.auth()
    )
    assert r.status_code == 200, r.text
    page = r.json()
    assert [j["id"] for j in page["jobs"]] == [mine]
    assert page["jobs"][0]["idempotency_key"] == "order-42-triage"
    assert page["jobs"][0]["attempts"], "the job comes with its attempts"
    assert page["next_cursor"] is None
    # Naming itself as the owner is the same question.
    r = await client.get(
        "/v1/jobs",
        params={"owner": "alice", "idempotency_key": "order-42-triage"},
        headers=keys.auth(),
    )
    assert [j["id"] for j in r.json()["jobs"]] == [mine]


async def test_a_key_nobody_used_or_a_status_it_does_not_have_finds_nothing(
    client: httpx.AsyncClient, keys: Any
) -> None:
    await create(client, keys, 1, "alice", "k-1")
    for params in (
        {"idempotency_key": "k-2"},
        {"idempotency_key": "k-1", "status": "succeeded"},
        {"idempotency_key": '"k-1"'},  # the quotes of an sf-string are not part of the key
    ):
        r = await client.get("/v1/jobs", params=params, headers=keys.auth())
        assert r.status_code == 200, (params, r.text)
        assert r.json() == {"jobs": [], "next_cursor": None}, params
    r = await client.get(
        "/v1/jobs", params={"idempotency_key": "k-1", "status": "queued"}, headers=keys.auth()
    )
    assert len(r.json()["jobs"]) == 1


async def test_an_admin_finds_another_owners_job_and_lists_that_owners_jobs(
    client: httpx.AsyncClient, keys: Any
) -> None:
    bobs = [await create(client, keys, n, "bob", f"b-{n}") for n in range(3)]
    await create(client, keys, 9, "alice", "b-1")
    r = await client.get(
        "/v1/jobs", params={"owner": "bob", "idempotency_key": "b-1"}, headers=keys.auth("admin")
    )
    assert r.status_code == 200, r.text
    [job] = r.json()["jobs"]
    assert (job["id"], job["owner"]) == (bobs[1], "bob")
    # The admin's own list is its own (empty); with owner=bob it is bob's, paged.
    r = await client.get("/v1/jobs", headers=keys.auth("admin"))
    assert r.json()["jobs"] == []
    seen: list[str] = []
    params: dict[str, Any] = {"owner": "bob", "limit": 2}
    while True:
        r = await client.get("/v1/jobs", params=params, headers=keys.auth("admin"))
        assert r.status_code == 200, r.text
        seen += [j["id"] for j in r.json()["jobs"]]
        if r.json()["next_cursor"] is None:
            break
        params["cursor"] = r.json()["next_cursor"]
    assert seen == bobs[::-1]


async def test_another_owners_jobs_need_the_admin_scope(
    client: httpx.AsyncClient, keys: Any
) -> None:
    await create(client, keys, 1, "bob", "b-1")
    for params in ({"owner": "bob", "idempotency_key": "b-1"}, {"owner": "bob"}):
        r = await client.get("/v1/jobs", params=params, headers=keys.auth("alice"))
        assert r.status_code == 403, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert "b-1" not in r.text


async def test_a_lookup_takes_no_cursor_and_a_key_the_header_would_refuse_is_400(
    client: httpx.AsyncClient, keys: Any
) -> None:
    await create(client, keys, 1, "alice", "k-1")
    page = (await client.get("/v1/jobs?limit=1", headers=keys.auth())).json()
    await create(client, keys, 2, "alice", "k-2")
    cursor = (await client.get("/v1/jobs?limit=1", headers=keys.auth())).json()["next_cursor"]
    assert page["jobs"] and cursor
    for params in (
        {"idempotency_key": "k-1", "cursor": cursor},
        {"idempotency_key": "k\x7f1"},
        {"idempotency_key": "é"},
        {"idempotency_key": "k" * 256},
        {"idempotency_key": ""},
        {"owner": ""},
    ):
        r = await client.get("/v1/jobs", params=params, headers=keys.auth())
        assert r.status_code == 400, (params, r.text)
