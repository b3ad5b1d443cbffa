"""The job event stream: ``GET /v1/jobs/{id}/events`` with ``Accept: text/event-stream``.

Over a real socket (the stream is sent as it comes): the job's audit events, each with its
id, and the job as it is; every later change; the end when the job is done. A client that
resumes with ``Last-Event-ID`` gets only what it has not seen. A change another gateway
process makes reaches the stream too (its NOTIFY on PostgreSQL, a re-read on SQLite).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from litestar import Litestar

from gateway.service.following import Change

BODY = {"contract": "echo@1", "input": {"n": 1}}
STREAM = {"Accept": "text/event-stream"}


async def events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Decode the stream's messages (``event``, ``id``, ``data`` parsed) as they come."""
    message: dict[str, Any] = {}
    async for line in response.aiter_lines():
        if not line:
            if message:
                yield message
            message = {}
        elif line.startswith(":"):
            message.setdefault("comment", line[1:].strip())
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            message[field] = json.loads(value) if field == "data" else value


async def create(http: httpx.AsyncClient, keys: Any, key: str = '"es-1"') -> str:
    made = await http.post("/v1/jobs", json=BODY, headers=keys.job(key=key))
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


@contextlib.asynccontextmanager
async def serving(
    served: Callable[[Litestar], contextlib.AbstractAsyncContextManager[str]], app: Litestar
) -> AsyncIterator[httpx.AsyncClient]:
    async with served(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        yield http


async def test_the_stream_sends_the_events_the_job_and_each_change_until_the_job_is_done(
    app: Litestar, keys: Any, served: Any
) -> None:
    async with serving(served, app) as http:
        job_id = await create(http, keys)
        seen: list[dict[str, Any]] = []
        async with http.stream(
            "GET", f"/v1/jobs/{job_id}/events", headers={**keys.auth(), **STREAM}
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            async for message in events(response):
                seen.append(message)
                if message.get("event") == "job" and message["data"]["status"] == "queued":
                    cancelled = await http.post(f"/v1/jobs/{job_id}/cancel", headers=keys.auth())
                    assert cancelled.status_code == 200, cancelled.text
    kinds = [m.get("event") for m in seen if "event" in m]
    assert kinds[:2] == ["job_created", "attempt_created"]
    assert "job_cancelled" in kinds
    jobs = [m["data"] for m in seen if m.get("event") == "job"]
    assert [j["status"] for j in jobs] == ["queued", "cancelled"]  # then the stream ended
    ids = [int(m["id"]) for m in seen if "id" in m]
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    # The reconnection delay rides on the first event, which carries an id too: a stream
    # cut after its first chunk leaves the client something to resume after.
    assert seen[0]["retry"] == "1000" and "id" in seen[0]
    assert not any("retry" in m for m in seen[1:])


async def test_last_event_id_resumes_after_the_event_it_names(
    app: Litestar, keys: Any, served: Any
) -> None:
    async with serving(served, app) as http:
        job_id = await create(http, keys)
        await http.post(f"/v1/jobs/{job_id}/cancel", headers=keys.auth())
        everything = await http.get(f"/v1/jobs/{job_id}/events", headers=keys.auth())
        first = everything.json()["events"][0]["id"]
        headers = {**keys.auth(), **STREAM, "Last-Event-ID": str(first)}
        async with http.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers) as response:
            resumed = [m async for m in events(response)]
        # The JSON answer honours it too: the same events past the one named.
        later = await http.get(
            f"/v1/jobs/{job_id}/events", headers={**keys.auth(), "Last-Event-ID": str(first)}
        )
    ids = [int(m["id"]) for m in resumed if "id" in m]
    assert ids and min(ids) > first
    assert len(ids) == len(everything.json()["events"]) - 1
    assert [e["id"] for e in later.json()["events"]] == ids


async def test_a_bad_last_event_id_is_400_and_anothers_job_404(
    app: Litestar, keys: Any, served: Any
) -> None:
    async with serving(served, app) as http:
        job_id = await create(http, keys)
        # Not an id, signed, beyond a 64-bit integer (a 500 on PostgreSQL if it got through)
        for value in ("yesterday", "-1", "+1", "1.0", "9" * 19):
            for accept in (STREAM, {}):  # as a stream or as JSON
                bad = await http.get(
                    f"/v1/jobs/{job_id}/events",
                    headers={**keys.auth(), **accept, "Last-Event-ID": value},
                )
                assert bad.status_code == 400, value
                assert bad.headers["content-type"].startswith("application/problem+json")
        theirs = await http.get(f"/v1/jobs/{job_id}/events", headers={**keys.auth("bob"), **STREAM})
        assert theirs.status_code == 404


async def test_a_change_made_by_another_gateway_reaches_the_stream(
    app: Litestar, keys: Any, served: Any, second_gateway: Any
) -> None:
    async with serving(served, app) as http, second_gateway() as other_base:
        job_id = await create(http, keys)
        got_cancel = asyncio.Event()

        async def follow() -> list[dict[str, Any]]:
            seen = []
            headers = {**keys.auth(), **STREAM}
            async with http.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers) as r:
                async for message in events(r):
                    seen.append(message)
                    if message.get("event") == "job_cancelled":
                        got_cancel.set()
            return seen

        following = asyncio.create_task(follow())
        await asyncio.sleep(0.5)
        async with httpx.AsyncClient(base_url=other_base, timeout=30) as other:
            cancelled = await other.post(f"/v1/jobs/{job_id}/cancel", headers=keys.auth())
            assert cancelled.status_code == 200
        await asyncio.wait_for(got_cancel.wait(), 5)
        seen = await asyncio.wait_for(following, 5)
    assert seen[-1]["event"] == "job" and seen[-1]["data"]["status"] == "cancelled"


async def test_silence_is_broken_by_keep_alives(app: Litestar, keys: Any, client: Any) -> None:
    """At the service: a job that does not change gets keep-alives, then the stream ends."""
    job_id = await create(client, keys)
    service = app.state.service
    job = await service.store.get_job(job_id)
    changes: list[Change] = [c async for c in service.follow(job, limit=2.5, heartbeat=1.0)]
    keep_alives = [c for c in changes if c.event is None and c.job is None]
    assert changes[0].event is not None and len(keep_alives) >= 1


async def test_the_openapi_document_says_the_route_also_streams(
    client: httpx.AsyncClient,
) -> None:
    doc = (await client.get("/schema/openapi.json")).json()
    operation = doc["paths"]["/v1/jobs/{job_id}/events"]["get"]
    content = operation["responses"]["200"]["content"]
    assert set(content) == {"application/json", "text/event-stream"}
    assert "Last-Event-ID" in content["text/event-stream"]["schema"]["description"]
    headers = {p["name"] for p in operation["parameters"] if p["in"] == "header"}
    assert {"Accept", "Last-Event-ID"} <= headers


async def test_a_keep_alive_is_a_comment_alone() -> None:
    """No data line: an EventSource dispatches a message for any data line, even empty."""
    from gateway.http.event_stream import _messages

    async def silence() -> AsyncIterator[Change]:
        yield Change(event=None, job=None)

    [message] = [m async for m in _messages(silence())]
    assert message.encode() == b": keep-alive\r\n\r\n"
