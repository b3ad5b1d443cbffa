"""``POST /v1/jobs`` checks the API key in the statement that creates the job (PostgreSQL).

The key is still read on every request, so revocation takes effect at once, and a stranger
still learns nothing but 401: whatever else is wrong with the request, an unknown or
revoked key is what the answer says.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from gateway.store import SqlJobStore
from tests.integration.http.test_request_refusals import GOOD, REFUSALS

UNAUTHORIZED = "urn:onejob:unauthorized"


async def _post(
    client: httpx.AsyncClient, secret: str, body: bytes = GOOD, key: str | None = '"k-1"'
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return await client.post("/v1/jobs", content=body, headers=headers)


async def _all_events(store: SqlJobStore, owners: tuple[str, ...]) -> int:
    total = 0
    for owner in owners:
        page, _ = await store.list_jobs(owner, status=None, limit=100, cursor=None)
        for job in page:
            total += len(await store.events(job.id))
    return total


@pytest.mark.parametrize(("case", "status", "type_"), REFUSALS)
@pytest.mark.parametrize("stranger", ["unknown", "revoked"])
async def test_a_stranger_is_told_401_whatever_else_is_wrong(
    client: httpx.AsyncClient,
    store: SqlJobStore,
    count_rows: Any,
    case: tuple[bytes, list[tuple[str, str | bytes]], str | None, str | None],
    status: int,
    type_: str,
    stranger: str,
) -> None:
    body, extra, _, key = case
    if stranger == "unknown":
        secret = "oj_" + "x" * 43
    else:
        key_id, secret = await store.create_api_key("mallory", frozenset({"jobs"}))
        assert await store.revoke_api_key(key_id)
    headers: list[tuple[str, str | bytes]] = [("Content-Type", "application/json")]
    if not any(name.lower() == "authorization" for name, _ in extra):
        headers.append(("Authorization", f"Bearer {secret}"))
    if key is not None:
        headers.append(("Idempotency-Key", key))
    headers.extend(extra)
    r = await client.post("/v1/jobs", content=body, headers=headers)
    assert r.status_code == 401, r.text
    assert r.json()["type"] == UNAUTHORIZED
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert await count_rows() == (0, 0)
    page, _ = await store.list_jobs("mallory", status=None, limit=10, cursor=None)
    assert page == []


async def test_a_good_request_with_a_bad_key_writes_nothing(
    client: httpx.AsyncClient, store: SqlJobStore, keys: Any, count_rows: Any
) -> None:
    r = await _post(client, "oj_" + "y" * 43)
    assert r.status_code == 401
    assert r.json()["type"] == UNAUTHORIZED
    assert await count_rows() == (0, 0)


async def test_a_revoked_key_can_neither_create_nor_replay(
    client: httpx.AsyncClient, store: SqlJobStore, count_rows: Any
) -> None:
    key_id, secret = await store.create_api_key("carol", frozenset({"jobs"}))
    first = await _post(client, secret)
    assert first.status_code == 201, first.text
    assert (await _post(client, secret)).status_code == 200  # the replay, while valid
    assert await store.revoke_api_key(key_id)
    replay = await _post(client, secret)  # the job exists: still not shown to a revoked key
    assert replay.status_code == 401, replay.text
    fresh = await _post(client, secret, key='"k-2"')
    assert fresh.status_code == 401
    page, _ = await store.list_jobs("carol", status=None, limit=10, cursor=None)
    assert [j.id for j in page] == [first.json()["id"]]
    kinds = [e.kind for e in await store.events(first.json()["id"])]
    assert kinds.count("replayed") == 1  # the refused replay audited nothing


async def test_each_owner_gets_its_own_job_under_the_same_idempotency_key(
    client: httpx.AsyncClient, store: SqlJobStore, keys: Any
) -> None:
    a = await _post(client, keys.alice)
    b = await _post(client, keys.bob)
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]
    assert (a.json()["owner"], b.json()["owner"]) == ("alice", "bob")
    again = await _post(client, keys.bob)
    assert (again.status_code, again.json()["id"]) == (200, b.json()["id"])
    other = json.dumps({"contract": "echo@1", "input": {"x": 1}}).encode()
    conflict = await _post(client, keys.alice, body=other)
    assert conflict.status_code == 409
    assert conflict.json()["job_id"] == a.json()["id"]


async def test_postgresql_reads_no_key_apart_from_the_creating_statement(
    client: httpx.AsyncClient,
    store: SqlJobStore,
    keys: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[str] = []
    authenticate = store.authenticate

    async def counted(secret: str) -> Any:
        reads.append(secret)
        return await authenticate(secret)

    monkeypatch.setattr(store, "authenticate", counted)
    created = await _post(client, keys.alice)
    replayed = await _post(client, keys.alice)
    assert (created.status_code, replayed.status_code) == (201, 200)
    # SQLite has no round trip to save: it reads the key, then creates.
    assert len(reads) == (2 if store.db.name == "sqlite" else 0)
    # A refusal of the request still reads the key first, on both.
    assert (await _post(client, keys.alice, key=None)).status_code == 400
    assert len(reads) == (3 if store.db.name == "sqlite" else 1)


async def test_fifty_clicks_with_one_key_make_one_job(
    client: httpx.AsyncClient, store: SqlJobStore, keys: Any
) -> None:
    answers = await asyncio.gather(*(_post(client, keys.alice, key='"dbl"') for _ in range(50)))
    assert sorted({r.status_code for r in answers}) == [200, 201]
    assert [r.status_code for r in answers].count(201) == 1
    assert len({r.json()["id"] for r in answers}) == 1
    kinds = [e.kind for e in await store.events(answers[0].json()["id"])]
    assert kinds.count("replayed") == 49
    assert await _all_events(store, ("bob", "ops")) == 0
