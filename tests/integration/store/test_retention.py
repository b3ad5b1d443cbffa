"""Retention: pruning removes old settled jobs and nothing a client could still change."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from typing import Any

import sqlalchemy as sa

from gateway.domain.clock import ManualClock
from gateway.domain.records import ClaimSpec, CreateOutcome
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store
from gateway.store.tables import attempts, job_events, jobs
from tests.integration.store_helpers import CLAIM, clocked_store, succeeded

DAY = 86_400.0  # seconds


async def rows(store: SqlJobStore, table: sa.Table) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar_one())


async def test_prune_removes_old_settled_jobs_keeps_open_and_recent_ones(
    database_url: str, make_job: Any
) -> None:
    clock = ManualClock(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    store = await open_store(
        database_url,
        clock=clock,
        shortcuts=ShortcutsConfig.from_env(),
        database=DatabaseConfig.from_env(),
    )
    try:
        claim = ClaimSpec(worker_id="w", lease_ttl=60.0, deadline_s=30.0)
        done = await store.create_or_get(make_job(key="old-done"), claim)
        assert done.claimed is not None
        await store.finalize(done.claimed.attempt.id, {"category": "billing"})
        cancelled = await store.create_or_get(make_job(key="old-cancelled"))
        await store.cancel(cancelled.job.id)
        running = await store.create_or_get(make_job(key="old-running"), claim)
        unknown = await store.create_or_get(make_job(key="old-unknown"), claim)
        assert unknown.claimed is not None
        await store.mark_unknown(unknown.claimed.attempt.id, {"reason": "deadline"})
        clock.advance(31 * DAY)
        recent = await store.create_or_get(make_job(key="recent"), claim)
        assert recent.claimed is not None
        await store.finalize(recent.claimed.attempt.id, {"category": "billing"})

        cutoff = clock.now() - dt.timedelta(days=30)
        assert await store.prune_jobs(cutoff, dry_run=True) == 2
        assert await rows(store, jobs) == 5  # a dry run deletes nothing
        assert await store.prune_jobs(cutoff, batch=1) == 1
        assert await store.prune_jobs(cutoff, batch=1) == 1
        assert await store.prune_jobs(cutoff) == 0

        left = {
            j.job.id
            for j in (done, cancelled, running, unknown, recent)
            if await store.get_job(j.job.id) is not None
        }
        assert left == {running.job.id, unknown.job.id, recent.job.id}
        assert await rows(store, jobs) == 3
        assert await rows(store, attempts) == 3
        async with store.engine.connect() as conn:
            orphans = await conn.execute(
                sa.select(sa.func.count())
                .select_from(job_events)
                .where(job_events.c.job_id.not_in(sa.select(jobs.c.id)))
            )
            assert orphans.scalar_one() == 0

        # A pruned job's key is forgotten: the same request makes a new job.
        again = await store.create_or_get(make_job(key="old-done"))
        assert again.outcome is CreateOutcome.CREATED and again.job.id != done.job.id
    finally:
        await store.close()


async def test_prune_all_goes_batch_after_batch_and_leaves_open_jobs(
    database_url: str, make_job: Any
) -> None:
    clock = ManualClock(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    async with clocked_store(database_url, clock) as store:
        for n in range(5):
            await succeeded(store, make_job, f"old-{n}")
            clock.advance(1.0)
        running = await store.create_or_get(make_job(key="old-running"), CLAIM)
        clock.advance(31 * DAY)
        seen: list[int] = []
        cutoff = clock.now() - dt.timedelta(days=30)
        assert await store.prune_all(cutoff, batch=2, rest=0.0, progress=seen.append) == 5
        assert seen == [2, 4, 5]
        assert await rows(store, jobs) == 1 and await store.get_job(running.job.id) is not None
        assert await store.prune_all(cutoff, batch=2, rest=0.0) == 0


def test_prune_refuses_a_window_shorter_than_a_day(tmp_path: Any) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "jobs",
            "prune",
            "--older-than",
            "12h",
            "--database-url",
            f"sqlite+aiosqlite:///{tmp_path / 'x.db'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    assert "at least 24h" in run.stderr


def test_a_dry_run_and_the_key_list_say_plainly_what_they_found(tmp_path: Any) -> None:
    """Issue 47, 13: "would prune at least 0"; key times without their zone."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"

    def onejob(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", *args, "--database-url", url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert onejob("db", "upgrade").returncode == 0
    dry = onejob("jobs", "prune", "--older-than", "30d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would prune 0 settled jobs created more than 30d ago" in dry.stderr
    assert dry.stdout.strip() == "0"
    assert onejob("keys", "create", "alice").returncode == 0
    listed = onejob("keys", "list")
    (line,) = listed.stdout.splitlines()  # no header when stdout is not a terminal
    created = line.split("\t")[3]
    assert created.endswith("Z") and len(created) == len("2026-12-07T13:50:16Z"), line
