"""The clients waiting on the gateway's own event stream, end to end.

``GET /v1/jobs/{id}/events`` with ``Accept: text/event-stream`` answers Server-Sent Events
(``gateway.http.event_stream``); the Python client follows it, and resumes it with
``Last-Event-ID`` after a drop.
"""

from __future__ import annotations

import httpx
import pytest
from faulty_forwarder import FaultyServer
from onejob_client import Client, Intention, JobStatus, ServerSentEvent
from served_gateway import CONTRACT, Stack

pytestmark = pytest.mark.slow

TICKET = {
    "ticket_id": "SUP-42",
    "channel": "email",
    "customer": {"name": "Priya", "plan": "pro"},
    "subject": "Charged twice",
    "body": "My card was charged twice for March.",
}


def test_the_client_waits_on_the_event_stream_and_resumes_it_after_a_drop(
    fresh: Stack, proxy: FaultyServer
) -> None:
    fresh.sim_script("sim-openai", {"kind": "delay", "seconds": 2})
    with Client(proxy.url, fresh.key) as onejob:
        job = onejob.create_job(Intention.new(CONTRACT, TICKET)).job
        path = f"/v1/jobs/{job.id}/events"
        with httpx.stream(
            "GET",
            fresh.gateway + path,
            headers={"Authorization": f"Bearer {fresh.key}", "Accept": "text/event-stream"},
            timeout=10,
        ) as probe:
            assert probe.headers["content-type"].startswith("text/event-stream")

        # The first stream is cut after its first event: the client resumes after the
        # last id it read, and sees every event once.
        proxy.faults.script("GET", path, "cut_stream")
        seen: list[ServerSentEvent] = []
        statuses: list[JobStatus] = []
        done = onejob.wait(
            job.id, timeout=20, on_event=seen.append, on_job=lambda j: statuses.append(j.status)
        )
        assert onejob.streams

    assert done.status is JobStatus.SUCCEEDED
    streams = proxy.faults.requests("GET", path)
    assert [s.done for s in streams][:2] == ["cut_stream", "forwarded"]
    # A `job` snapshot has no id field of its own: it carries the last event id (WHATWG),
    # so only the audit events count.
    ids = [e.id for e in seen if e.id and e.event != "job"]
    assert ids and len(ids) == len(set(ids))
    # Resumed after an event it had read (whatever the first chunk held), none seen twice.
    assert streams[0].last_event_id is None and streams[1].last_event_id in ids
    # The job came with the stream (event: job), running, then succeeded.
    assert statuses[0] in (JobStatus.QUEUED, JobStatus.RUNNING)
    assert statuses[-1] is JobStatus.SUCCEEDED
    assert len(fresh.sim_calls(job.id)) == 1
