"""Waiting on a job's event stream, against a stub gateway of our own on a real socket.

The stub serves ``GET /v1/jobs/job_1/events`` as ``text/event-stream``, the way the
gateway will (issue 39): events with ids, comments as heartbeats, the stream closed when
the job is decided. Each connection does what the test scripts: send some events, then
drop (a TCP reset), close, hang silent, or stay open. The clients must resume with
``Last-Event-ID`` and return as soon as an event says the job settled.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import onejob_client.async_client
import onejob_client.client
import pytest
from faulty_forwarder import serving
from onejob_client import AsyncClient, Client, JobStatus, ServerSentEvent, is_decided

JOB_ID = "job_1"
Plan = Callable[["StubHandler"], None]


def job(status: str) -> dict[str, Any]:
    return {
        "id": JOB_ID,
        "owner": "alice",
        "idempotency_key": "k",
        "contract": "ticket-triage@1",
        "provider": "sim-openai",
        "status": status,
        "version": 2 if status == "succeeded" else 1,
        "completed_by": "att_1" if status == "succeeded" else None,
        "result": {"category": "billing"} if status == "succeeded" else None,
        "error": None,
        "created_at": "2026-12-04T00:00:00.000Z",
        "updated_at": "2026-12-04T00:00:00.000Z",
        "attempts": [],
    }


def event(event_id: int, kind: str, **detail: Any) -> bytes:
    data = json.dumps({"id": event_id, "kind": kind, "detail": detail})
    return f"id: {event_id}\nevent: {kind}\ndata: {data}\n\n".encode()


class StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, plans: list[Plan]) -> None:
        super().__init__(("127.0.0.1", 0), StubHandler)
        self.plans = plans
        self.status = "running"
        self.last_event_ids: list[str | None] = []  #: per stream connection
        self.job_reads = 0
        self.release = threading.Event()  # lets "stay open" plans end with the test

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is expected here."""


class StubHandler(BaseHTTPRequestHandler):
    server: StubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == f"/v1/jobs/{JOB_ID}/events":
            assert self.headers["Accept"] == "text/event-stream"
            assert self.headers["Authorization"] == "Bearer oj_key"
            self.server.last_event_ids.append(self.headers.get("Last-Event-ID"))
            self.server.plans.pop(0)(self)
        elif self.path == f"/v1/jobs/{JOB_ID}":
            self.server.job_reads += 1
            body = json.dumps(job(self.server.status)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_error(404)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def send(self, *chunks: bytes) -> None:
        for chunk in chunks:
            self.wfile.write(chunk)
            self.wfile.flush()

    def drop(self) -> None:
        """Reset the connection, as a dropped network would."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()


def events_then_drop(handler: StubHandler) -> None:
    handler.start_stream()
    handler.send(
        b"retry: 50\n\n",
        event(1, "job_created"),
        b": heartbeat\n\n",
        event(2, "attempt_running", worker="gw-1"),
    )
    time.sleep(0.05)
    handler.drop()


def events_then_close(handler: StubHandler) -> None:
    """A clean end of the stream while the job is still running (the gateway restarted)."""
    handler.start_stream()
    handler.send(event(1, "job_created"), event(2, "attempt_running"))


def silent(handler: StubHandler) -> None:
    handler.start_stream()
    handler.send(b": heartbeat\n\n")
    handler.server.release.wait(10)


def decided_and_open(handler: StubHandler) -> None:
    """The deciding event; the stream stays open: the client must not wait for its end."""
    handler.server.status = "succeeded"
    handler.start_stream()
    handler.send(event(3, "attempt_succeeded"), b'event: status\ndata: {"status": "succeeded"}\n\n')
    handler.server.release.wait(10)


@pytest.fixture
def stub() -> Iterator[Callable[..., StubServer]]:
    servers: list[StubServer] = []

    def start(*plans: Plan) -> StubServer:
        server = StubServer(list(plans))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.release.set()
        server.shutdown()
        server.server_close()


def wait_sync(server: StubServer, seen: list[ServerSentEvent]) -> tuple[Any, float]:
    started = time.monotonic()
    with Client(server.url, "oj_key") as onejob:
        done = onejob.wait(JOB_ID, timeout=10, on_event=seen.append)
        assert onejob.streams
    return done, time.monotonic() - started


async def wait_async(server: StubServer, seen: list[ServerSentEvent]) -> tuple[Any, float]:
    started = time.monotonic()
    async with AsyncClient(server.url, "oj_key") as onejob:
        done = await onejob.wait(JOB_ID, timeout=10, on_event=seen.append)
        assert onejob.streams
    return done, time.monotonic() - started


@pytest.fixture(params=["sync", "async"])
def wait(request: pytest.FixtureRequest) -> Callable[..., Any]:
    async def wait_(server: StubServer, seen: list[ServerSentEvent]) -> tuple[Any, float]:
        if request.param == "sync":
            return wait_sync(server, seen)
        return await wait_async(server, seen)

    return wait_


async def test_a_dropped_stream_is_resumed_after_the_last_event_id(
    stub: Callable[..., StubServer], wait: Callable[..., Any]
) -> None:
    server = stub(events_then_drop, decided_and_open)
    seen: list[ServerSentEvent] = []
    done, took = await wait(server, seen)

    assert done.status is JobStatus.SUCCEEDED
    assert server.last_event_ids == [None, "2"]
    assert [(e.id, e.event) for e in seen][:3] == [
        ("1", "job_created"),
        ("2", "attempt_running"),
        ("3", "attempt_succeeded"),
    ]
    assert seen[2].json()["kind"] == "attempt_succeeded"
    # Back within the stream's own retry (50 ms), not a default second; and out as soon
    # as the deciding event came, with the stream still open.
    assert took < 1.0


async def test_a_stream_closed_before_the_job_settled_is_reopened(
    stub: Callable[..., StubServer], wait: Callable[..., Any]
) -> None:
    server = stub(events_then_close, decided_and_open)
    done, _ = await wait(server, [])
    assert done.status is JobStatus.SUCCEEDED
    assert server.last_event_ids == [None, "2"]


async def test_a_silent_stream_is_taken_for_dead_and_reopened(
    stub: Callable[..., StubServer], wait: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (onejob_client.client, onejob_client.async_client):
        monkeypatch.setattr(module, "STREAM_SILENCE", 0.3)
    server = stub(silent, decided_and_open)
    done, took = await wait(server, [])
    assert done.status is JobStatus.SUCCEEDED
    assert server.last_event_ids == [None, None]  # nothing had an id yet
    assert 0.3 <= took < 3.0


def events_one_by_one(handler: StubHandler) -> None:
    handler.start_stream()
    handler.send(event(1, "job_created"))
    time.sleep(0.2)
    handler.send(event(2, "attempt_running"))
    handler.server.release.wait(10)


def resumed_after_one(handler: StubHandler) -> None:
    assert handler.headers.get("Last-Event-ID") == "1"
    handler.server.status = "succeeded"
    handler.start_stream()
    handler.send(event(2, "attempt_running"), event(3, "attempt_succeeded"))
    handler.server.release.wait(10)


def test_a_stream_cut_by_the_network_is_resumed_through_the_forwarder(
    stub: Callable[..., StubServer],
) -> None:
    server = stub(events_one_by_one, resumed_after_one)
    seen: list[ServerSentEvent] = []
    with serving(server.url, None) as proxy:
        proxy.faults.script("GET", f"/v1/jobs/{JOB_ID}/events", "cut_stream")
        with Client(proxy.url, "oj_key") as onejob:
            done = onejob.wait(JOB_ID, timeout=10, on_event=seen.append)
        streams = proxy.faults.requests("GET", f"/v1/jobs/{JOB_ID}/events")
    assert done.status is JobStatus.SUCCEEDED
    assert [e.id for e in seen] == ["1", "2", "3"]  # each event once
    assert [(s.done, s.last_event_id) for s in streams] == [
        ("cut_stream", None),
        ("forwarded", "1"),
    ]


def job_event(status: str) -> bytes:
    return f"event: job\ndata: {json.dumps(job(status))}\n\n".encode()


def unknown_then_resolved(handler: StubHandler) -> None:
    """The gateway's own shape: audit events, then the job after each change."""
    handler.start_stream()
    handler.send(event(1, "attempt_running"), job_event("running"))
    time.sleep(0.1)
    handler.server.status = "unknown"
    handler.send(event(2, "attempt_unknown"), job_event("unknown"))
    handler.server.release.wait(0.4)  # an operator resolves it a moment later
    handler.server.status = "succeeded"
    handler.send(event(3, "attempt_resolved"), job_event("succeeded"))
    handler.server.release.wait(10)


async def test_the_job_comes_with_the_stream_and_until_follows_an_unknown_job(
    stub: Callable[..., StubServer],
) -> None:
    server = stub(unknown_then_resolved, unknown_then_resolved)
    statuses: list[JobStatus] = []
    with Client(server.url, "oj_key") as onejob:
        first = onejob.wait(JOB_ID, timeout=10, on_job=lambda j: statuses.append(j.status))
    async with AsyncClient(server.url, "oj_key") as onejob_async:
        server.status = "running"
        decided = await onejob_async.wait(JOB_ID, timeout=10, until=is_decided)

    assert first.status is JobStatus.UNKNOWN  # settled: the default stops here
    assert statuses == [JobStatus.RUNNING, JobStatus.UNKNOWN]
    assert decided.status is JobStatus.SUCCEEDED  # followed through unknown
    assert server.job_reads == 0  # every job came with the stream: none was read
    assert server.last_event_ids == [None, None]


def waiting_job() -> dict[str, Any]:
    """The job while its provider's "not now" lasts: queued, its attempt waiting."""
    attempt = {
        "id": "att_1",
        "number": 1,
        "provider": "sim-openai",
        "reason": "initial",
        "state": "waiting",
        "error": {"reason": "rate_limited", "capacity": "rate_limited"},
        "started_at": None,
        "finished_at": None,
        "ready_at": "2026-12-04T00:00:02.000Z",
        "waits": 1,
    }
    waiting = {
        "attempt_id": "att_1",
        "provider": "sim-openai",
        "reason": "rate_limited",
        "until": "2026-12-04T00:00:02.000Z",
        "waits": 1,
    }
    return {**job("queued"), "attempts": [attempt], "waiting": waiting}


def provider_says_not_now(handler: StubHandler) -> None:
    """Audit events only (no ``event: job``): the attempt waits, then runs and succeeds."""
    handler.start_stream()
    handler.send(
        event(1, "attempt_running"),
        event(2, "attempt_waiting", capacity="rate_limited", until="2026-12-04T00:00:02Z"),
    )
    time.sleep(0.2)
    handler.server.status = "succeeded"
    handler.send(event(3, "attempt_running"), event(4, "attempt_succeeded"))
    handler.server.release.wait(10)


async def test_a_provider_saying_not_now_does_not_wake_the_waiter(
    stub: Callable[..., StubServer], wait: Callable[..., Any]
) -> None:
    server = stub(provider_says_not_now)
    seen: list[ServerSentEvent] = []
    done, _ = await wait(server, seen)
    assert done.status is JobStatus.SUCCEEDED
    assert [e.event for e in seen] == [
        "attempt_running",
        "attempt_waiting",
        "attempt_running",
        "attempt_succeeded",
    ]
    assert server.job_reads == 1  # after attempt_succeeded only, not after attempt_waiting


def waiting_then_succeeded(handler: StubHandler) -> None:
    """The gateway's own shape: the job after each change, a waiting one among them."""
    handler.start_stream()
    handler.send(
        event(1, "attempt_waiting"), f"event: job\ndata: {json.dumps(waiting_job())}\n\n".encode()
    )
    time.sleep(0.1)
    handler.server.status = "succeeded"
    handler.send(event(2, "attempt_succeeded"), job_event("succeeded"))
    handler.server.release.wait(10)


async def test_a_waiting_job_comes_with_the_stream_saying_why_and_until_when(
    stub: Callable[..., StubServer],
) -> None:
    server = stub(waiting_then_succeeded)
    jobs: list[Any] = []
    async with AsyncClient(server.url, "oj_key") as onejob:
        done = await onejob.wait(JOB_ID, timeout=10, on_job=jobs.append)
    assert done.status is JobStatus.SUCCEEDED
    first = jobs[0]
    assert first.status is JobStatus.QUEUED and first.attempts[0].state.value == "waiting"
    assert first.waiting is not None and first.waiting.reason == "rate_limited"
    assert first.waiting.until == "2026-12-04T00:00:02.000Z"
    assert server.job_reads == 0  # every job came with the stream and was read from it
