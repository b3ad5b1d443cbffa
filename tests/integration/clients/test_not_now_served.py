"""The Python client against a served gateway when a provider, or the gateway, says not now
(issue 43): a rate-limited job waits and says why, the fallback button supersedes a waiting
attempt, a job's own deadline, and a full queue retried into one job.

Each module has its own gateway: what one provider's "not now" teaches the gateway (a
pause) must not slow the other modules' jobs.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from onejob_client import (
    AttemptAdded,
    AttemptState,
    Client,
    Created,
    Intention,
    InvalidInput,
    Job,
    JobStatus,
    QueueFull,
    RetryPolicy,
    ServerSentEvent,
    Unavailable,
)
from served_gateway import CONTRACT, Stack, served_stack

pytestmark = pytest.mark.slow

TICKET = {
    "ticket_id": "SUP-42",
    "channel": "email",
    "customer": {"name": "Priya", "plan": "pro"},
    "subject": "Charged twice",
    "body": "My card was charged twice for March.",
}
FAST = RetryPolicy(deadline=20.0, initial_backoff=0.05, max_backoff=0.2)


def at(timestamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def test_deadline_s_is_the_first_tries_and_a_retry_with_another_replays_the_job(
    fresh: Stack,
) -> None:
    intention = Intention.new(CONTRACT, TICKET)
    with Client(fresh.gateway, fresh.key, policy=FAST) as onejob:
        created = onejob.create_job(intention, deadline_s=30)
        # Not part of the fingerprint: another deadline, or none, is the same request.
        again = onejob.create_job(intention, deadline_s=5)
        plain = onejob.create_job(intention)
        job = onejob.wait(created.job.id, timeout=20)
        with pytest.raises(InvalidInput):  # more than the route's job_deadline_s (600 s)
            onejob.create_job(Intention.new(CONTRACT, TICKET), deadline_s=601)

    assert created.status_code == 201 and created.job.deadline_at is not None
    lasts = at(created.job.deadline_at) - at(created.job.raw["created_at"])
    assert lasts == dt.timedelta(seconds=30)
    assert again.replayed and plain.replayed
    assert again.job.id == plain.job.id == created.job.id
    assert again.job.deadline_at == plain.job.deadline_at == created.job.deadline_at
    assert job.status is JobStatus.SUCCEEDED and job.deadline_at == created.job.deadline_at


def test_a_rate_limited_job_waits_says_why_and_is_sent_again_under_the_same_key(
    fresh: Stack,
) -> None:
    fresh.sim_script("sim-openai", {"kind": "status", "code": 429, "retry_after": 2})
    seen: list[Job] = []
    events: list[ServerSentEvent] = []
    with Client(fresh.gateway, fresh.key) as onejob:
        job = onejob.run(
            Intention.new(CONTRACT, TICKET), timeout=30, on_job=seen.append, on_event=events.append
        )

    assert job.status is JobStatus.SUCCEEDED
    waiting = [j for j in seen if j.waiting is not None]
    assert waiting, [j.status for j in seen]
    first = waiting[0]
    assert first.status is JobStatus.QUEUED and not first.settled  # not failed, not settled
    assert first.waiting is not None
    assert (first.waiting.provider, first.waiting.reason) == ("sim-openai", "rate_limited")
    assert first.waiting.until is not None
    assert first.attempts[0].state is AttemptState.WAITING
    assert first.attempts[0].ready_at == first.waiting.until
    assert "attempt_waiting" in [e.event for e in events]
    # One attempt, which waited once; the provider was called twice with the same key.
    (attempt,) = job.attempts
    assert attempt.state is AttemptState.SUCCEEDED and attempt.waits == 1
    calls = fresh.sim_calls(job.id)
    assert [c["idempotency_key"] for c in calls] == [f"{job.id}/1"] * 2


def test_the_fallback_button_supersedes_an_attempt_waiting_for_its_provider(
    fresh: Stack,
) -> None:
    fresh.sim_script("sim-openai", {"kind": "status", "code": 429, "retry_after": 4})
    with Client(fresh.gateway, fresh.key) as onejob:
        created = onejob.create_job(Intention.new(CONTRACT, TICKET))
        job = created.job
        deadline = time.monotonic() + 10
        while job.waiting is None and time.monotonic() < deadline:
            job = onejob.get_job(job.id, wait=1)
        assert job.waiting is not None, job
        outcome = onejob.fallback(job.id, "sim-anthropic")
        assert isinstance(outcome, AttemptAdded)  # not "still in progress": nothing is out
        done = onejob.wait(job.id, timeout=20)

    assert done.status is JobStatus.SUCCEEDED and done.completed_by == outcome.attempt_id
    first, manual = done.attempts
    assert first.state is AttemptState.CANCELLED and first.error is not None
    assert first.error.get("reason") == "superseded"
    assert (manual.provider, manual.reason) == ("sim-anthropic", "manual")
    providers = [c["provider"] for c in fresh.sim_calls(done.id)]
    assert providers == ["sim-openai", "sim-anthropic"]  # the waiting one was never sent again


def test_a_job_whose_deadline_passes_while_it_waits_fails_with_job_deadline(
    fresh: Stack,
) -> None:
    not_now = {"kind": "status", "code": 429, "retry_after": 3}
    fresh.sim_script("sim-openai", not_now)
    fresh.sim_script("sim-anthropic", not_now)
    with Client(fresh.gateway, fresh.key) as onejob:
        job = onejob.run(Intention.new(CONTRACT, TICKET), timeout=30, deadline_s=1)

    assert job.status is JobStatus.FAILED
    assert job.deadline_passed and job.failure_reason == "job_deadline", job.error


# -- a full queue ----------------------------------------------------------------------------

#: A gateway that sends nothing (no dispatcher) and refuses new jobs past one unsent one,
#: counted every 50 ms, with Retry-After: 1.
HELD_DISPATCHER = "enabled = false"
ONE_QUEUED = """
[admission]
max_queued = 1
interval = 0.05
retry_after = 1
"""


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with served_stack(
        tmp_path_factory.mktemp("held"), dispatcher=HELD_DISPATCHER, extra=ONE_QUEUED
    ) as running:
        yield running


def test_a_full_queue_refuses_new_jobs_until_it_drains_and_the_retry_makes_one_job(
    held: Stack,
) -> None:
    first = Intention.new(CONTRACT, TICKET)
    second = Intention.new(CONTRACT, {**TICKET, "ticket_id": "SUP-43"})
    with Client(held.gateway, held.key, policy=FAST) as onejob:
        queued = onejob.create_job(first)
        assert queued.status_code == 201 and queued.job.status is JobStatus.QUEUED
        time.sleep(0.5)  # ten counts of the queue: it holds one unsent job now

        # A replay is still answered; a new job is refused, and nothing is made.
        assert onejob.create_job(first).replayed
        short = RetryPolicy(deadline=2.5)
        with Client(held.gateway, held.key, policy=short) as hurried:
            with pytest.raises(QueueFull) as raised:
                hurried.create_job(second)
        assert isinstance(raised.value, Unavailable)
        assert raised.value.last_status == 503 and raised.value.tries >= 2
        assert held.job_ids() == {queued.job.id}

        # The same intention, retried while the queue drains, makes its one job.
        result: dict[str, Any] = {}

        def create() -> None:
            try:
                result["created"] = onejob.create_job(second)
            except Exception as exc:  # pragma: no cover - reported below
                result["error"] = exc

        sender = threading.Thread(target=create)
        sender.start()
        time.sleep(1.5)  # refused at least once meanwhile
        assert held.cancel(queued.job.id)["status"] == "cancelled"
        sender.join(20)

    assert "error" not in result, result
    created: Created = result["created"]
    assert created.status_code == 201 and created.tries >= 2
    assert held.job_ids() == {queued.job.id, created.job.id}
    assert httpx.get(f"{held.gateway}/readyz").status_code == 200
