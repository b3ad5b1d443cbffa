"""Bad and hostile requests: a clear 4xx problem, never a 500, never a written row."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

TRIAGE = "ticket-triage@1"
TRIAGE_INPUT = {
    "ticket_id": "SUP-1",
    "channel": "email",
    "customer": {"name": "Ada", "plan": "pro"},
    "subject": "Charged twice",
    "body": "I was charged twice this month.",
}
GOOD = json.dumps({"contract": TRIAGE, "input": TRIAGE_INPUT}).encode()
MIB = 1024 * 1024


def _case(
    name: str,
    status: int,
    type_: str,
    *,
    body: bytes = GOOD,
    headers: list[tuple[str, str | bytes]] | None = None,
    auth: str | None = "alice",
    key: str | None = '"k-1"',
) -> Any:
    return pytest.param((body, headers or [], auth, key), status, type_, id=name)


KEY = "urn:onejob:invalid-idempotency-key"
AUTH = "urn:onejob:unauthorized"
JSON = "urn:onejob:malformed-json"
INPUT = "urn:onejob:invalid-input"
ECHO_BODY = b'{"contract": "echo@1", "input": %s}'

REFUSALS = [
    _case("no idempotency key", 400, KEY, key=None),
    _case("empty idempotency key", 400, KEY, key='""'),
    _case("key too long", 400, KEY, key="k" * 256),
    _case("key joined twice", 400, KEY, key='"a", "a"'),
    _case("key on two header lines", 400, KEY, headers=[("Idempotency-Key", '"k-2"')]),
    _case("key in latin-1", 400, KEY, key=None, headers=[("Idempotency-Key", b"caf\xe9")]),
    _case("key in utf-8", 400, KEY, key=None, headers=[("Idempotency-Key", "ключ".encode())]),
    _case("no bearer", 401, AUTH, auth=None),
    _case("wrong bearer", 401, AUTH, auth="wrong"),
    _case(
        "utf-8 bearer", 401, AUTH, auth=None, headers=[("Authorization", "Bearer ключ".encode())]
    ),
    _case("basic auth", 401, AUTH, auth=None, headers=[("Authorization", "Basic YTpi")]),
    _case("malformed json", 400, JSON, body=b'{"contract": '),
    _case("empty body", 400, JSON, body=b""),
    _case("not utf-8", 400, JSON, body=b'{"contract": "\xff"}'),
    _case("NaN", 400, JSON, body=ECHO_BODY % b'{"x": NaN}'),
    _case(
        "duplicate keys", 400, JSON, body=b'{"contract": "echo@1", "contract": "x", "input": {}}'
    ),
    _case("too deep for the parser", 400, JSON, body=b"[" * 50_000 + b"]" * 50_000),
    _case("huge number of digits", 400, JSON, body=ECHO_BODY % (b'{"n": ' + b"1" * 5000 + b"}")),
    _case("too deep", 422, INPUT, body=ECHO_BODY % (b"[" * 100 + b"]" * 100)),
    _case("body is a list", 422, INPUT, body=b"[1, 2]"),
    _case("body is a string", 422, INPUT, body=b'"hello"'),
    _case("owner in body", 422, INPUT, body=b'{"contract": "echo@1", "input": {}, "owner": "b"}'),
    _case("contract not a string", 422, INPUT, body=b'{"contract": 7, "input": {}}'),
    _case("input missing", 422, INPUT, body=b'{"contract": "echo@1"}'),
    _case(
        "provider not a string",
        422,
        INPUT,
        body=b'{"contract": "echo@1", "input": {}, "provider": 3}',
    ),
    _case("integer beyond 2^53", 422, INPUT, body=ECHO_BODY % b'{"n": 9007199254740993}'),
    _case("NUL in a string", 422, INPUT, body=ECHO_BODY % b'{"s": "a\\u0000"}'),
    _case("NUL in a key", 422, INPUT, body=ECHO_BODY % b'{"a\\u0000": 1}'),
    _case("lone surrogate", 422, INPUT, body=ECHO_BODY % b'{"s": "\\ud800"}'),
    _case(
        "input against schema",
        422,
        INPUT,
        body=json.dumps({"contract": TRIAGE, "input": {**TRIAGE_INPUT, "channel": "fax"}}).encode(),
    ),
    _case(
        "unknown contract",
        422,
        "urn:onejob:unknown-contract",
        body=b'{"contract": "no@1", "input": {}}',
    ),
    _case(
        "unknown provider",
        422,
        "urn:onejob:unknown-provider",
        body=b'{"contract": "echo@1", "input": {}, "provider": "nope"}',
    ),
    _case(
        "over 1 MiB",
        413,
        "urn:onejob:payload-too-large",
        body=ECHO_BODY % (b'{"s": "' + b"x" * MIB + b'"}'),
    ),
]


#: ``/v1/jobs`` is answered by the direct route (gateway.http.direct); Litestar's router
#: takes ``/v1/jobs/`` to the same handler: both must refuse alike.
CREATE_PATHS = [
    pytest.param("/v1/jobs", id="direct"),
    pytest.param("/v1/jobs/", id="litestar"),
]


@pytest.mark.parametrize("path", CREATE_PATHS)
@pytest.mark.parametrize(("case", "status", "type_"), REFUSALS)
async def test_a_refused_creation_is_a_problem_and_writes_nothing(
    client: httpx.AsyncClient,
    keys: Any,
    count_rows: Any,
    case: tuple[bytes, list[tuple[str, str | bytes]], str | None, str | None],
    status: int,
    type_: str,
    path: str,
) -> None:
    body, extra, who, key = case
    headers: list[tuple[str, str | bytes]] = [("Content-Type", "application/json")]
    if who is not None:
        secret = getattr(keys, who, who)
        headers.append(("Authorization", f"Bearer {secret}"))
    if key is not None:
        headers.append(("Idempotency-Key", key))
    headers.extend(extra)
    r = await client.post(path, content=body, headers=headers)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["type"] == type_
    assert problem["status"] == status
    assert problem["title"] and problem["detail"]
    if status == 401:
        assert r.headers["www-authenticate"].startswith("Bearer")
    if type_ == "urn:onejob:invalid-input":
        assert isinstance(problem["errors"], list) and problem["errors"]
    assert await count_rows() == (0, 0)


async def test_schema_errors_are_listed_one_by_one(client: httpx.AsyncClient, keys: Any) -> None:
    bad = {**TRIAGE_INPUT, "channel": "fax", "ticket_id": "lower-1"}
    r = await client.post("/v1/jobs", json={"contract": TRIAGE, "input": bad}, headers=keys.job())
    assert r.status_code == 422
    assert len(r.json()["errors"]) == 2


async def test_a_body_of_exactly_the_limit_is_read(client: httpx.AsyncClient, keys: Any) -> None:
    head = b'{"contract": "echo@1", "input": {"s": "'
    tail = b'"}}'
    body = head + b"x" * (MIB - len(head) - len(tail)) + tail
    assert len(body) == MIB
    r = await client.post("/v1/jobs", content=body, headers=keys.job())
    assert r.status_code == 201, r.text[:200]


@pytest.mark.parametrize(
    ("method", "path", "who", "status", "type_"),
    [
        ("GET", "/v1/jobs", None, 401, "urn:onejob:unauthorized"),
        ("GET", "/v1/jobs/job_x", None, 401, "urn:onejob:unauthorized"),
        ("GET", "/v1/contracts", None, 401, "urn:onejob:unauthorized"),
        ("GET", "/v1/admin/attempts?state=unknown", None, 401, "urn:onejob:unauthorized"),
        ("GET", "/v1/admin/attempts?state=unknown", "alice", 403, "urn:onejob:forbidden"),
        ("POST", "/v1/admin/attempts/att_x/resolve", "alice", 403, "urn:onejob:forbidden"),
        ("GET", "/v1/jobs/job_missing", "alice", 404, "urn:onejob:not-found"),
        ("GET", "/v1/nothing-here", "alice", 404, "urn:onejob:not-found"),
        ("DELETE", "/v1/jobs", "alice", 405, "urn:onejob:method-not-allowed"),
        ("GET", "/v1/jobs?limit=0", "alice", 400, "urn:onejob:bad-request"),
        ("GET", "/v1/jobs?limit=101", "alice", 400, "urn:onejob:bad-request"),
        ("GET", "/v1/jobs?limit=ten", "alice", 400, "urn:onejob:bad-request"),
        ("GET", "/v1/jobs?status=weird", "alice", 400, "urn:onejob:bad-request"),
        ("GET", "/v1/jobs?cursor=%%%", "alice", 400, "urn:onejob:bad-request"),
        ("GET", "/v1/jobs?cursor=bm90LWEtam9i", "alice", 400, "urn:onejob:bad-request"),
        ("GET", "/v1/admin/attempts?state=weird", "admin", 400, "urn:onejob:bad-request"),
        ("POST", "/v1/admin/attempts/att_missing/resolve", "admin", 404, "urn:onejob:not-found"),
    ],
)
async def test_other_routes_refuse_with_problems(
    client: httpx.AsyncClient,
    keys: Any,
    count_rows: Any,
    method: str,
    path: str,
    who: str | None,
    status: int,
    type_: str,
) -> None:
    headers = keys.auth(who) if who else {}
    content = b'{"outcome": "failed"}' if method == "POST" else None
    r = await client.request(method, path, headers=headers, content=content)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["type"] == type_
    assert await count_rows() == (0, 0)


async def test_a_revoked_key_is_refused(client: httpx.AsyncClient, store: Any) -> None:
    key_id, secret = await store.create_api_key("carol", frozenset({"jobs"}))
    ok = await client.get("/v1/jobs", headers={"Authorization": f"Bearer {secret}"})
    assert ok.status_code == 200
    assert await store.revoke_api_key(key_id)
    r = await client.get("/v1/jobs", headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 401


async def test_a_database_outage_is_a_503_and_a_bug_is_a_logged_500(
    client: httpx.AsyncClient,
    keys: Any,
    store: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import sqlalchemy.exc

    async def outage(*_: Any, **__: Any) -> Any:
        raise sqlalchemy.exc.OperationalError("INSERT", {}, ConnectionRefusedError("down"))

    # Both ways in: with the key checked by the creating statement (PostgreSQL), or not.
    monkeypatch.setattr(store, "create_or_get", outage)
    monkeypatch.setattr(store, "create_or_get_for_key", outage)
    r = await client.post("/v1/jobs", content=GOOD, headers=keys.job())
    assert r.status_code == 503
    assert r.headers["retry-after"] == "1"
    assert r.json()["type"] == "urn:onejob:unavailable"

    async def bug(*_: Any, **__: Any) -> Any:
        raise KeyError("oops")

    monkeypatch.setattr(store, "create_or_get", bug)
    monkeypatch.setattr(store, "create_or_get_for_key", bug)
    with caplog.at_level(logging.ERROR, logger="onejob.http"):
        r = await client.post("/v1/jobs", content=GOOD, headers=keys.job())
    assert r.status_code == 500
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["type"] == "urn:onejob:internal-error"
    assert "oops" not in r.text
    assert any(rec.exc_info for rec in caplog.records if rec.name == "onejob.http")


@pytest.mark.parametrize(
    "job_id", ["a%00b", "%F0%9F%98%80", "x" * 5000, "job_%27%3B--", "..%2F..%2Fetc"]
)
async def test_ids_that_cannot_exist_are_not_found_without_a_500(
    client: httpx.AsyncClient, keys: Any, job_id: str
) -> None:
    # An encoded slash is refused before routing (400), the others match no job (404).
    expected = 400 if "%2F" in job_id else 404
    for method, path in (
        ("GET", f"/v1/jobs/{job_id}"),
        ("POST", f"/v1/jobs/{job_id}/cancel"),
    ):
        r = await client.request(method, path, headers=keys.auth())
        assert r.status_code == expected, (path[:40], r.text)
    r = await client.post(
        f"/v1/jobs/{job_id}/attempts", json={"provider": "sim-openai"}, headers=keys.auth()
    )
    assert r.status_code == expected, r.text
    r = await client.post(
        f"/v1/admin/attempts/{job_id}/resolve",
        json={"outcome": "failed"},
        headers=keys.auth("admin"),
    )
    assert r.status_code == expected, r.text
