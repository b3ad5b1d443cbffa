"""The reconciler's decisions on SQLite and PostgreSQL: exactly one decision per attempt.

The provider side is a test double of the ``Reconcilable`` seam that answers with a canned
stored completion; the store, the contract check and the routes are the real ones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from reconciler_helpers import CONTRACT, case_input, unknown_attempt

from contracts.loader import load_catalog
from contracts.model import Contract
from gateway.bootstrap import build_reconciler
from gateway.dispatch.routing import Routes
from gateway.domain.clock import ManualClock
from gateway.domain.states import AttemptState, JobStatus
from gateway.http.views import admin_attempt_view
from gateway.metrics import Metrics, ReconcileOutcome
from gateway.reconciler import Reconciler
from gateway.settings import DatabaseConfig, Settings, ShortcutsConfig, simulator_defaults
from gateway.store import SqlJobStore, open_store
from providers.base import ProviderResult, Usage
from providers.lookup import StoredAnswer

CATALOG: dict[str, Contract] = load_catalog()


def settings(**reconciler: Any) -> Settings:
    data = simulator_defaults()
    data["simulator"]["enabled"] = False
    data["providers"]["sim-openai"]["reconcile"] = True
    data["reconciler"] = {"grace": 0.0, **reconciler}
    return Settings.model_validate(data)


@dataclasses.dataclass
class Verdict:
    allowed: bool
    reason: str = "test"


class Certified:
    """A registry that allows exactly the fallbacks it is given."""

    def __init__(self, *allowed: str) -> None:
        self.allowed = set(allowed)

    def can_failover(self, contract: Any, primary: Any, fallback: Any) -> Verdict:
        return Verdict(fallback.name in self.allowed)


class StoredCompletions:
    """The ``Reconcilable`` seam answering from a dict of downstream key -> output."""

    name = "sim-openai"

    def __init__(self) -> None:
        self.outputs: dict[str, Any] = {}
        self.asked: list[str] = []
        self.gate: asyncio.Event | None = None
        self.both_asked = asyncio.Event()

    async def lookup(self, downstream_key: str, *, timeout: float) -> StoredAnswer | None:
        self.asked.append(downstream_key)
        if len(self.asked) >= 2:
            self.both_asked.set()
        if self.gate is not None:
            await self.gate.wait()
        if downstream_key not in self.outputs:
            return None
        output = self.outputs[downstream_key]
        result = ProviderResult(output, json.dumps(output), "chatcmpl-1", Usage(), "stop", 0.0)
        return StoredAnswer(f"chatcmpl-{downstream_key}", 1_700_000_000.0, 1, result)


def reconciler(
    store: SqlJobStore,
    provider: StoredCompletions,
    certified: Certified | None = None,
    clock: ManualClock | None = None,
    **kw: Any,
) -> Reconciler:
    config = settings(**kw)
    routes = Routes(config, CATALOG, config.providers, certified or Certified())
    return build_reconciler(
        config,
        store=store,
        providers={"sim-openai": provider},
        catalog=CATALOG,
        routes=routes,
        metrics=Metrics(),
        clock=clock,
    )


def valid_output() -> dict[str, Any]:
    return CATALOG[CONTRACT].simulate(case_input())


async def resolutions(store: SqlJobStore, job_id: str) -> list[dict[str, Any]]:
    return [e.detail for e in await store.events(job_id) if e.kind == "attempt_resolved"]


async def test_two_reconcilers_and_an_admin_racing_on_one_attempt_make_exactly_one_decision(
    store: SqlJobStore, database_url: str
) -> None:
    other = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )  # a second process: its own engine
    try:
        for round_ in range(3):
            attempt = await unknown_attempt(store, key=f"race-{round_}")
            provider = StoredCompletions()
            provider.outputs[attempt.downstream_key] = valid_output()
            provider.gate = asyncio.Event()
            first, second = reconciler(store, provider), reconciler(other, provider)
            checks = [
                asyncio.create_task(first.check(attempt)),
                asyncio.create_task(second.check(attempt)),
            ]
            await provider.both_asked.wait()  # both have asked; neither has decided
            provider.gate.set()
            admin = store.resolve(attempt.id, AttemptState.FAILED, note="ops: never ran")
            *found, by_hand = await asyncio.gather(*checks, admin)

            decided = await resolutions(store, attempt.job_id)
            assert len(decided) == 1, decided
            job = await store.get_job(attempt.job_id)
            assert job is not None
            [final] = job.attempts
            outcomes = sorted(c.outcome.value for c in found)
            if final.state is AttemptState.SUCCEEDED:
                assert outcomes == ["already_resolved", "succeeded"]
                assert by_hand.outcome.value == "conflict"
                assert job.result == provider.outputs[attempt.downstream_key]
                assert job.version == 2 and job.completed_by == attempt.id
                assert (
                    decided[0]["evidence"]["completion_id"] == f"chatcmpl-{attempt.downstream_key}"
                )
            else:
                assert final.state is AttemptState.FAILED
                assert outcomes == ["already_resolved", "already_resolved"]
                assert job.result is None and job.completed_by is None
    finally:
        await other.close()


async def test_a_found_answer_wins_with_its_evidence_in_the_audit_event(
    store: SqlJobStore,
) -> None:
    attempt = await unknown_attempt(store)
    provider = StoredCompletions()
    provider.outputs[attempt.downstream_key] = valid_output()
    check = await reconciler(store, provider).check(attempt)
    assert check.outcome is ReconcileOutcome.SUCCEEDED
    job = await store.get_job(attempt.job_id)
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.result == provider.outputs[attempt.downstream_key]
    [detail] = await resolutions(store, attempt.job_id)
    evidence = detail["evidence"]
    assert evidence["completion_id"] == f"chatcmpl-{attempt.downstream_key}"
    assert evidence["last_checked_at"].endswith("Z") and evidence["finding"] == "found"
    assert detail["won"] is True


async def test_a_found_answer_after_the_job_was_decided_loses_and_changes_nothing(
    store: SqlJobStore,
) -> None:
    attempt = await unknown_attempt(store)
    await store.cancel(attempt.job_id)
    provider = StoredCompletions()
    provider.outputs[attempt.downstream_key] = valid_output()
    check = await reconciler(store, provider).check(attempt)
    assert check.outcome is ReconcileOutcome.LOST
    job = await store.get_job(attempt.job_id)
    assert job is not None and job.status is JobStatus.CANCELLED and job.result is None
    assert job.attempts[0].state is AttemptState.LOST


@pytest.mark.parametrize("certified", [True, False])
async def test_a_found_answer_breaking_the_contract_fails_and_fails_over_only_if_certified(
    store: SqlJobStore, certified: bool
) -> None:
    attempt = await unknown_attempt(store)
    provider = StoredCompletions()
    provider.outputs[attempt.downstream_key] = {"category": "not-a-category"}
    registry = Certified("sim-anthropic") if certified else Certified()
    check = await reconciler(store, provider, registry).check(attempt)
    assert check.outcome is ReconcileOutcome.CONTRACT_VIOLATION
    job = await store.get_job(attempt.job_id)
    assert job is not None
    first = job.attempts[0]
    assert first.state is AttemptState.FAILED
    assert first.error is not None
    assert first.error["reason"] == "contract_violation" and first.error["outcome"] == "definite"
    assert first.error["errors"] and first.error["request_id"].startswith("chatcmpl-")
    assert job.result is None and job.completed_by is None
    skipped = [e for e in await store.events(attempt.job_id) if e.kind == "failover_skipped"]
    if certified:
        assert [(a.provider, a.reason.value) for a in job.attempts[1:]] == [
            ("sim-anthropic", "failover")
        ]
        assert job.status is JobStatus.QUEUED
        assert skipped == []
    else:
        assert len(job.attempts) == 1 and job.status is JobStatus.FAILED
        # The job says why it did not fail over, as after the dispatcher's failures.
        [event] = skipped
        assert event.attempt_id == first.id
        assert event.detail == {
            "fallback": "sim-anthropic",
            "primary": "sim-openai",
            "reason": "test",
        }
    [detail] = await resolutions(store, attempt.job_id)
    assert detail["evidence"]["finding"] == "contract_violation"


async def test_not_found_leaves_the_attempt_unknown_and_the_admin_list_shows_the_finding(
    store: SqlJobStore,
) -> None:
    attempt = await unknown_attempt(store)
    provider = StoredCompletions()
    rec = reconciler(store, provider)
    for _ in range(2):
        check = await rec.check(attempt)
        assert check.outcome is ReconcileOutcome.NOT_FOUND
    still = await store.get_attempt(attempt.id)
    assert still is not None and still.state is AttemptState.UNKNOWN
    view = admin_attempt_view(still)["reconciler"]
    assert view["finding"] == "not_found" and view["last_checked_at"].endswith("Z")
    checked = [e for e in await store.events(attempt.job_id) if e.kind == "reconciler_checked"]
    assert len(checked) == 1  # the same finding twice is one audit line
    assert "absence is not proof" in checked[0].detail["proves"]
    provider.outputs[attempt.downstream_key] = valid_output()  # storing caught up
    assert (await rec.check(attempt)).outcome is ReconcileOutcome.SUCCEEDED


async def test_only_attempts_past_their_grace_on_reconcilable_providers_are_due(
    database_url: str,
) -> None:
    clock = ManualClock()
    store = await open_store(
        database_url,
        clock=clock,
        shortcuts=ShortcutsConfig.from_env(),
        database=DatabaseConfig.from_env(),
    )
    try:
        attempt = await unknown_attempt(store)  # deadline: one second after its claim
        rec = reconciler(store, StoredCompletions(), grace=10.0, clock=clock)
        assert await rec.due() == []
        clock.advance(10.5)  # 9.5 s past the deadline: the provider may still be at it
        assert await rec.due() == []
        clock.advance(1.0)
        assert [a.id for a in await rec.due()] == [attempt.id]
        rec.lookups.clear()  # e.g. reconcile switched off for the provider
        assert await rec.due() == []
    finally:
        await store.close()
