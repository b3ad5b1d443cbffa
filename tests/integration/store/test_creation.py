"""R2 at the store: the UNIQUE constraint decides, never a read before the insert."""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa

from gateway.domain.records import CreateOutcome
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store
from gateway.store.tables import attempts, job_events, jobs


async def count(store: SqlJobStore, table: sa.Table) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar_one())


async def test_new_job_gets_one_starting_initial_attempt(store: SqlJobStore, make_job: Any) -> None:
    result = await store.create_or_get(make_job())
    assert result.outcome is CreateOutcome.CREATED
    job = result.job
    assert job.status is JobStatus.QUEUED and job.version == 1 and job.completed_by is None
    [attempt] = job.attempts
    assert attempt.state is AttemptState.STARTING
    assert attempt.reason is AttemptReason.INITIAL
    assert attempt.number == 1
    assert attempt.downstream_key == f"{job.id}/1"
    kinds = [e.kind for e in await store.events(job.id)]
    assert kinds == ["job_created", "attempt_created"]


async def test_fifty_concurrent_identical_creations_make_one_job(
    store: SqlJobStore, make_job: Any
) -> None:
    results = await asyncio.gather(*(store.create_or_get(make_job()) for _ in range(50)))
    outcomes = [r.outcome for r in results]
    assert outcomes.count(CreateOutcome.CREATED) == 1
    assert outcomes.count(CreateOutcome.REPLAYED) == 49
    assert len({r.job.id for r in results}) == 1
    assert await count(store, jobs) == 1
    assert await count(store, attempts) == 1
    # Each replay is audited once, whichever path saw the job (the creating statement
    # itself, or the read after it when the first click was still committing).
    kinds = [e.kind for e in await store.events(results[0].job.id)]
    assert kinds.count("replayed") == 49 and kinds.count("job_created") == 1


async def test_two_engines_on_one_database_still_make_one_job(
    database_url: str, make_job: Any
) -> None:
    first, second = (
        await open_store(
            database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
        ),
        await open_store(
            database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
        ),
    )
    try:
        results = await asyncio.gather(
            *(s.create_or_get(make_job()) for _ in range(25) for s in (first, second))
        )
        assert [r.outcome for r in results].count(CreateOutcome.CREATED) == 1
        assert len({r.job.id for r in results}) == 1
        assert await count(first, jobs) == 1
        assert await count(first, attempts) == 1
    finally:
        await first.close()
        await second.close()


async def test_same_key_different_input_is_a_conflict_and_changes_nothing(
    store: SqlJobStore, make_job: Any
) -> None:
    original = (await store.create_or_get(make_job(input={"text": "a"}))).job
    clash = await store.create_or_get(make_job(input={"text": "b"}))
    assert clash.outcome is CreateOutcome.CONFLICT
    assert clash.job.id == original.id
    assert clash.job.input == {"text": "a"}
    assert await count(store, jobs) == 1
    assert (await store.get_job(original.id)) == original
    assert [e.kind for e in await store.events(original.id)][-1] == "conflict"


async def test_same_key_under_two_owners_makes_two_jobs(store: SqlJobStore, make_job: Any) -> None:
    a = await store.create_or_get(make_job(owner="alice"))
    b = await store.create_or_get(make_job(owner="bob"))
    assert a.outcome is b.outcome is CreateOutcome.CREATED
    assert a.job.id != b.job.id
    assert await store.get_job(a.job.id, owner_id="bob") is None


async def test_replay_is_audited(store: SqlJobStore, make_job: Any) -> None:
    job = (await store.create_or_get(make_job())).job
    await store.create_or_get(make_job())
    assert [e.kind for e in await store.events(job.id)][-1] == "replayed"
    assert await count(store, job_events) == 3


async def test_listing_pages_newest_first(store: SqlJobStore, make_job: Any) -> None:
    ids = [(await store.create_or_get(make_job(key=f"k{i}"))).job.id for i in range(5)]
    await store.create_or_get(make_job(owner="bob", key="other"))
    page, cursor = await store.list_jobs("alice", status=None, limit=2, cursor=None)
    assert [j.id for j in page] == ids[::-1][:2]
    seen = [j.id for j in page]
    while cursor:
        page, cursor = await store.list_jobs("alice", status=None, limit=2, cursor=cursor)
        seen += [j.id for j in page]
    assert seen == ids[::-1]
    queued, _ = await store.list_jobs("alice", status=JobStatus.SUCCEEDED, limit=10, cursor=None)
    assert queued == []


async def test_api_keys_are_stored_hashed(store: SqlJobStore) -> None:
    key_id, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    principal = await store.authenticate(secret)
    assert principal is not None and principal.owner_id == "alice" and not principal.is_admin
    assert await store.authenticate(secret + "x") is None
    async with store.engine.connect() as conn:
        stored = (await conn.execute(sa.text("SELECT key_hash FROM api_keys"))).scalar_one()
    assert secret not in stored
    assert await store.revoke_api_key(key_id)
    assert await store.authenticate(secret) is None
