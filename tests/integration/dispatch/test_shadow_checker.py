"""The shadow checker (issue 38) on a real store (SQLite and PostgreSQL) and a real
registry, with stand-in fallbacks: agreement, suspension, the budget, no effect on jobs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from contracts.loader import load_catalog
from contracts.registry import CertificationRegistry
from gateway.dispatch.routing import Routes
from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import ClaimSpec, NewJob
from gateway.domain.shadow_records import ShadowOutcome
from gateway.metrics import Metrics
from gateway.settings import DatabaseConfig, Settings, ShortcutsConfig
from gateway.shadow import ShadowChecker
from gateway.store import SqlJobStore, open_store
from gateway.store.tables import attempts, job_events
from providers.base import DefiniteFailure, ProviderRequest, ProviderResult, Usage
from tests.integration.dispatch.dispatch_harness import case_input, certify

CATALOG = load_catalog()
TRIAGE = "ticket-triage@1"
CLAIM = ClaimSpec(worker_id="w", lease_ttl=60.0, deadline_s=30.0)


class Fallback:
    """A fallback that answers like the primary, except on the flags it is told to flip."""

    def __init__(self, name: str, flip: tuple[str, ...] = (), fail: bool = False):
        self.name = name
        self.flip = flip
        self.fail = fail
        self.keys: list[str | None] = []

    async def call(self, request: ProviderRequest) -> ProviderResult:
        self.keys.append(request.idempotency_key)
        if self.fail:
            raise DefiniteFailure("no", reason="status_400")
        block = request.user.rsplit("<input", 1)[1].split(">", 1)[1].rsplit("</input>", 1)[0]
        answer = CATALOG[TRIAGE].simulate(json.loads(block))
        answer.update({f: not answer[f] for f in self.flip})
        return ProviderResult(answer, json.dumps(answer), "req-1", Usage(), "stop", 0.01, "m")


def settings(tmp_path: Path, database_url: str, **shadow: Any) -> Settings:
    return Settings.model_validate(
        {
            "database_url": database_url,
            "certifications_path": str(tmp_path / "certs.json"),
            "providers": {
                "p": {"protocol": "openai", "base_url": "http://p/v1", "model": "gpt"},
                "f": {"protocol": "anthropic", "base_url": "http://f", "model": "claude"},
            },
            "routes": {"*": {"primary": "p", "fallbacks": ["f"]}},
            "shadow": {
                "sample_rate": 1.0,
                "min_interval": 0.0,
                "min_samples": 4,
                "threshold": 0.5,
                **shadow,
            },
        }
    )


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[SqlJobStore]:
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        yield store
    finally:
        await store.close()


async def succeed(store: SqlJobStore, n: int, contract: str = TRIAGE) -> str:
    """Make a job the primary won, with the faithful answer as its result."""
    value = case_input(n) if contract == TRIAGE else CATALOG[contract].cases[0].input
    job = NewJob(
        owner_id="alice",
        idempotency_key=f"k{n}-{contract}",
        fingerprint=fingerprint(contract, value, None),
        contract=contract,
        provider="p",
        requested_provider=None,
        input=value,
    )
    created = await store.create_or_get(job, CLAIM)
    assert created.claimed is not None
    await store.finalize(created.claimed.attempt.id, CATALOG[contract].simulate(value))
    return created.job.id


def checker(
    s: Settings, store: SqlJobStore, fallback: Fallback, metrics: Metrics
) -> tuple[ShadowChecker, CertificationRegistry]:
    registry = CertificationRegistry(s.certifications_path)
    certify(Path(s.certifications_path), list(s.providers.values()))
    routes = Routes(s, CATALOG, s.providers, registry)
    shadow = ShadowChecker(
        store=store,
        providers={"f": fallback},
        provider_configs=s.providers,
        catalog=CATALOG,
        routes=routes,
        registry=registry,
        settings=s,
        metrics=metrics.certification,
    )
    return shadow, registry


async def rows(store: SqlJobStore, table: sa.Table) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar_one())


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


async def test_an_agreeing_fallback_is_checked_with_its_own_keys_and_the_jobs_untouched(
    tmp_path: Path, database_url: str, store: SqlJobStore
) -> None:
    s = settings(tmp_path, database_url)
    fallback, metrics = Fallback("f"), Metrics()
    shadow, registry = checker(s, store, fallback, metrics)
    job_ids = [await succeed(store, n) for n in range(5)]
    await succeed(store, 0, "reply-draft@1")  # not hedgeable: never re-run
    jobs_before = [await store.get_job(j) for j in job_ids]
    events, tries = await rows(store, job_events), await rows(store, attempts)

    results = await shadow.run_once()
    assert [r.outcome for r in results] == [ShadowOutcome.AGREED] * 5
    assert [r.job_id for r in results] == job_ids
    assert all(k and k.startswith("shadow-shc_") for k in fallback.keys)
    assert [await store.get_job(j) for j in job_ids] == jobs_before
    assert (await rows(store, job_events), await rows(store, attempts)) == (events, tries)
    assert await shadow.run_once() == []  # each job once per fallback
    assert registry.can_failover(CATALOG[TRIAGE], s.providers["p"], s.providers["f"]).allowed
    pair = {"contract": TRIAGE, "primary": "p", "fallback": "f"}
    assert sample(metrics, "onejob_shadow_disagreement_rate", **pair) == 0.0
    assert sample(metrics, "onejob_shadow_calls_total", provider="f") == 5


async def test_a_disagreeing_fallback_is_suspended_and_no_longer_checked_or_allowed(
    tmp_path: Path, database_url: str, store: SqlJobStore
) -> None:
    s = settings(tmp_path, database_url)
    fallback, metrics = Fallback("f", flip=("needs_human",)), Metrics()
    shadow, registry = checker(s, store, fallback, metrics)
    for n in range(6):
        await succeed(store, n)

    results = await shadow.run_once()
    # Suspended at the fourth judged check (min_samples); the fallback is no longer
    # certified, so the rest of the jobs are not sent to it.
    assert len(results) == 4 and all(r.outcome is ShadowOutcome.DISAGREED for r in results)
    assert results[0].detail["fields"] == ["needs_human"]
    assert set(results[0].detail["hashes"]) == {"needs_human"}
    assert "true" not in json.dumps(results[0].detail)  # hashes, never values
    verdict = registry.can_failover(CATALOG[TRIAGE], s.providers["p"], s.providers["f"])
    assert (verdict.allowed, verdict.reason) == (False, "suspended")
    assert "disagreed in 4 of 4 (100%, threshold 50%) (on needs_human)" in verdict.detail
    [held] = registry.suspensions()
    assert held["fields"] == {"needs_human": 4} and held["by"] == s.instance_id
    pair = {"contract": TRIAGE, "primary": "p", "fallback": "f"}
    assert sample(metrics, "onejob_failover_suspended", **pair) == 1
    assert sample(metrics, "onejob_failover_suspensions_total", **pair) == 1
    await succeed(store, 7)
    assert await shadow.run_once() == [] and len(fallback.keys) == 4


async def test_the_hourly_budget_bounds_the_calls_and_the_next_pass_resumes(
    tmp_path: Path, database_url: str, store: SqlJobStore
) -> None:
    s = settings(tmp_path, database_url, calls_per_hour=2)
    fallback, metrics = Fallback("f"), Metrics()
    shadow, _ = checker(s, store, fallback, metrics)
    for n in range(4):
        await succeed(store, n)
    assert len(await shadow.run_once()) == 2
    assert len(await shadow.run_once()) == 0  # spent for this hour
    assert sample(metrics, "onejob_shadow_calls_last_hour") == 2
    assert sample(metrics, "onejob_shadow_calls_total", provider="f") == 2
    assert sample(metrics, "onejob_shadow_calls_per_hour_limit") == 2


async def test_a_failed_call_is_recorded_but_not_judged(
    tmp_path: Path, database_url: str, store: SqlJobStore
) -> None:
    s = settings(tmp_path, database_url, min_samples=1)
    fallback, metrics = Fallback("f", fail=True), Metrics()
    shadow, registry = checker(s, store, fallback, metrics)
    await succeed(store, 0)
    [result] = await shadow.run_once()
    assert result.outcome is ShadowOutcome.ERROR and result.detail["error"] == "status_400"
    assert registry.suspensions() == []
    tally = await store.shadow_tally(TRIAGE, "p", "f", since=result_since(registry), window=10)
    assert (tally.checks, tally.errors) == (0, 1)


def result_since(registry: CertificationRegistry) -> Any:
    from gateway.shadow import certified_since

    return certified_since(registry, TRIAGE, "f")
