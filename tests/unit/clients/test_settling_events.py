"""Which stream events make the waiter read the job: any that may have settled it."""

from __future__ import annotations

import json

import pytest
from onejob_client import ServerSentEvent
from onejob_client.protocol import may_have_settled


def audit(kind: str) -> ServerSentEvent:
    return ServerSentEvent(kind, json.dumps({"id": 1, "kind": kind, "detail": {}}), "1")


@pytest.mark.parametrize(
    "kind",
    ["job_created", "attempt_created", "attempt_running", "replayed", "attempt_refused"],
)
def test_events_that_never_settle_a_job_do_not_read_it(kind: str) -> None:
    assert not may_have_settled(audit(kind))


@pytest.mark.parametrize(
    "kind",
    ["attempt_unknown", "attempt_succeeded", "job_failed", "job_cancelled", "a_new_kind"],
)
def test_deciding_and_unfamiliar_events_read_the_job(kind: str) -> None:
    assert may_have_settled(audit(kind))


@pytest.mark.parametrize(
    ("data", "settles"),
    [
        ({"status": "running"}, False),
        ({"status": "unknown"}, True),
        ({"job": {"status": "succeeded"}}, True),
        ({"job_status": "queued", "kind": "attempt_succeeded"}, False),
    ],
)
def test_an_event_naming_the_status_is_believed(data: dict[str, object], settles: bool) -> None:
    assert may_have_settled(ServerSentEvent("status", json.dumps(data))) is settles
