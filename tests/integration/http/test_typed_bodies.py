"""Typed bodies and the order of checks: who you are first, then what you sent.

Unknown fields and wrong types are refused on every route with a body; a non-admin learns
nothing about an admin route's validation; page sizes and cursors are taken only as the
gateway writes them.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.domain.states import AttemptState
from gateway.store import SqlJobStore

ECHO = "echo@1"
LEASE = {"lease_ttl": 30.0, "deadline_s": {}, "default_deadline_s": 30.0}


async def _unknown_attempt(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore, key: str = '"k-1"'
) -> str:
    r = await client.post(
        "/v1/jobs", json={"contract": ECHO, "input": {"n": 1}}, headers=keys.job(key=key)
    )
    assert r.status_code == 201, r.text
    first: str = r.json()["attempts"][0]["id"]
    await store.claim_next_attempt("w1", **LEASE)
    await store.mark_unknown(first, {"reason": "timeout"})
    return first


async def test_an_unknown_field_in_a_resolution_is_refused_and_nothing_is_resolved(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    attempt_id = await _unknown_attempt(client, keys, store)
    events_before = len(await store.events((await store.get_attempt(attempt_id)).job_id))  # type: ignore[union-attr]
    r = await client.post(
        f"/v1/admin/attempts/{attempt_id}/resolve",
        json={"outcome": "cancelled", "owner": "bob", "bogus": 1},
        headers=keys.auth("admin"),
    )
    assert r.status_code == 422, r.text
    assert r.json()["type"] == "urn:onejob:invalid-input"
    assert "unknown field" in r.text
    attempt = await store.get_attempt(attempt_id)
    assert attempt is not None and attempt.state.value == "unknown"
    assert len(await store.events(attempt.job_id)) == events_before


@pytest.mark.parametrize(
    "body",
    [
        {"provider": "sim-openai", "bogus": 1},
        {"provider": 7},
        {},
        [],
    ],
    ids=["unknown field", "provider not a string", "no provider", "not an object"],
)
async def test_a_malformed_attempt_request_is_refused_and_adds_no_attempt(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore, body: Any
) -> None:
    attempt_id = await _unknown_attempt(client, keys, store)
    await store.resolve(attempt_id, AttemptState.FAILED)
    attempt = await store.get_attempt(attempt_id)
    assert attempt is not None
    r = await client.post(f"/v1/jobs/{attempt.job_id}/attempts", json=body, headers=keys.auth())
    assert r.status_code == 422, r.text
    job = await store.get_job(attempt.job_id)
    assert job is not None and len(job.attempts) == 1


@pytest.mark.parametrize(
    ("method", "path", "content"),
    [
        ("POST", "/v1/admin/attempts/att_1/resolve", b'{"outcome": '),
        ("POST", "/v1/admin/attempts/att_1/resolve", b'{"outcome": "maybe", "x": 1}'),
        ("GET", "/v1/admin/attempts?state=nonsense&limit=1e3", None),
        ("GET", "/v1/admin/jobs/%00", None),
    ],
    ids=["malformed json", "invalid body", "invalid query", "impossible id"],
)
async def test_a_non_admin_gets_403_before_any_validation_of_an_admin_request(
    client: httpx.AsyncClient, keys: Any, method: str, path: str, content: bytes | None
) -> None:
    r = await client.request(method, path, content=content, headers=keys.auth("alice"))
    assert r.status_code == 403, r.text
    assert r.json()["type"] == "urn:onejob:forbidden"
    anonymous = await client.request(method, path, content=content)
    assert anonymous.status_code == 401


@pytest.mark.parametrize("limit", ["1e3", "+5", "1.0", "05", "0", "-1", "10000"])
async def test_a_page_size_must_be_plain_digits_within_range(
    client: httpx.AsyncClient, keys: Any, limit: str
) -> None:
    r = await client.get("/v1/jobs", params={"limit": limit}, headers=keys.auth())
    assert r.status_code == 400, (limit, r.text)
    r = await client.get("/v1/admin/attempts", params={"limit": limit}, headers=keys.auth("admin"))
    assert r.status_code == 400, (limit, r.text)


async def test_a_well_formed_cursor_that_the_gateway_did_not_issue_is_a_400(
    client: httpx.AsyncClient, keys: Any
) -> None:
    import base64

    for key in ('"a"', '"b"'):
        r = await client.post(
            "/v1/jobs", json={"contract": ECHO, "input": {}}, headers=keys.job(key=key)
        )
        assert r.status_code == 201
    page = (await client.get("/v1/jobs?limit=1", headers=keys.auth())).json()
    assert page["next_cursor"] is not None
    ok = await client.get(
        "/v1/jobs", params={"limit": 1, "cursor": page["next_cursor"]}, headers=keys.auth()
    )
    assert ok.status_code == 200 and len(ok.json()["jobs"]) == 1
    forged = base64.urlsafe_b64encode(b"job_01ZZZZZZZZZZZZZZZZZZZZZZZZ").decode().rstrip("=")
    r = await client.get("/v1/jobs", params={"cursor": forged}, headers=keys.auth())
    assert r.status_code == 400, r.text
    # Another owner's cursor is not a position in this owner's list either.
    r = await client.get(
        "/v1/jobs", params={"cursor": page["next_cursor"]}, headers=keys.auth("bob")
    )
    assert r.status_code == 400, r.text


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"outcome": "failed", "result": {"echo": 1}}, "unknown field `result`"),
        ({"outcome": "cancelled", "result": None}, "unknown field `result`"),
        ({"outcome": "succeeded"}, "missing required field `result`"),
        ({"outcome": "maybe"}, "Invalid value 'maybe'"),
    ],
    ids=["result with failed", "result with cancelled", "succeeded without result", "bad"],
)
async def test_a_resolution_carries_a_result_only_with_succeeded_and_nothing_changes(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore, body: dict[str, Any], says: str
) -> None:
    attempt_id = await _unknown_attempt(client, keys, store)
    r = await client.post(
        f"/v1/admin/attempts/{attempt_id}/resolve", json=body, headers=keys.auth("admin")
    )
    assert r.status_code == 422, r.text
    assert says in r.text
    attempt = await store.get_attempt(attempt_id)
    assert attempt is not None and attempt.state is AttemptState.UNKNOWN


async def test_each_outcome_resolves_with_only_its_own_members(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    won = await _unknown_attempt(client, keys, store)
    r = await client.post(
        f"/v1/admin/attempts/{won}/resolve",
        json={"outcome": "succeeded", "result": {"echo": 1}, "note": "seen in the dashboard"},
        headers=keys.auth("admin"),
    )
    assert r.status_code == 200, r.text
    assert r.json()["job"]["status"] == "succeeded"
    assert r.json()["job"]["result"] == {"echo": 1}
    gone = await _unknown_attempt(client, keys, store, key='"k-2"')
    r = await client.post(
        f"/v1/admin/attempts/{gone}/resolve",
        json={"outcome": "cancelled", "note": "given up"},
        headers=keys.auth("admin"),
    )
    assert r.status_code == 200, r.text
    assert r.json()["attempt"]["state"] == "cancelled"


async def test_a_finished_attempt_is_409_before_its_offered_result_is_read(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    """A finished attempt can never be resolved, so the result offered is not judged."""
    attempt_id = await _unknown_attempt(client, keys, store)
    await store.resolve(attempt_id, AttemptState.FAILED)
    r = await client.post(
        f"/v1/admin/attempts/{attempt_id}/resolve",
        json={"outcome": "succeeded", "result": {"not": "the output schema"}},
        headers=keys.auth("admin"),
    )
    assert r.status_code == 409, r.text
    assert r.json()["type"] == "urn:onejob:not-unknown"
    attempt = await store.get_attempt(attempt_id)
    assert attempt is not None and attempt.state is AttemptState.FAILED


async def test_an_unknown_attempt_is_resolved_only_with_a_result_its_contract_accepts(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    attempt_id = await _unknown_attempt(client, keys, store)
    r = await client.post(
        f"/v1/admin/attempts/{attempt_id}/resolve",
        json={"outcome": "succeeded", "result": {"not": "the output schema"}},
        headers=keys.auth("admin"),
    )
    assert r.status_code == 422, r.text
    attempt = await store.get_attempt(attempt_id)
    assert attempt is not None and attempt.state is AttemptState.UNKNOWN


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/jobs", {"status": ""}),
        ("/v1/jobs", {"cursor": ""}),
        ("/v1/admin/attempts", {"state": ""}),
    ],
    ids=["empty status", "empty cursor", "empty state"],
)
async def test_an_empty_filter_or_cursor_is_a_400_not_an_unfiltered_list(
    client: httpx.AsyncClient, keys: Any, path: str, params: dict[str, str]
) -> None:
    r = await client.get(path, params=params, headers=keys.auth("admin"))
    assert r.status_code == 400, r.text
