"""A runner's claim that commits while its answer is lost: never sent, so never ``unknown``.

Seen in the ``database-failover`` scenario: a runner's ``claim_next_attempt`` commits on
the primary as the primary is demoted (a switchover) or dies (a SIGKILL), and the answer
never comes back. The runner never got the attempt, so it never called the provider; the
attempt stays ``running`` under the runner's lease, and when the lease expires a reaper
makes it ``unknown``: an operator is asked to resolve a call that never left. The claim a
creating statement makes is put back in the queue in that case (``never_sent``,
``release_unsent``, ``claim_released``); this one must be too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from fault_relay import FAST, FaultRelay

from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import ClaimSpec, NewJob
from gateway.domain.states import AttemptState
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.parametrize(
        "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
    ),
]

SLACK = 1.0  # seconds past its deadline a wait may take on a loaded machine
LEASE = 0.2  # seconds: the lease expires while the answer is held


def new_job(key: str) -> NewJob:
    """Return a job of ``echo@1`` for alice under the key."""
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


async def test_a_claim_whose_answer_was_lost_goes_back_to_the_queue_not_to_unknown(
    store: SqlJobStore, direct: SqlJobStore, relay: FaultRelay
) -> None:
    # A pooled connection, answered; its attempt claimed at once, so not the one taken.
    await store.create_or_get(new_job("warm"), ClaimSpec("gw-warm", 30.0, 10.0))
    made = await direct.create_or_get(new_job("queued"))  # ``starting``, for any runner
    assert made.job is not None

    def lose_the_commits_answer(_conn: object) -> None:
        relay.answers_lost()  # the COMMIT goes out and commits; its answer is held

    sa.event.listen(store.engine.sync_engine, "commit", lose_the_commits_answer)
    began = time.monotonic()
    try:
        with pytest.raises(Exception) as caught:
            await store.claim_next_attempt(
                "gw-test", lease_ttl=LEASE, deadline_s={}, default_deadline_s=10.0
            )
    finally:
        sa.event.remove(store.engine.sync_engine, "commit", lose_the_commits_answer)
    assert time.monotonic() - began < FAST.timeout + SLACK
    assert store.unavailable(caught.value, "test"), repr(caught.value)
    job = await direct.get_job(made.job.id)
    assert job is not None
    assert job.attempts[0].state is AttemptState.RUNNING  # it committed: claimed, not sent
    assert job.attempts[0].lease_owner == "gw-test"

    await asyncio.sleep(LEASE + 0.1)
    await direct.reap_expired_leases()  # another process's reaper, as in the scenario
    relay.heal()
    await store.release_unsent()  # what the dispatcher runs once the database answers

    job = await direct.get_job(made.job.id)
    assert job is not None
    assert job.attempts[0].state is AttemptState.STARTING
    kinds = [e.kind for e in await direct.events(job.id)]
    assert "claim_released" in kinds
