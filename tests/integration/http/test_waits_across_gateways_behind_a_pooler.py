"""Behind a transaction pooler without ``listen_url``, no LISTEN relay runs (issue 46):
another gateway's change still reaches a ``Prefer: wait``, found by its re-read.

Two gateways on one database through PgBouncer in transaction mode, neither with a
relay (``default_background`` builds none there: test_through_pgbouncer.py). A job made
on one is cancelled on the other while a ``Prefer: wait=30`` waits on the first: the
wait answers with the job cancelled, as the waiter re-reads every second without a
wake-up; had it relied on one, it would have answered at 30 s with the job queued.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from litestar import Litestar

from gateway.database_url import relay_url
from gateway.settings import DatabaseConfig

pytestmark = pytest.mark.parametrize(
    "database_url", [pytest.param("pgbouncer", marks=pytest.mark.postgres)], indirect=True
)
TRIAGE_INPUT = {
    "ticket_id": "SUP-1",
    "channel": "email",
    "customer": {"name": "Ana", "plan": "pro"},
    "subject": "Charged twice",
    "body": "My card was charged twice for March.",
}


async def test_a_wait_on_one_gateway_sees_a_cancel_made_on_another_without_a_relay(
    app: Litestar,
    keys: Any,
    served: Any,
    second_gateway: Any,
    database_url: str,
) -> None:
    # The gateways run no background services; none would relay without listen_url.
    assert DatabaseConfig.from_env().pooler == "transaction"
    assert relay_url(database_url, None, "transaction") is None
    async with (
        served(app) as url_a,
        second_gateway() as url_b,
        httpx.AsyncClient(timeout=60) as http,
    ):
        body = {"contract": "ticket-triage@1", "input": TRIAGE_INPUT}
        made = await http.post(f"{url_a}/v1/jobs", json=body, headers=keys.job())
        assert made.status_code == 201, made.text
        job_id = made.json()["id"]
        wait = {**keys.auth(), "Prefer": "wait=30"}
        waiting = asyncio.create_task(http.get(f"{url_a}/v1/jobs/{job_id}", headers=wait))
        cancelled = await http.post(f"{url_b}/v1/jobs/{job_id}/cancel", headers=keys.auth())
        assert cancelled.status_code == 200, cancelled.text
        answer = await waiting
    assert answer.status_code == 200
    assert answer.json()["status"] == "cancelled"
