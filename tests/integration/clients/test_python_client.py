"""The Python client against a served gateway, through a forwarder that drops connections
and answers 503: however many tries, one intention makes one job and one provider call."""

from __future__ import annotations

import hashlib

import pytest
from faulty_forwarder import FaultyServer
from onejob_client import (
    AsyncClient,
    AttemptState,
    Client,
    Intention,
    InvalidInput,
    JobStatus,
    KeyReused,
    RetryPolicy,
    StillInProgress,
    Unavailable,
)
from served_gateway import CONTRACT, Stack

pytestmark = pytest.mark.slow

TICKET = {
    "ticket_id": "SUP-42",
    "channel": "email",
    "customer": {"name": "Priya", "plan": "pro"},
    "subject": "Charged twice",
    "body": "My card was charged twice for March.",
}
FAST = RetryPolicy(deadline=20.0, initial_backoff=0.05, max_backoff=0.2)
#: The first answer is lost after the gateway made the job, then two 503s, then a reset
#: before the gateway, then the request goes through: five tries, one job.
FAULTS = ("reset_after", "unavailable", "unavailable", "reset_before")


def one_job_one_call(stack: Stack, before: set[str], job_id: str) -> None:
    """Assert the test made exactly ``job_id``, and the provider was called once for it."""
    assert stack.job_ids() - before == {job_id}
    calls = stack.sim_calls()
    assert [c["idempotency_key"] for c in calls] == [f"{job_id}/1"], calls


def same_key_and_body(proxy: FaultyServer, intention: Intention, tries: int) -> None:
    seen = proxy.faults.requests("POST", "/v1/jobs")
    assert len(seen) == tries
    assert {s.key for s in seen} == {f'"{intention.key}"'}
    assert {hashlib.sha256(s.body).hexdigest() for s in seen} == {
        hashlib.sha256(intention.body).hexdigest()
    }


def test_resets_and_503s_are_retried_with_one_key_into_one_job(
    fresh: Stack, proxy: FaultyServer
) -> None:
    before = fresh.job_ids()
    proxy.faults.script("POST", "/v1/jobs", *FAULTS)
    intention = Intention.new(CONTRACT, TICKET)
    with Client(proxy.url, fresh.key, policy=FAST) as onejob:
        created = onejob.create_job(intention)
        job = onejob.wait(created.job.id, timeout=20)

    assert created.tries == 5
    # The first try made the job; the fifth got it back.
    assert created.replayed and created.status_code == 200
    assert job.status is JobStatus.SUCCEEDED
    same_key_and_body(proxy, intention, 5)
    assert [s.done for s in proxy.faults.requests("POST", "/v1/jobs")] == [*FAULTS, "forwarded"]
    one_job_one_call(fresh, before, job.id)


async def test_the_async_client_keeps_one_key_through_the_same_faults(
    fresh: Stack, proxy: FaultyServer
) -> None:
    before = fresh.job_ids()
    proxy.faults.script("POST", "/v1/jobs", *FAULTS)
    intention = Intention.new(CONTRACT, TICKET)
    async with AsyncClient(proxy.url, fresh.key, policy=FAST) as onejob:
        job = await onejob.run(intention, timeout=20)

    assert job.status is JobStatus.SUCCEEDED
    same_key_and_body(proxy, intention, 5)
    one_job_one_call(fresh, before, job.id)


def test_a_restarted_caller_resumes_its_stored_intention_into_the_same_job(
    fresh: Stack, proxy: FaultyServer
) -> None:
    before = fresh.job_ids()
    stored = Intention.new(CONTRACT, TICKET).to_json()  # written before the first request
    proxy.faults.script("POST", "/v1/jobs", "reset_after")
    dies = RetryPolicy(deadline=0.5, initial_backoff=1.0)  # gives up after the first try
    with Client(proxy.url, fresh.key, policy=dies) as onejob, pytest.raises(Unavailable):
        onejob.create_job(Intention.from_json(stored))  # the process "dies" here
    with Client(proxy.url, fresh.key) as onejob:
        created = onejob.create_job(Intention.from_json(stored))
        job = onejob.wait(created.job.id, timeout=20)
    assert created.replayed
    one_job_one_call(fresh, before, job.id)


def test_a_different_body_with_the_same_intention_key_raises_key_reused(fresh: Stack) -> None:
    before = fresh.job_ids()
    intention = Intention.new(CONTRACT, TICKET)
    other = {**TICKET, "subject": "Charged three times"}
    changed = Intention.new(CONTRACT, other, key=intention.key)
    with Client(fresh.gateway, fresh.key) as onejob:
        job = onejob.run(intention, timeout=20)
        with pytest.raises(KeyReused) as raised:
            onejob.create_job(changed)
        assert raised.value.job_id == job.id
        assert raised.value.status == 409
        assert onejob.get_job(job.id) == job  # the existing job is not changed
    one_job_one_call(fresh, before, job.id)


def test_invalid_input_is_not_retried_and_names_the_schema_errors(
    fresh: Stack, proxy: FaultyServer
) -> None:
    with Client(proxy.url, fresh.key, policy=FAST) as onejob, pytest.raises(InvalidInput) as raised:
        onejob.create_job(Intention.new(CONTRACT, {"ticket_id": "SUP-42"}))
    assert any("'subject' is a required property" in e for e in raised.value.errors)
    assert len(proxy.faults.requests("POST", "/v1/jobs")) == 1


def test_503s_past_the_deadline_raise_unavailable_and_the_same_intention_later_makes_one_job(
    fresh: Stack, proxy: FaultyServer
) -> None:
    before = fresh.job_ids()
    proxy.faults.unavailable_for(60)
    intention = Intention.new(CONTRACT, TICKET)
    with Client(proxy.url, fresh.key, policy=RetryPolicy(deadline=2.5)) as onejob:
        with pytest.raises(Unavailable) as raised:
            onejob.create_job(intention)
        assert raised.value.last_status == 503
        assert raised.value.outcome == "not_done"
        # Retry-After: 1 s, so two or three tries fit in 2.5 s.
        assert raised.value.tries in (2, 3)
        proxy.faults.unavailable_for(0)
        created = onejob.create_job(intention)
        job = onejob.wait(created.job.id, timeout=20)
    assert created.status_code == 201  # no 503 had reached the gateway
    same_key_and_body(proxy, intention, raised.value.tries + 1)
    one_job_one_call(fresh, before, job.id)


def test_the_fallback_button_while_the_first_attempt_is_unknown_says_wait(fresh: Stack) -> None:
    before = fresh.job_ids()
    fresh.sim_script("sim-openai", {"kind": "hang"})
    with Client(fresh.gateway, fresh.key) as onejob:
        job = onejob.run(Intention.new(CONTRACT, TICKET), timeout=20)
        assert job.status is JobStatus.UNKNOWN
        assert onejob.streams  # waited on the gateway's event stream
        outcome = onejob.fallback(job.id, "sim-anthropic")
        again = onejob.fallback(job.id, "sim-anthropic")

    assert isinstance(outcome, StillInProgress)
    assert outcome == again
    assert outcome.attempt_id == job.attempts[0].id
    assert outcome.attempt_state is AttemptState.UNKNOWN
    one_job_one_call(fresh, before, job.id)
    assert fresh.sim_calls()[0]["provider"] == "sim-openai"
