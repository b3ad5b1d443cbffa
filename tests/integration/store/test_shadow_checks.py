"""Shadow checks in the store (issue 38), on SQLite and PostgreSQL: which jobs are sampled,
one claim per (job, fallback), tallies, the hourly count, retention; never the job."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa

from gateway.domain.clock import ManualClock
from gateway.domain.shadow_records import ShadowOutcome
from gateway.store import SqlJobStore
from gateway.store.tables import attempts, job_events, shadow_checks
from tests.integration.store_helpers import CLAIM, clocked_store, succeeded

CONTRACT = "ticket-triage@1"
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
EPOCH = (dt.datetime(2000, 1, 1, tzinfo=dt.UTC), "")


async def count(store: SqlJobStore, table: sa.Table) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar_one())


async def won_by_fallback(store: SqlJobStore, make_job: Any, key: str) -> str:
    created = await store.create_or_get(make_job(key=key), CLAIM)
    assert created.claimed is not None
    await store.fail_attempt(
        created.claimed.attempt.id, {"reason": "status_503"}, next_provider="sim-anthropic"
    )
    claimed = await store.claim_next_attempt(
        "w", lease_ttl=60.0, deadline_s={}, default_deadline_s=30.0
    )
    assert claimed is not None and claimed.attempt.provider == "sim-anthropic"
    await store.finalize(claimed.attempt.id, {"category": "billing"})
    return created.job.id


async def test_only_jobs_their_primary_won_are_candidates_in_order_past_the_cursor(
    database_url: str, make_job: Any
) -> None:
    clock = ManualClock(START)
    async with clocked_store(database_url, clock) as store:
        first = await succeeded(store, make_job, "a", result={"category": "billing", "key": "a"})
        clock.advance(1)
        await won_by_fallback(store, make_job, "b")
        await store.create_or_get(make_job(key="still-queued"))
        clock.advance(1)
        second = await succeeded(store, make_job, "c")

        found = await store.shadow_candidates(EPOCH, [CONTRACT], limit=10)
        assert [c.job_id for c in found] == [first, second]
        assert found[0].primary == "sim-openai" and found[0].result["key"] == "a"
        assert found[0].input == {"text": "printer on fire"}
        after = (found[0].finished_at, found[0].job_id)
        assert [c.job_id for c in await store.shadow_candidates(after, [CONTRACT], limit=10)] == [
            second
        ]
        assert await store.shadow_candidates(EPOCH, ["other@1"], limit=10) == []
        assert len(await store.shadow_candidates(EPOCH, [CONTRACT], limit=1)) == 1


async def test_a_check_is_claimed_once_with_its_own_key_and_leaves_the_job_alone(
    database_url: str, make_job: Any
) -> None:
    async with clocked_store(database_url, ManualClock(START)) as store:
        job_id = await succeeded(store, make_job, "a")
        job_before = await store.get_job(job_id)
        events, tries = await count(store, job_events), await count(store, attempts)

        claimed = await store.begin_shadow_check(job_id, CONTRACT, "sim-openai", "sim-anthropic")
        assert claimed is not None
        check_id, key = claimed
        assert key == f"shadow-{check_id}"
        assert job_before is not None
        assert key not in {a.downstream_key for a in job_before.attempts}
        again = await store.begin_shadow_check(job_id, CONTRACT, "sim-openai", "sim-anthropic")
        assert again is None
        assert await store.begin_shadow_check(job_id, CONTRACT, "sim-openai", "other") is not None

        assert await store.finish_shadow_check(
            check_id, ShadowOutcome.DISAGREED, {"fields": ["category"]}
        )
        assert not await store.finish_shadow_check(check_id, ShadowOutcome.AGREED, {})
        assert await store.get_job(job_id) == job_before
        assert (await count(store, job_events), await count(store, attempts)) == (events, tries)


async def test_the_tally_counts_the_newest_judged_checks_since_the_certificate(
    database_url: str, make_job: Any
) -> None:
    clock = ManualClock(START)
    async with clocked_store(database_url, clock) as store:
        outcomes = [ShadowOutcome.AGREED] * 3 + [ShadowOutcome.DISAGREED] * 2
        outcomes += [ShadowOutcome.ERROR]
        for n, outcome in enumerate(outcomes):
            clock.advance(60)
            job_id = await succeeded(store, make_job, f"j{n}")
            claimed = await store.begin_shadow_check(job_id, CONTRACT, "p", "f")
            assert claimed is not None
            fields = ["category", "schema"] if outcome is ShadowOutcome.DISAGREED else []
            await store.finish_shadow_check(claimed[0], outcome, {"fields": fields})
        pending = await store.begin_shadow_check(
            await succeeded(store, make_job, "pending"), CONTRACT, "p", "f"
        )
        assert pending is not None

        tally = await store.shadow_tally(CONTRACT, "p", "f", since=START, window=100)
        assert (tally.checks, tally.disagreements, tally.errors) == (5, 2, 1)
        assert tally.fields == {"category": 2, "schema": 2}
        assert tally.rate == 0.4
        newest = await store.shadow_tally(CONTRACT, "p", "f", since=START, window=2)
        assert (newest.checks, newest.disagreements) == (2, 2)
        later = START + dt.timedelta(seconds=60 * 3 + 1)  # a certificate after the third
        assert (await store.shadow_tally(CONTRACT, "p", "f", since=later, window=100)).checks == 2
        other = await store.shadow_tally(CONTRACT, "p", "g", since=START, window=100)
        assert other.checks == 0 and other.rate is None

        # Every started check counts against the hour's budget, pending and errors too.
        assert await store.shadow_calls_since(START) == 7
        assert await store.shadow_calls_since(clock.now() - dt.timedelta(seconds=90)) == 3


async def test_retention_removes_a_jobs_shadow_checks_with_it(
    database_url: str, make_job: Any
) -> None:
    clock = ManualClock(START)
    async with clocked_store(database_url, clock) as store:
        old = await succeeded(store, make_job, "old")
        await store.begin_shadow_check(old, CONTRACT, "p", "f")
        clock.advance(31 * 86_400)
        recent = await succeeded(store, make_job, "recent")
        await store.begin_shadow_check(recent, CONTRACT, "p", "f")
        assert await store.prune_jobs(clock.now() - dt.timedelta(days=30)) == 1
        async with store.engine.connect() as conn:
            left = (await conn.execute(sa.select(shadow_checks.c.job_id))).scalars().all()
        assert left == [recent]
