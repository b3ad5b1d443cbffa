"""The clients over ``httpx.MockTransport``: what each answer becomes, and what is retried.

The sync and the async client read answers with the same code (``protocol``); each test
runs both, through one scripted gateway.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from onejob_client import (
    AsyncClient,
    AttemptAdded,
    AttemptInProgress,
    AttemptState,
    CapacityWait,
    Client,
    FallbackNotCertified,
    Intention,
    InvalidInput,
    Job,
    JobClosed,
    JobStatus,
    KeyReused,
    NotFound,
    ProblemError,
    QueueFull,
    RetryPolicy,
    StillInProgress,
    Unauthorized,
    Unavailable,
    is_decided,
)

BASE = "http://onejob.test"
INTENTION = Intention.new("ticket-triage@1", {"ticket_id": "SUP-42"})


def job(status: str = "queued", **more: Any) -> dict[str, Any]:
    attempt = {
        "id": "att_1",
        "number": 1,
        "provider": "sim-openai",
        "reason": "initial",
        "state": {"queued": "starting", "unknown": "unknown"}.get(status, "succeeded"),
        "error": None,
        "started_at": None,
        "finished_at": None,
    }
    return {
        "id": "job_1",
        "owner": "alice",
        "idempotency_key": INTENTION.key,
        "contract": "ticket-triage@1",
        "provider": "sim-openai",
        "status": status,
        "version": 1,
        "completed_by": None,
        "result": None,
        "error": None,
        "created_at": "2026-12-04T00:00:00.000Z",
        "updated_at": "2026-12-04T00:00:00.000Z",
        "attempts": [attempt],
        **more,
    }


def problem(status: int, kind: str, **more: Any) -> httpx.Response:
    body = {"type": f"urn:onejob:{kind}", "title": kind, "status": status, "detail": kind, **more}
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json"})


class Gateway:
    """Answer requests from a script, and keep what was sent."""

    def __init__(self, *answers: httpx.Response | Exception | Callable[[], Any]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        answer = self.answers.pop(0)
        if callable(answer):  # a fresh response per request: each is read once
            answer = answer()
        if isinstance(answer, Exception):
            raise answer
        return answer


class Both:
    """Run one scenario on the sync and on the async client."""

    def __init__(self, policy: RetryPolicy | None = None) -> None:
        self.policy = policy or RetryPolicy(deadline=30.0)
        self.slept: list[float] = []
        self.now = 1000.0  #: the clients' clock: only their sleeps move it

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now

    def sync(self, gateway: Gateway) -> Client:
        http = httpx.Client(transport=httpx.MockTransport(gateway))
        return Client(
            BASE, "oj_key", policy=self.policy, http=http, sleep=self.sleep, clock=self.clock
        )

    def asynchronous(self, gateway: Gateway) -> AsyncClient:
        http = httpx.AsyncClient(transport=httpx.MockTransport(gateway))

        async def sleep(seconds: float) -> None:
            self.sleep(seconds)

        return AsyncClient(
            BASE, "oj_key", policy=self.policy, http=http, sleep=sleep, clock=self.clock
        )


@pytest.fixture(params=["sync", "async"])
def call(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Return ``call(gateway, method, *args, both=None)``: one client method's result."""

    async def call_(
        gateway: Gateway, method: str, *args: Any, both: Both | None = None, **kw: Any
    ) -> Any:
        both = both or Both()
        if request.param == "sync":
            return getattr(both.sync(gateway), method)(*args, **kw)
        return await getattr(both.asynchronous(gateway), method)(*args, **kw)

    return call_


async def test_503s_and_dropped_connections_are_retried_with_the_same_key_and_body(
    call: Callable[..., Any],
) -> None:
    gateway = Gateway(
        problem(503, "unavailable", outcome="unknown"),
        httpx.ReadError("connection reset"),
        httpx.Response(429, headers={"retry-after": "2"}),
        httpx.Response(502),
        httpx.ConnectTimeout("timed out"),
        httpx.Response(200, json=job(), headers={"idempotent-replayed": "true"}),
    )
    both = Both()
    created = await call(gateway, "create_job", INTENTION, both=both)
    assert created.replayed and created.status_code == 200 and created.tries == 6
    assert created.job.id == "job_1" and created.job.status is JobStatus.QUEUED
    assert {r.headers["idempotency-key"] for r in gateway.requests} == {f'"{INTENTION.key}"'}
    assert {r.content for r in gateway.requests} == {INTENTION.body}
    assert all(r.headers["authorization"] == "Bearer oj_key" for r in gateway.requests)
    assert len(both.slept) == 5 and 2.0 <= both.slept[2] <= 2.1  # Retry-After, + jitter


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (lambda: problem(409, "idempotency-key-reused", job_id="job_0"), KeyReused),
        (lambda: problem(422, "invalid-input", errors=["(root): 'x' is required"]), InvalidInput),
        (lambda: problem(401, "unauthorized"), Unauthorized),
        (lambda: problem(404, "not-found"), NotFound),
        (lambda: problem(500, "internal-error"), ProblemError),
        (lambda: httpx.Response(400, text="not json"), ProblemError),
    ],
)
async def test_refusals_are_typed_and_never_retried(
    call: Callable[..., Any], answer: Callable[[], httpx.Response], error: type[Exception]
) -> None:
    gateway = Gateway(answer)
    with pytest.raises(error) as raised:
        await call(gateway, "create_job", INTENTION)
    assert len(gateway.requests) == 1
    if isinstance(raised.value, KeyReused):
        assert raised.value.job_id == "job_0"
    if isinstance(raised.value, InvalidInput):
        assert raised.value.errors == ["(root): 'x' is required"]


async def test_unavailable_past_the_deadline_says_how_many_tries_and_what_came_back(
    call: Callable[..., Any],
) -> None:
    gateway = Gateway(*[lambda: problem(503, "unavailable", outcome="not_done")] * 10)
    both = Both(RetryPolicy(deadline=0.05, initial_backoff=0.1))
    with pytest.raises(Unavailable) as raised:
        await call(gateway, "create_job", INTENTION, both=both)
    assert (raised.value.tries, raised.value.last_status) == (1, 503)
    assert raised.value.outcome == "not_done"


async def test_the_fallback_button_reports_still_in_progress_instead_of_failing(
    call: Callable[..., Any],
) -> None:
    blocked = problem(409, "attempt-in-progress", attempt_id="att_1", attempt_state="unknown")
    outcome = await call(Gateway(blocked), "fallback", "job_1", "sim-anthropic")
    assert outcome == StillInProgress("job_1", "att_1", AttemptState.UNKNOWN, "attempt-in-progress")
    with pytest.raises(AttemptInProgress) as raised:
        await call(Gateway(blocked), "request_attempt", "job_1", "sim-anthropic")
    assert (raised.value.attempt_id, raised.value.attempt_state) == ("att_1", "unknown")

    added = httpx.Response(202, json={**job("failed"), "attempt_id": "att_2"})
    gateway = Gateway(added)
    outcome = await call(gateway, "fallback", "job_1", "sim-anthropic")
    assert isinstance(outcome, AttemptAdded) and outcome.attempt_id == "att_2"
    assert json.loads(gateway.requests[0].content) == {"provider": "sim-anthropic"}
    assert gateway.requests[0].url.path == "/v1/jobs/job_1/attempts"

    for refusal, error in [
        (problem(409, "job-closed"), JobClosed),
        (problem(422, "fallback-not-certified"), FallbackNotCertified),
    ]:
        with pytest.raises(error):
            await call(Gateway(refusal), "fallback", "job_1", "sim-anthropic")


async def test_without_an_event_stream_the_wait_polls_with_prefer_wait(
    call: Callable[..., Any],
) -> None:
    gateway = Gateway(
        httpx.Response(200, json={"job_id": "job_1", "events": []}),  # today's events path
        httpx.Response(200, json=job("running")),
        httpx.Response(200, json=job("unknown")),
    )
    done: Job = await call(gateway, "wait", "job_1", timeout=30)
    assert done.status is JobStatus.UNKNOWN and done.settled
    assert done.blocking_attempt is not None and done.blocking_attempt.id == "att_1"
    events, *polls = gateway.requests
    assert events.headers["accept"] == "text/event-stream"
    # The polls ask for what is left of the 30 s (a few ms less than 30: 29).
    assert [p.headers["prefer"] for p in polls] in (["wait=29"] * 2, ["wait=30"] * 2)


async def test_polling_an_unknown_job_until_it_is_decided_waits_between_polls(
    call: Callable[..., Any],
) -> None:
    gateway = Gateway(
        lambda: httpx.Response(200, json={"job_id": "job_1", "events": []}),
        lambda: httpx.Response(200, json=job("unknown")),
        lambda: httpx.Response(200, json=job("unknown")),
        lambda: httpx.Response(200, json=job("succeeded")),
    )
    both = Both()
    done: Job = await call(gateway, "wait", "job_1", timeout=30, until=is_decided, both=both)
    assert done.status is JobStatus.SUCCEEDED
    assert both.slept == [1.0, 1.0]  # Prefer: wait answers unknown at once: no tight loop


# A provider's "not now" (issue 43): jobs that wait, deadlines, a full queue.


def waiting_job() -> dict[str, Any]:
    """A job whose provider said not now, as the gateway shows it: queued, and why."""
    waiting = job("queued", deadline_at="2026-12-04T00:10:00.000Z")
    waiting["attempts"][0].update(
        state="waiting",
        error={"reason": "rate_limited", "capacity": "rate_limited", "retry_after_s": 20.0},
        ready_at="2026-12-04T00:00:20.000Z",
        waits=1,
    )
    waiting["waiting"] = {
        "attempt_id": "att_1",
        "provider": "sim-openai",
        "reason": "rate_limited",
        "until": "2026-12-04T00:00:20.000Z",
        "waits": 1,
    }
    return waiting


async def test_a_job_waiting_for_its_providers_capacity_says_why_and_until_when(
    call: Callable[..., Any],
) -> None:
    read: Job = await call(Gateway(httpx.Response(200, json=waiting_job())), "get_job", "job_1")
    assert read.status is JobStatus.QUEUED and not read.settled
    (attempt,) = read.attempts
    assert attempt.state is AttemptState.WAITING
    assert (attempt.ready_at, attempt.waits) == ("2026-12-04T00:00:20.000Z", 1)
    assert read.waiting == CapacityWait(
        "att_1", "sim-openai", "rate_limited", "2026-12-04T00:00:20.000Z", 1
    )
    assert read.deadline_at == "2026-12-04T00:10:00.000Z"
    # Nothing of a waiting attempt is in flight: the fallback button may supersede it.
    assert read.blocking_attempt is None


def test_a_job_from_a_gateway_older_than_capacity_waits_still_reads() -> None:
    old = job("running")  # no deadline_at, waiting, ready_at or waits
    read = Job.from_json(old)
    assert (read.deadline_at, read.waiting) == (None, None)
    assert (read.attempts[0].ready_at, read.attempts[0].waits) == (None, 0)


def test_a_job_failed_by_its_deadline_is_told_from_a_provider_failure() -> None:
    deadline = {"outcome": "definite", "reason": "job_deadline", "message": "too late"}
    expired = Job.from_json(job("failed", error=deadline))
    assert expired.deadline_passed and expired.failure_reason == "job_deadline"
    broken = Job.from_json(job("failed", error={"outcome": "definite", "reason": "http_500"}))
    assert not broken.deadline_passed and broken.failure_reason == "http_500"
    assert Job.from_json(job("queued", error=deadline)).failure_reason is None  # reopened


def queue_full() -> httpx.Response:
    body = {
        "type": "urn:onejob:queue-full",
        "title": "Queue full",
        "status": 503,
        "detail": "2 jobs are waiting to be sent (the limit is 1); nothing was created.",
    }
    headers = {"content-type": "application/problem+json", "retry-after": "5"}
    return httpx.Response(503, json=body, headers=headers)


async def test_a_full_queue_is_retried_after_its_retry_after_then_the_job_is_made(
    call: Callable[..., Any],
) -> None:
    gateway = Gateway(queue_full, queue_full, lambda: httpx.Response(201, json=job()))
    both = Both()
    created = await call(gateway, "create_job", INTENTION, both=both)
    assert created.status_code == 201 and created.tries == 3 and not created.replayed
    assert len(both.slept) == 2 and all(5.0 <= s <= 5.1 for s in both.slept)  # Retry-After
    assert {r.headers["idempotency-key"] for r in gateway.requests} == {f'"{INTENTION.key}"'}
    assert {r.content for r in gateway.requests} == {INTENTION.body}


async def test_a_queue_still_full_when_the_retries_run_out_raises_queue_full(
    call: Callable[..., Any],
) -> None:
    gateway = Gateway(*[queue_full] * 5)
    both = Both(RetryPolicy(deadline=12.0))
    with pytest.raises(QueueFull) as raised:
        await call(gateway, "create_job", INTENTION, both=both)
    # An Unavailable like any other: the intention is still good, later, with its key.
    assert isinstance(raised.value, Unavailable)
    assert (raised.value.tries, raised.value.last_status, raised.value.outcome) == (3, 503, None)
    assert len(both.slept) == 2  # 5 s + 5 s fit in 12 s, a third wait does not

    # The database's 503 after a full queue's is an Unavailable, not a QueueFull.
    unavailable = problem(503, "unavailable", outcome="not_done")
    unavailable.headers["retry-after"] = "1"
    gateway = Gateway(queue_full, unavailable)
    with pytest.raises(Unavailable) as raised:
        await call(gateway, "create_job", INTENTION, both=Both(RetryPolicy(deadline=6.0)))
    assert type(raised.value) is Unavailable and raised.value.outcome == "not_done"


async def test_deadline_s_is_sent_in_the_body_the_same_on_every_try(
    call: Callable[..., Any],
) -> None:
    gateway = Gateway(queue_full, lambda: httpx.Response(201, json=job()))
    await call(gateway, "create_job", INTENTION, deadline_s=30, both=Both())
    first, second = gateway.requests
    assert first.content == second.content
    sent = json.loads(first.content)
    assert sent == {**json.loads(INTENTION.body), "deadline_s": 30}
    assert first.headers["idempotency-key"] == f'"{INTENTION.key}"'

    gateway = Gateway(lambda: httpx.Response(201, json=job("succeeded")))
    await call(gateway, "run", INTENTION, deadline_s=12.5)
    assert json.loads(gateway.requests[0].content)["deadline_s"] == 12.5
    gateway = Gateway(lambda: httpx.Response(201, json=job("succeeded")))
    await call(gateway, "run", INTENTION)
    assert gateway.requests[0].content == INTENTION.body  # none asked: the intention's bytes


@pytest.mark.parametrize("deadline_s", [0, -1, float("inf"), float("nan"), True])
async def test_a_deadline_that_is_not_a_positive_number_is_refused_before_sending(
    call: Callable[..., Any], deadline_s: float
) -> None:
    gateway = Gateway()
    with pytest.raises(ValueError, match="deadline_s"):
        await call(gateway, "create_job", INTENTION, deadline_s=deadline_s)
    assert gateway.requests == []
