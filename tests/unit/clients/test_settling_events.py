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
    [
        "job_created",
        "attempt_created",
        "attempt_running",
        "attempt_waiting",
        "replayed",
        "attempt_refused",
        "failover_skipped",
    ],
)
def test_events_that_never_settle_a_job_do_not_read_it(kind: str) -> None:
    assert not may_have_settled(audit(kind))


def test_a_skipped_failover_as_the_gateway_writes_it_does_not_read_the_job() -> None:
    # docs/api.md: one per configured fallback the registry refused, after the failure.
    detail = {"fallback": "sim-anthropic", "primary": "sim-openai", "reason": "suspended"}
    data = {"id": 7, "kind": "failover_skipped", "attempt_id": "att_1", "detail": detail}
    assert not may_have_settled(ServerSentEvent("failover_skipped", json.dumps(data), "7"))


def test_a_provider_saying_not_now_as_the_gateway_writes_it_does_not_read_the_job() -> None:
    # gateway/store/waits.py: the provider's error, then until when and how many waits.
    detail = {
        "outcome": "definite",
        "reason": "rate_limited",
        "capacity": "rate_limited",
        "retry_after_s": 2.0,
        "until": "2026-12-07T07:00:02Z",
        "waits": 1,
    }
    data = {"id": 4, "kind": "attempt_waiting", "attempt_id": "att_1", "detail": detail}
    assert not may_have_settled(ServerSentEvent("attempt_waiting", json.dumps(data), "4"))


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
