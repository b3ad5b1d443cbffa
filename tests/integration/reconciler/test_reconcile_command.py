"""``onejob reconcile`` against a real simulator on a socket, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
from typing import Any

import httpx
from reconciler_helpers import CONTRACT, unknown_attempt

from cli.reconcile import EXIT_CANNOT_ASK, EXIT_LOOKUPS_FAILED, run_reconcile
from contracts.loader import load_catalog
from contracts.loader import load_catalog as contract_catalog
from gateway.domain.states import AttemptState, JobStatus
from gateway.settings import Settings
from gateway.store import SqlJobStore
from providers.factory import build_provider
from providers.simulator.server import run_simulator


def settings(sim_url: str, database_url: str, reconcile: bool = True) -> Settings:
    return Settings.model_validate(
        {
            "database_url": database_url,
            "providers": {
                "sim-openai": {
                    "protocol": "openai",
                    "base_url": f"{sim_url}/p/sim-openai/v1",
                    "model": "sim-gpt",
                    "reconcile": reconcile,
                },
            },
            "routes": {"*": {"primary": "sim-openai"}},
        }
    )


async def late_answer(config: Settings, key: str, job_input: Any) -> str:
    """Have the adapter send the attempt's request, as the gateway did before it gave up."""
    cfg = config.providers["sim-openai"]
    request = load_catalog()[CONTRACT].provider_request(
        job_input, model=cfg.model, timeout=10.0, idempotency_key=key
    )
    async with httpx.AsyncClient() as client:
        result = await build_provider(cfg, client).call(request)
    assert result.request_id is not None
    return result.request_id


async def test_one_pass_resolves_a_stored_answer_and_leaves_the_rest_unknown(
    store: SqlJobStore, database_url: str
) -> None:
    answered = await unknown_attempt(store, key="answered", deadline_s=0.0)
    lost = await unknown_attempt(store, key="lost", deadline_s=0.0)
    job = await store.get_job(answered.job_id)
    assert job is not None
    async with run_simulator(port=0, catalog=contract_catalog) as sim:
        config = settings(sim.base_url, database_url)
        await late_answer(config, answered.downstream_key, job.input)
        completion = sim.app.stored["sim-openai"][0]["id"]
        out = io.StringIO()
        code = await run_reconcile(config, grace=0.0, out=out)
    text = out.getvalue()
    assert code == 0, text
    assert f"{answered.id} (job {answered.job_id}, #1 on sim-openai): succeeded" in text
    assert completion in text
    assert f"{lost.id} (job {lost.job_id}, #1 on sim-openai): not_found" in text
    assert "checked 2 unknown attempt(s): 1 not_found, 1 succeeded" in text
    decided = await store.get_job(answered.job_id)
    assert decided is not None and decided.status is JobStatus.SUCCEEDED
    stored = json.loads(sim.app.stored["sim-openai"][0]["choices"][0]["message"]["content"])
    assert decided.result == stored
    waiting = await store.get_attempt(lost.id)
    assert waiting is not None and waiting.state is AttemptState.UNKNOWN


async def test_a_provider_that_cannot_be_reached_fails_the_pass_and_decides_nothing(
    store: SqlJobStore, database_url: str
) -> None:
    attempt = await unknown_attempt(store, deadline_s=0.0)
    out = io.StringIO()
    code = await run_reconcile(settings("http://127.0.0.1:9", database_url), grace=0.0, out=out)
    assert code == EXIT_LOOKUPS_FAILED, out.getvalue()
    assert "1 lookup_failed" in out.getvalue()
    still = await store.get_attempt(attempt.id)
    assert still is not None and still.state is AttemptState.UNKNOWN
    assert still.reconciler is not None and still.reconciler["finding"] == "lookup_failed"


async def test_without_a_reconciling_provider_the_command_says_so_and_exits_2(
    database_url: str,
) -> None:
    out = io.StringIO()
    plain = settings("http://127.0.0.1:9", database_url, reconcile=False)
    assert await run_reconcile(plain, out=out) == EXIT_CANNOT_ASK
    assert "no provider has reconcile = true" in out.getvalue()
