"""Every answer is what the OpenAPI document says it is: its struct, no field more or less."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import pytest
from litestar import Litestar

from gateway.http import schemas
from gateway.store import SqlJobStore

ECHO = "echo@1"
LEASE = {"lease_ttl": 30.0, "deadline_s": {}, "default_deadline_s": 30.0}


def documented_struct(app: Litestar, method: str, path: str, status: int) -> type[Any]:
    """Return the response struct the document names for this operation and status."""
    doc: dict[str, Any] = app.openapi_schema.to_schema()
    answer = doc["paths"][path][method]["responses"][str(status)]
    ref: str = answer["content"]["application/json"]["schema"]["$ref"]
    struct: type[Any] = getattr(schemas, ref.rsplit("/", 1)[-1])
    return struct


def conforms(app: Litestar, method: str, path: str, r: httpx.Response) -> Any:
    """Convert the answer to its documented struct (unknown or missing fields fail)."""
    struct = documented_struct(app, method, path, r.status_code)
    try:
        return msgspec.convert(r.json(), struct, strict=True)
    except msgspec.ValidationError as exc:
        pytest.fail(f"{method.upper()} {path} {r.status_code} is not {struct.__name__}: {exc}")


async def test_every_success_answer_is_the_struct_its_route_documents(
    app: Litestar, client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    body = {"contract": ECHO, "input": {"n": 1}}
    created = await client.post("/v1/jobs", json=body, headers=keys.job(key='"k-1"'))
    assert created.status_code == 201, created.text
    job = conforms(app, "post", "/v1/jobs", created)
    replay = await client.post("/v1/jobs", json=body, headers=keys.job(key='"k-1"'))
    assert replay.status_code == 200
    conforms(app, "post", "/v1/jobs", replay)

    reads = [
        ("/v1/jobs/{job_id}", f"/v1/jobs/{job.id}", keys.auth()),
        ("/v1/jobs/{job_id}/events", f"/v1/jobs/{job.id}/events", keys.auth()),
        ("/v1/jobs", "/v1/jobs?limit=1", keys.auth()),
        ("/v1/contracts", "/v1/contracts", keys.auth()),
        ("/v1/certifications", "/v1/certifications", keys.auth()),
        ("/v1/me", "/v1/me", keys.auth()),
        ("/v1/admin/jobs/{job_id}", f"/v1/admin/jobs/{job.id}", keys.auth("admin")),
        ("/v1/admin/jobs/{job_id}/events", f"/v1/admin/jobs/{job.id}/events", keys.auth("admin")),
        ("/healthz", "/healthz", {}),
        ("/readyz", "/readyz", {}),
    ]
    for template, url, headers in reads:
        r = await client.get(url, headers=headers)
        assert r.status_code == 200, (url, r.text)
        conforms(app, "get", template, r)

    first = job.attempts[0].id
    await store.claim_next_attempt("w1", **LEASE)
    await store.mark_unknown(first, {"reason": "timeout"})
    listed = await client.get("/v1/admin/attempts?state=unknown", headers=keys.auth("admin"))
    assert [a.id for a in conforms(app, "get", "/v1/admin/attempts", listed).attempts] == [first]
    resolved = await client.post(
        f"/v1/admin/attempts/{first}/resolve",
        json={"outcome": "failed"},
        headers=keys.auth("admin"),
    )
    assert resolved.status_code == 200, resolved.text
    conforms(app, "post", "/v1/admin/attempts/{attempt_id}/resolve", resolved)
    added = await client.post(
        f"/v1/jobs/{job.id}/attempts", json={"provider": "sim-openai"}, headers=keys.auth()
    )
    assert added.status_code == 202, added.text
    assert conforms(app, "post", "/v1/jobs/{job_id}/attempts", added).attempt_id is not None
    cancelled = await client.post(f"/v1/jobs/{job.id}/cancel", headers=keys.auth())
    assert cancelled.status_code == 200, cancelled.text
    assert conforms(app, "post", "/v1/jobs/{job_id}/cancel", cancelled).status == "cancelled"


async def test_a_job_with_a_field_its_struct_does_not_declare_is_refused_by_the_struct() -> None:
    answer = {"id": "j", "owner": "o", "idempotency_key": "k", "contract": ECHO}
    answer |= {"provider": "p", "status": "queued", "version": 1, "completed_by": None}
    answer |= {"result": None, "error": None, "created_at": None, "updated_at": None}
    answer |= {"deadline_at": None, "waiting": None, "trace": None}
    assert msgspec.convert({**answer, "attempts": []}, schemas.JobView).status == "queued"
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({**answer, "attempts": [], "extra": 1}, schemas.JobView)
    with pytest.raises(msgspec.ValidationError, match="attempts"):
        msgspec.convert(answer, schemas.JobView)
    with pytest.raises(msgspec.ValidationError, match="status"):
        msgspec.convert({**answer, "attempts": [], "status": "lost"}, schemas.JobView)
