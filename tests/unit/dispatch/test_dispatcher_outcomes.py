"""What the dispatcher decides for each kind of provider outcome (fakes for every seam)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time

import pytest
from dispatch_fakes import (
    MakeDispatcher,
    ScriptedProvider,
    SpyStore,
    ToyContract,
    answer,
    make_attempt,
    make_job,
    raises,
)

from gateway.domain.records import ClaimedAttempt, FinalizeOutcome
from gateway.domain.states import AttemptReason, AttemptState
from providers.base import (
    AmbiguousStatus,
    ConnectFailed,
    ConnectionLost,
    ProviderError,
    TimedOut,
    Unavailable,
)


def soon(seconds: float) -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)


def queue_claim(
    store: SpyStore,
    *,
    deadline_s: float = 5.0,
    attempts: int = 1,
    provider: str = "p1",
    reason: AttemptReason = AttemptReason.INITIAL,
) -> None:
    attempt = make_attempt(attempts, provider, reason=reason, deadline_at=soon(deadline_s))
    earlier = tuple(make_attempt(n, "p1", state=AttemptState.FAILED) for n in range(1, attempts))
    store.claims.append(ClaimedAttempt(attempt=attempt, job=make_job()))
    store.jobs["job_1"] = make_job(attempts=(*earlier, attempt))


def providers(**behaviours: ScriptedProvider) -> dict[str, ScriptedProvider]:
    base = {n: ScriptedProvider(n) for n in ("p1", "p2", "p3")}
    base.update(behaviours)
    return base


async def test_valid_answer_is_finalized_with_its_request_id(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", answer({"label": "billing"}, request_id="req_9"))
    d = make_dispatcher(providers=providers(p1=p1))
    queue_claim(store, deadline_s=2.0)

    assert await d.run_once() is True

    [(args, kw)] = store.named("finalize")
    assert args == ("att_1", {"label": "billing"})
    assert kw == {"provider_request_id": "req_9", "reported_model": None}  # none reported
    assert not store.named("fail_attempt") and not store.named("mark_unknown")


async def test_provider_gets_downstream_key_and_the_time_left_until_the_deadline(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1")
    d = make_dispatcher(providers=providers(p1=p1), timeout=3.0)
    queue_claim(store, deadline_s=2.0)

    await d.run_once()

    [request] = p1.requests
    assert request.idempotency_key == "job_1/1"
    assert request.model == "m-p1"
    assert 1.5 < request.timeout <= 2.0
    assert store.named("extend_deadline") == []


async def test_an_attempt_claimed_long_before_its_call_gets_a_fresh_deadline_first(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    """Sent with what is left (its creating statement was held up by a slow database),
    the call would time out before the provider saw it, and end ``unknown``."""
    p1 = ScriptedProvider("p1")
    d = make_dispatcher(providers=providers(p1=p1), timeout=4.0)
    queue_claim(store, deadline_s=0.01)

    await d.run_once()

    [(args, kw)] = store.named("extend_deadline")
    assert args == ("att_1", "w-test") and kw == {"deadline_s": 4.0}
    [request] = p1.requests
    assert request.timeout == 4.0
    assert len(store.named("finalize")) == 1 and store.named("mark_unknown") == []


async def test_an_attempt_that_cannot_get_a_fresh_deadline_is_not_sent(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1")
    d = make_dispatcher(providers=providers(p1=p1), timeout=4.0)
    queue_claim(store, deadline_s=0.01)
    store.extend_errors = [ConnectionError("database away")]

    await d.run_once()

    assert p1.requests == []
    assert store.named("never_sent") == [(("att_1", "w-test"), {})]
    assert store.named("mark_unknown") == [] and store.named("fail_attempt") == []


async def test_claim_passes_each_providers_timeout_as_its_deadline(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher(timeout=7.0)

    assert await d.run_once() is False

    [kw] = store.claim_kwargs
    assert kw["worker_id"] == "w-test"
    assert kw["lease_ttl"] == 0.3
    assert kw["deadline_s"] == {"p1": 7.0, "p2": 7.0, "p3": 7.0}


async def test_output_breaking_the_contract_is_a_definite_failure_that_fails_over(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", answer({"labl": "typo"}))
    d = make_dispatcher(providers=providers(p1=p1))
    queue_claim(store)

    await d.run_once()

    [(args, kw)] = store.named("fail_attempt")
    assert args[1]["reason"] == "contract_violation"
    assert args[1]["errors"] == ["label: required string"]
    assert kw == {"next_provider": "p2"}
    assert not store.named("finalize")


async def test_definite_failure_fails_over_to_the_first_certified_fallback(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", raises(Unavailable(status_code=503)))
    d = make_dispatcher(providers=providers(p1=p1), certified=(("p1", "p3"),))
    queue_claim(store)

    await d.run_once()

    [(args, kw)] = store.named("fail_attempt")
    assert args[1]["outcome"] == "definite" and args[1]["status_code"] == 503
    assert kw == {"next_provider": "p3"}  # p2 is configured but not certified


async def test_definite_failure_without_certified_fallback_names_no_next_provider(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", raises(ConnectFailed()))
    d = make_dispatcher(providers=providers(p1=p1), certified=())
    queue_claim(store)

    await d.run_once()

    [(_, kw)] = store.named("fail_attempt")
    assert kw == {"next_provider": None}


async def test_failover_stops_at_max_attempts(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p2 = ScriptedProvider("p2", raises(Unavailable()))
    d = make_dispatcher(providers=providers(p2=p2), route={"max_attempts": 2})
    queue_claim(store, attempts=2, provider="p2", reason=AttemptReason.FAILOVER)

    await d.run_once()

    [(_, kw)] = store.named("fail_attempt")
    assert kw == {"next_provider": None}


async def test_failover_skips_providers_already_tried(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p2 = ScriptedProvider("p2", raises(Unavailable()))
    d = make_dispatcher(providers=providers(p2=p2))
    queue_claim(store, attempts=2, provider="p2", reason=AttemptReason.FAILOVER)

    await d.run_once()

    [(_, kw)] = store.named("fail_attempt")
    assert kw == {"next_provider": "p3"}


async def test_no_failover_while_another_attempt_of_the_job_is_in_play(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", raises(Unavailable()))
    d = make_dispatcher(providers=providers(p1=p1))
    queue_claim(store)
    hedge = make_attempt(2, "p2", reason=AttemptReason.HEDGE, state=AttemptState.RUNNING)
    job = store.jobs["job_1"]
    store.jobs["job_1"] = make_job(attempts=(*job.attempts, hedge))

    await d.run_once()

    [(_, kw)] = store.named("fail_attempt")
    assert kw == {"next_provider": None}


async def test_timeouts_and_broken_connections_make_the_attempt_unknown_never_failed(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    errors: list[ProviderError] = [TimedOut(), ConnectionLost(), AmbiguousStatus(status_code=502)]
    p1 = ScriptedProvider("p1", *(raises(e) for e in errors))
    d = make_dispatcher(providers=providers(p1=p1))
    for _ in errors:
        queue_claim(store)
        await d.run_once()

    unknown = store.named("mark_unknown")
    assert [args[1]["reason"] for args, _ in unknown] == [
        "timeout",
        "connection_lost",
        "ambiguous_status",
    ]
    assert not store.named("fail_attempt") and not store.named("finalize")


async def test_a_hang_past_the_deadline_is_cut_off_and_unknown(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", answer({"label": "late"}, delay=30.0))
    d = make_dispatcher(providers=providers(p1=p1), timeout=0.3)
    queue_claim(store, deadline_s=0.3)

    began = time.monotonic()
    await d.run_once()

    assert time.monotonic() - began < 2.0
    [(args, _)] = store.named("mark_unknown")
    assert args[1]["reason"] == "deadline"
    assert not store.named("finalize")


async def test_an_unexpected_exception_from_the_adapter_is_unknown(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", raises(RuntimeError("adapter bug")))
    d = make_dispatcher(providers=providers(p1=p1))
    queue_claim(store)

    await d.run_once()

    [(args, _)] = store.named("mark_unknown")
    assert args[1]["reason"] == "unexpected_error"
    assert "adapter bug" in args[1]["message"]


async def test_an_unconfigured_provider_is_a_definite_failure_without_a_call(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher()
    queue_claim(store, provider="nowhere")

    await d.run_once()

    [(args, _)] = store.named("fail_attempt")
    assert args[1]["reason"] == "not_configured"


async def test_lost_race_is_counted(store: SpyStore, make_dispatcher: MakeDispatcher) -> None:
    d = make_dispatcher()
    store.finalize_outcome = FinalizeOutcome.LOST
    queue_claim(store)

    await d.run_once()

    body, _ = d.metrics.render()
    assert b"onejob_races_lost_total 1.0" in body
    assert b'onejob_attempts_total{outcome="lost",provider="p1"} 1.0' in body


async def test_lease_is_renewed_while_the_call_is_in_flight(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", answer({"label": "x"}, delay=0.5))
    d = make_dispatcher(providers=providers(p1=p1))  # lease_ttl 0.3: renew every 0.1 s
    queue_claim(store)

    await d.run_once()

    renewals = store.named("renew_lease")
    assert 2 <= len(renewals) <= 6
    assert all(args == ("att_1", "w-test") for args, _ in renewals)


async def test_lease_is_renewed_until_a_slow_decision_is_committed(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher()  # lease_ttl 0.3: renew every 0.1 s
    store.finalize_delay = 0.45
    queue_claim(store)

    await d.run_once()

    assert len(store.named("renew_lease")) >= 2
    assert len(store.named("finalize")) == 1


async def test_a_lease_found_lost_is_renewed_no_more(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", answer({"label": "x"}, delay=0.5))
    d = make_dispatcher(providers=providers(p1=p1))  # renew every 0.1 s
    store.renew_result = False  # the reaper took the attempt
    queue_claim(store)

    await d.run_once()

    assert len(store.named("renew_lease")) == 1


async def test_a_renewal_that_failed_is_tried_again_at_the_next_turn(
    store: SpyStore, make_dispatcher: MakeDispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    p1 = ScriptedProvider("p1", answer({"label": "x"}, delay=0.5))
    d = make_dispatcher(providers=providers(p1=p1))  # renew every 0.1 s
    tries: list[str] = []

    async def flaky(attempt_id: str, worker_id: str, *, lease_ttl: float) -> bool:
        tries.append(attempt_id)
        if len(tries) == 1:
            raise ConnectionError("the database went away")
        return True

    monkeypatch.setattr(store, "renew_lease", flaky)
    queue_claim(store)

    await d.run_once()

    assert len(tries) >= 2
    assert len(store.named("finalize")) == 1


async def test_a_fast_call_renews_no_lease(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher()
    queue_claim(store)

    await d.run_once()

    assert store.named("renew_lease") == []


async def test_slow_hedgeable_call_starts_one_hedge_on_the_first_certified_fallback(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", answer({"label": "x"}, delay=0.4))
    d = make_dispatcher(
        providers=providers(p1=p1), route={"hedge_after_s": 0.1}, certified=(("p1", "p3"),)
    )
    queue_claim(store)

    await d.run_once()

    [(args, kw)] = store.named("add_attempt")
    assert args == ("job_1", "p3", AttemptReason.HEDGE)
    assert kw == {"allow_running": True}


async def test_no_hedge_when_the_contract_is_not_hedgeable(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", answer({"label": "x"}, delay=0.3))
    d = make_dispatcher(
        providers=providers(p1=p1),
        route={"hedge_after_s": 0.05},
        contract=ToyContract(hedgeable=False),
    )
    queue_claim(store)

    await d.run_once()

    assert store.named("add_attempt") == []


async def test_no_hedge_into_an_uncertified_fallback(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", answer({"label": "x"}, delay=0.3))
    d = make_dispatcher(providers=providers(p1=p1), route={"hedge_after_s": 0.05}, certified=())
    queue_claim(store)

    await d.run_once()

    assert store.named("add_attempt") == []


async def test_no_hedge_when_the_call_answers_first(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", answer({"label": "x"}, delay=0.05))
    d = make_dispatcher(providers=providers(p1=p1), route={"hedge_after_s": 0.3})
    queue_claim(store)

    await d.run_once()
    await asyncio.sleep(0.4)

    assert store.named("add_attempt") == []


async def test_only_the_initial_attempt_is_hedged(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p2 = ScriptedProvider("p2", answer({"label": "x"}, delay=0.3))
    d = make_dispatcher(providers=providers(p2=p2), route={"hedge_after_s": 0.05})
    queue_claim(store, attempts=2, provider="p2", reason=AttemptReason.FAILOVER)

    await d.run_once()

    assert store.named("add_attempt") == []


async def test_log_lines_carry_the_job_and_attempt_ids(
    store: SpyStore, make_dispatcher: MakeDispatcher, caplog: pytest.LogCaptureFixture
) -> None:
    p1 = ScriptedProvider("p1", raises(TimedOut()))
    d = make_dispatcher(providers=providers(p1=p1))
    queue_claim(store)

    with caplog.at_level(logging.INFO, logger="gateway.dispatcher"):
        await d.run_once()

    messages = {r.getMessage(): r for r in caplog.records}
    assert set(messages) >= {"attempt claimed", "attempt outcome unknown; awaiting resolution"}
    for record in messages.values():
        assert (record.job_id, record.attempt_id) == ("job_1", "att_1")  # type: ignore[attr-defined]


async def test_a_fallback_attempt_whose_certificate_lapsed_is_failed_without_being_sent(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p2 = ScriptedProvider("p2", answer({"label": "billing"}))
    d = make_dispatcher(providers=providers(p2=p2), certified=())
    queue_claim(store, attempts=2, provider="p2", reason=AttemptReason.MANUAL)

    await d.run_once()

    assert p2.requests == []
    [(args, kw)] = store.named("fail_attempt")
    assert args[0] == "att_2"
    assert args[1]["reason"] == "not_certified"
    assert kw == {"next_provider": None}
    assert not store.named("finalize")


async def test_a_registry_that_raises_refuses_failover_instead_of_crashing(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    class BrokenRegistry:
        def can_failover(self, *args: object) -> object:
            raise ValueError("certified_at: 'soon' is not a timestamp")

    p1 = ScriptedProvider("p1", raises(Unavailable("503", status_code=503)))
    d = make_dispatcher(providers=providers(p1=p1))
    d.routes.certifications = BrokenRegistry()  # type: ignore[assignment]
    queue_claim(store)

    await d.run_once()

    [(_args, kw)] = store.named("fail_attempt")
    assert kw == {"next_provider": None}
    assert not store.named("mark_unknown")


async def test_output_the_database_cannot_store_is_a_definite_failure_not_an_unknown(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", answer({"label": "bill\x00ing"}))
    d = make_dispatcher(providers=providers(p1=p1))
    queue_claim(store)

    await d.run_once()

    [(args, kw)] = store.named("fail_attempt")
    assert args[1]["reason"] == "contract_violation"
    assert args[1]["errors"] == ["output contains U+0000"]
    assert kw == {"next_provider": "p2"}
    assert not store.named("finalize") and not store.named("mark_unknown")
