"""The store's database work when PostgreSQL goes silent: creation, claim, lease renewal,
the deciding statement, LISTEN, connecting and readiness.

Each wait ends at its deadline (``DatabaseConfig``: 1 s here) with an error the store
reads as "unavailable", the connection that waited is discarded, and the first try after
the relay heals succeeds at once. A claim whose creating statement got no answer is put
back in the queue, not left to its lease.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from fault_relay import FAST, FaultRelay

from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import ClaimSpec, CreateOutcome, FinalizeOutcome, NewJob
from gateway.domain.states import AttemptState, JobStatus
from gateway.notify import ChangeHub, RelayState, listen_postgres
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store
from gateway.store.failures import DatabaseUnreachable, outcome_unknown
from gateway.store.pg_connections import PostgresConnector
from gateway.store.tables import job_events

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.parametrize(
        "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
    ),
]

#: A wait must end within its deadline plus this (a loaded test machine's scheduling).
SLACK = 1.0  # seconds
CLAIM = ClaimSpec(worker_id="gw-test", lease_ttl=30.0, deadline_s=10.0)


def new_job(key: str) -> NewJob:
    input_ = {"text": key}
    return NewJob(
        owner_id="alice",
        idempotency_key=key,
        fingerprint=fingerprint("echo@1", input_, None),
        contract="echo@1",
        provider="sim-openai",
        requested_provider=None,
        input=input_,
    )


@pytest.fixture
async def store(relayed_url: str) -> AsyncIterator[SqlJobStore]:
    """A store whose every connection goes through the relay."""
    s = await open_store(relayed_url, database=FAST, shortcuts=ShortcutsConfig.from_env())
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def direct(pg_url: str) -> AsyncIterator[SqlJobStore]:
    """A store on the same database, around the relay: what really committed."""
    s = await open_store(
        pg_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        yield s
    finally:
        await s.close()


async def fails_within(store: SqlJobStore, seconds: float, work: Any) -> BaseException:
    """Run ``work``; assert it fails as "database unavailable" within ``seconds``."""
    began = time.monotonic()
    with pytest.raises(Exception) as caught:
        await work
    took = time.monotonic() - began
    assert took < seconds, f"took {took:.2f} s"
    assert store.unavailable(caught.value, "test"), repr(caught.value)
    return caught.value


async def test_a_creation_on_a_silent_database_fails_at_its_deadline_and_the_next_succeeds(
    store: SqlJobStore, relay: FaultRelay
) -> None:
    await store.create_or_get(new_job("warm"))  # a connection in the pool, kept
    relay.silence()
    error = await fails_within(store, FAST.timeout + SLACK, store.create_or_get(new_job("a")))
    assert outcome_unknown(error)  # sent, no answer: it may have committed
    relay.heal()
    began = time.monotonic()
    made = await store.create_or_get(new_job("b"))
    assert made.outcome is CreateOutcome.CREATED
    assert time.monotonic() - began < 0.5  # a fresh connection, not the one that waited


async def test_creations_queued_behind_a_silent_statement_are_answered_by_their_deadline(
    store: SqlJobStore, relay: FaultRelay
) -> None:
    """The batcher keeps one statement on the wire; the ones behind it must not wait for
    its deadline and then their own: each is answered within its own."""
    await store.create_or_get(new_job("warm"))
    relay.silence()
    began = time.monotonic()
    results = await asyncio.gather(
        *(store.create_or_get(new_job(f"q{n}")) for n in range(8)), return_exceptions=True
    )
    assert time.monotonic() - began < FAST.timeout + SLACK
    assert all(isinstance(r, Exception) and store.unavailable(r, "test") for r in results)


async def test_a_claim_whose_creation_got_no_answer_goes_back_to_the_queue(
    store: SqlJobStore, direct: SqlJobStore, relay: FaultRelay
) -> None:
    """The creating statement commits, its answer is lost: the claimed attempt was never
    handed to a runner, so it was never sent. Once the database answers it is released
    back to ``starting`` instead of waiting for its lease to make it ``unknown``."""
    await store.create_or_get(new_job("warm"))
    relay.answers_lost()
    await fails_within(store, FAST.timeout + SLACK, store.create_or_get(new_job("lost"), CLAIM))
    jobs, _ = await direct.list_jobs("alice", status=None, limit=10, cursor=None)
    [job] = [j for j in jobs if j.idempotency_key == "lost"]
    assert job.idempotency_key == "lost"  # it committed
    assert job.attempts[0].state is AttemptState.RUNNING  # claimed, never sent

    assert await store.release_unsent() == []  # still silent: kept for later
    relay.heal()
    released = await store.release_unsent()

    assert released == [job.attempts[0].id]
    again = await direct.get_job(job.id)
    assert again is not None
    assert again.status is JobStatus.QUEUED
    assert again.attempts[0].state is AttemptState.STARTING
    kinds = [e.kind for e in await direct.events(job.id)]
    assert kinds[-1] == "claim_released"
    assert await store.release_unsent() == []  # done once


async def test_a_released_claim_that_the_reaper_made_unknown_goes_back_too(
    store: SqlJobStore, direct: SqlJobStore, relay: FaultRelay
) -> None:
    """A partition longer than the lease: another process's reaper made the never-sent
    attempt ``unknown``. The process that claimed it knows it never left."""
    await store.create_or_get(new_job("warm"))
    relay.answers_lost()
    short = ClaimSpec(worker_id="gw-test", lease_ttl=0.2, deadline_s=10.0)
    await fails_within(store, FAST.timeout + SLACK, store.create_or_get(new_job("long"), short))
    await asyncio.sleep(0.3)
    [reaped] = await direct.reap_expired_leases()
    assert reaped.state is AttemptState.UNKNOWN
    relay.heal()

    assert await store.release_unsent() == [reaped.id]
    job = await direct.get_job(reaped.job_id)
    assert job is not None and job.attempts[0].state is AttemptState.STARTING


async def test_a_claim_on_a_silent_database_fails_at_its_deadline(
    store: SqlJobStore, direct: SqlJobStore, relay: FaultRelay
) -> None:
    await direct.create_or_get(new_job("queued"))
    await store.ping()
    relay.silence()
    claim = store.claim_next_attempt(
        "gw-test", lease_ttl=30.0, deadline_s={}, default_deadline_s=10.0
    )
    await fails_within(store, FAST.timeout + SLACK, claim)
    relay.heal()
    claimed = await store.claim_next_attempt(
        "gw-test", lease_ttl=30.0, deadline_s={}, default_deadline_s=10.0
    )
    assert claimed is not None


async def test_a_lease_renewal_on_a_silent_database_fails_at_its_deadline(
    store: SqlJobStore, relay: FaultRelay
) -> None:
    made = await store.create_or_get(new_job("leased"), CLAIM)
    assert made.claimed is not None
    relay.silence()
    renew = store.renew_lease(made.claimed.attempt.id, "gw-test", lease_ttl=30.0)
    await fails_within(store, FAST.timeout + SLACK, renew)
    relay.heal()
    assert await store.renew_lease(made.claimed.attempt.id, "gw-test", lease_ttl=30.0)


@pytest.mark.parametrize("fault", ["silence", "answers_lost"])
async def test_a_decision_the_database_did_not_answer_is_taken_once_when_tried_again(
    store: SqlJobStore, direct: SqlJobStore, relay: FaultRelay, fault: str
) -> None:
    """The deciding statement gets no answer (it may have committed: ``answers_lost``);
    the dispatcher tries again with the same answer, which wins exactly once."""
    made = await store.create_or_get(new_job("decide"), CLAIM)
    assert made.claimed is not None
    attempt_id = made.claimed.attempt.id
    getattr(relay, fault)()
    error = await fails_within(
        store, FAST.timeout + SLACK, store.finalize(attempt_id, {"answer": 42})
    )
    assert outcome_unknown(error)
    relay.heal()

    again = await store.finalize(attempt_id, {"answer": 42})

    assert again.outcome is FinalizeOutcome.WON
    job = await direct.get_job(made.job.id)
    assert job is not None and job.completed_by == attempt_id and job.version == 2
    async with direct.engine.connect() as conn:
        kinds = (
            await conn.execute(
                sa.select(job_events.c.kind).where(job_events.c.job_id == made.job.id)
            )
        ).scalars()
        assert list(kinds).count("attempt_succeeded") == 1


async def test_a_new_connection_to_a_silent_database_fails_at_the_connect_deadline(
    relayed_url: str, relay: FaultRelay
) -> None:
    relay.silence()
    store = await open_store(relayed_url, database=FAST, shortcuts=ShortcutsConfig.from_env())
    try:
        error = await fails_within(
            store, FAST.connect_timeout + SLACK, store.create_or_get(new_job("cold"))
        )
        assert not outcome_unknown(error)  # nothing could be sent
    finally:
        await store.close()


async def test_a_multi_host_url_skips_a_silent_host_within_its_connect_timeout(
    pg_url: str, relay: FaultRelay
) -> None:
    """asyncpg spends one timeout on all hosts; the connector gives each its own, and
    tries the one that answered first next time."""
    from sqlalchemy.engine import make_url

    url = make_url(pg_url)
    multi = url.set(
        host=None,
        port=None,
        query={
            "host": (f"127.0.0.1:{relay.port}", f"{url.host}:{url.port}"),
            "target_session_attrs": "read-write",
        },
    ).render_as_string(hide_password=False)
    relay.silence()
    connector = PostgresConnector(multi, FAST)
    began = time.monotonic()
    conn = await connector.connect()
    try:
        assert time.monotonic() - began < FAST.connect_timeout + SLACK
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()
    began = time.monotonic()
    conn = await connector.connect()  # the host that answered goes first now
    await conn.close()
    assert time.monotonic() - began < 0.5


async def test_no_host_taking_a_connection_is_database_unreachable(relay: FaultRelay) -> None:
    relay.silence()
    connector = PostgresConnector(
        f"postgresql+asyncpg://postgres@127.0.0.1:{relay.port}/test", FAST
    )
    with pytest.raises(DatabaseUnreachable):
        await connector.connect()


async def test_readiness_answers_within_a_second_and_recovers_at_once(
    store: SqlJobStore, relay: FaultRelay
) -> None:
    await store.ping()
    relay.silence()
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        await store.ping(0.9)
    assert time.monotonic() - began < 0.9 + 0.3
    relay.heal()
    began = time.monotonic()
    await store.ping(0.9)
    assert time.monotonic() - began < 0.5


async def test_the_listen_relay_notices_a_silent_connection_and_comes_back(
    relayed_url: str, direct: SqlJobStore, relay: FaultRelay
) -> None:
    """LISTEN sits idle: without its own check a silent peer is never noticed. Back, it
    makes every waiter re-read (what changed meanwhile was not announced)."""
    hub, stop, state = ChangeHub(), asyncio.Event(), RelayState()
    connector = PostgresConnector(relayed_url, FAST)
    task = asyncio.create_task(listen_postgres(connector.connect, hub, stop, state))
    try:
        await until(lambda: state.connected, 5.0)
        made = await direct.create_or_get(new_job("watched"))
        with hub.watch(made.job.id) as watch:
            relay.silence()
            await until(lambda: not state.connected, 6.0)  # a check: 2 s apart, 2 s each
            await direct.cancel(made.job.id)  # announced to nobody here
            relay.heal()
            await until(lambda: state.connected, 5.0)
            assert await watch.wait(1.0)
            assert watch.take() == (None, True)  # re-read
        assert state.reconnects == 1
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_the_listen_relay_survives_any_error_of_its_connection(
    relayed_url: str, relay: FaultRelay
) -> None:
    hub, stop, state = ChangeHub(), asyncio.Event(), RelayState()
    connector = PostgresConnector(relayed_url, FAST)
    task = asyncio.create_task(listen_postgres(connector.connect, hub, stop, state))
    try:
        await until(lambda: state.connected, 5.0)
        relay.cut()  # a reset: the connection is gone at once
        await until(lambda: state.reconnects == 1 and state.connected, 8.0)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert not task.exception()


async def until(condition: Any, seconds: float) -> None:
    """Wait until ``condition()`` holds, at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_a_checkout_cancelled_mid_ping_answers_by_the_statements_deadline(
    relayed_url: str, relay: FaultRelay, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle pooled connection is pinged at checkout; when the statement's deadline
    comes before the ping's, the checkout is cancelled mid-ping (``by_deadline``) and the
    connection dropped at once: NotSent at the deadline. Closed gracefully instead (the
    pool's invalidation), it held the answer 2 s more on a silent network."""
    from gateway.settings import DatabaseConfig
    from gateway.store import engine as engine_module
    from gateway.store import pg_bare
    from gateway.store.failures import NotSent

    monkeypatch.setattr(engine_module, "IDLE_PING_AFTER", 0.2)
    monkeypatch.setattr(pg_bare, "IDLE_PING_AFTER", 0.2)
    monkeypatch.setattr(engine_module, "PING_TIMEOUT", 5.0)
    store = await open_store(
        relayed_url, database=DatabaseConfig(timeout=5.0), shortcuts=ShortcutsConfig.from_env()
    )
    try:
        await store.db.alone("SELECT 1", [])
        await asyncio.sleep(0.3)  # idle long enough to be pinged at its next checkout
        relay.silence()
        began = time.monotonic()
        with pytest.raises(NotSent):
            await store.db.alone("SELECT 1", [], timeout=0.5)
        took = time.monotonic() - began
        assert took < 0.5 + 0.5, f"answered after {took:.2f} s"
    finally:
        relay.heal()
        await store.close()
