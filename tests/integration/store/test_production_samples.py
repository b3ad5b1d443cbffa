"""Production samples for ``certify --production`` (issue 48), on SQLite and PostgreSQL: the
newest succeeded jobs whose primary wrote the result, and nothing else."""

from __future__ import annotations

import datetime as dt
from typing import Any

from gateway.domain.clock import ManualClock
from tests.integration.store_helpers import clocked_store, succeeded

from .test_shadow_checks import CONTRACT, START, won_by_fallback


async def test_the_newest_jobs_the_primary_won_are_drawn_newest_first(
    database_url: str, make_job: Any
) -> None:
    clock = ManualClock(START)
    async with clocked_store(database_url, clock) as store:
        ids = []
        for n in range(5):
            result = {"category": "billing", "n": n}
            ids.append(await succeeded(store, make_job, f"p{n}", input={"n": n}, result=result))
            clock.advance(1)
        taken_over = await won_by_fallback(store, make_job, "fb")
        await succeeded(store, make_job, "other", provider="sim-anthropic")
        await store.create_or_get(make_job(key="still-queued"))

        drawn = await store.production_samples(CONTRACT, "sim-openai", limit=3)
        assert [s.job_id for s in drawn] == ids[::-1][:3]
        assert [s.input for s in drawn] == [{"n": 4}, {"n": 3}, {"n": 2}]
        assert drawn[0].result == {"category": "billing", "n": 4}
        every = await store.production_samples(CONTRACT, "sim-openai", limit=50)
        assert [s.job_id for s in every] == ids[::-1]  # fewer than asked: all there are
        assert taken_over not in {s.job_id for s in every}
        assert await store.production_samples("reply-draft@1", "sim-openai", limit=5) == []
        assert await store.production_samples(CONTRACT, "sim-openai", limit=0) == []
        assert all(s.finished_at.tzinfo is dt.UTC for s in every)
