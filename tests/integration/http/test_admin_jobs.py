"""An admin's view of every owner's jobs (``GET /v1/admin/jobs``), and a listing's refused
query parameter named in its 400."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

ECHO = "echo@1"


async def make(client: httpx.AsyncClient, keys: Any, who: str, n: int) -> str:
    r = await client.post(
        "/v1/jobs",
        json={"contract": ECHO, "input": {"n": n}},
        headers=keys.job(who, key=f'"{who}-{n}"'),
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def test_an_admin_lists_every_owners_jobs_newest_first_a_page_at_a_time(
    client: httpx.AsyncClient, keys: Any
) -> None:
    made = [
        await make(client, keys, "alice", 1),
        await make(client, keys, "bob", 2),
        await make(client, keys, "alice", 3),
    ]
    first = await client.get("/v1/admin/jobs", params={"limit": "2"}, headers=keys.auth("admin"))
    assert first.status_code == 200, first.text
    page = first.json()
    assert [j["id"] for j in page["jobs"]] == made[:0:-1]  # newest first
    assert [j["owner"] for j in page["jobs"]] == ["alice", "bob"]
    assert page["jobs"][0]["attempts"], "a listed job carries its attempts"
    second = await client.get(
        "/v1/admin/jobs",
        params={"limit": "2", "cursor": page["next_cursor"]},
        headers=keys.auth("admin"),
    )
    assert second.status_code == 200, second.text
    assert [j["id"] for j in second.json()["jobs"]] == made[:1]
    assert second.json()["next_cursor"] is None

    # The owner route still answers an admin with its own jobs only (none here).
    own = await client.get("/v1/jobs", headers=keys.auth("admin"))
    assert own.json()["jobs"] == []


async def test_the_admin_listing_filters_by_status_and_refuses_a_forged_cursor(
    client: httpx.AsyncClient, keys: Any
) -> None:
    job_id = await make(client, keys, "bob", 1)
    cancelled = await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.auth("bob"))
    assert cancelled.status_code == 200, cancelled.text
    await make(client, keys, "alice", 2)
    listed = await client.get(
        "/v1/admin/jobs", params={"status": "cancelled"}, headers=keys.auth("admin")
    )
    assert [j["id"] for j in listed.json()["jobs"]] == [job_id]
    forged = await client.get(
        "/v1/admin/jobs", params={"cursor": "am9iX25vbmU"}, headers=keys.auth("admin")
    )
    assert forged.status_code == 400, forged.text


async def test_every_owners_jobs_need_the_admin_scope(client: httpx.AsyncClient, keys: Any) -> None:
    await make(client, keys, "bob", 1)
    r = await client.get("/v1/admin/jobs", headers=keys.auth("alice"))
    assert r.status_code == 403, r.text
    assert r.json()["type"] == "urn:onejob:forbidden"
    assert (await client.get("/v1/admin/jobs")).status_code == 401


@pytest.mark.parametrize(
    ("path", "params", "named"),
    [
        ("/v1/jobs", {"owner": "", "limit": "2"}, ["owner"]),
        ("/v1/jobs", {"limit": "abc"}, ["limit"]),
        ("/v1/jobs", {"owner": "", "limit": "0"}, ["owner", "limit"]),
        ("/v1/admin/jobs", {"limit": "101"}, ["limit"]),
        ("/v1/admin/attempts", {"limit": "x"}, ["limit"]),
    ],
    ids=["empty owner", "limit not a number", "both", "admin limit too big", "attempts limit"],
)
async def test_a_refused_query_parameter_is_named_in_the_problem(
    client: httpx.AsyncClient,
    keys: Any,
    path: str,
    params: dict[str, str],
    named: list[str],
) -> None:
    r = await client.get(path, params=params, headers=keys.auth("admin"))
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["type"] == "urn:onejob:bad-request"
    assert sorted(p["name"] for p in problem["invalid_params"]) == sorted(named)
    assert {p["in"] for p in problem["invalid_params"]} == {"query"}
    for name in named:
        assert f"{name}: " in problem["detail"], problem
    if params.get("owner") == "":
        assert "owner: empty: leave owner out rather than send it empty" in problem["detail"]
