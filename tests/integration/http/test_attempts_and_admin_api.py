"""The fallback button (R4), admin resolution, cancel, and the CAS seen through the API."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from gateway.domain.records import FinalizeOutcome
from gateway.domain.states import AttemptState
from gateway.store import SqlJobStore

ECHO = "echo@1"
LEASE = {"lease_ttl": 30.0, "deadline_s": {}, "default_deadline_s": 30.0}


async def new_job(client: httpx.AsyncClient, keys: Any, key: str = '"k-1"') -> dict[str, Any]:
    r = await client.post(
        "/v1/jobs", json={"contract": ECHO, "input": {"n": 1}}, headers=keys.job(key=key)
    )
    assert r.status_code == 201, r.text
    return r.json()


async def ask_attempt(
    client: httpx.AsyncClient, keys: Any, job_id: str, provider: str = "sim-openai"
) -> httpx.Response:
    return await client.post(
        f"/v1/jobs/{job_id}/attempts", json={"provider": provider}, headers=keys.auth()
    )


async def resolve(
    client: httpx.AsyncClient, keys: Any, attempt_id: str, **body: Any
) -> httpx.Response:
    return await client.post(
        f"/v1/admin/attempts/{attempt_id}/resolve", json=body, headers=keys.auth("admin")
    )


async def test_a_manual_attempt_is_refused_while_one_is_starting_running_or_unknown(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    job = await new_job(client, keys)
    first = job["attempts"][0]["id"]

    r = await ask_attempt(client, keys, job["id"])
    assert r.status_code == 409
    assert r.json()["type"] == "urn:onejob:attempt-in-progress"
    assert (r.json()["attempt_id"], r.json()["attempt_state"]) == (first, "starting")

    claimed = await store.claim_next_attempt("w1", **LEASE)
    assert claimed is not None and claimed.attempt.id == first
    r = await ask_attempt(client, keys, job["id"])
    assert (r.status_code, r.json()["attempt_state"]) == (409, "running")

    await store.mark_unknown(first, {"reason": "timeout"})
    r = await ask_attempt(client, keys, job["id"])
    assert (r.status_code, r.json()["attempt_state"]) == (409, "unknown")
    assert r.json()["attempt_id"] == first

    after = await store.get_job(job["id"])
    assert after is not None and len(after.attempts) == 1


async def test_after_admin_resolves_the_unknown_attempt_as_failed_a_manual_attempt_is_accepted(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    job = await new_job(client, keys)
    first = job["attempts"][0]["id"]
    await store.claim_next_attempt("w1", **LEASE)
    await store.mark_unknown(first, {"reason": "timeout"})

    listed = await client.get("/v1/admin/attempts?state=unknown", headers=keys.auth("admin"))
    assert listed.status_code == 200
    assert [a["id"] for a in listed.json()["attempts"]] == [first]
    assert listed.json()["attempts"][0]["job_id"] == job["id"]

    r = await resolve(client, keys, first, outcome="failed", note="provider says no")
    assert r.status_code == 200, r.text
    assert r.json()["attempt"]["state"] == "failed"

    r = await ask_attempt(client, keys, job["id"])
    assert r.status_code == 202, r.text
    assert r.headers["location"] == f"/v1/jobs/{job['id']}"
    body = r.json()
    assert [(a["number"], a["reason"], a["state"]) for a in body["attempts"]] == [
        (1, "initial", "failed"),
        (2, "manual", "starting"),
    ]
    assert body["attempt_id"] == body["attempts"][1]["id"]

    again = await ask_attempt(client, keys, job["id"])
    assert (again.status_code, again.json()["attempt_state"]) == (409, "starting")


async def test_resolving_an_attempt_that_is_not_unknown_is_a_409(
    client: httpx.AsyncClient, keys: Any
) -> None:
    job = await new_job(client, keys)
    r = await resolve(client, keys, job["attempts"][0]["id"], outcome="failed")
    assert r.status_code == 409
    assert r.json()["type"] == "urn:onejob:not-unknown"
    assert r.json()["attempt_state"] == "starting"


async def test_resolving_as_succeeded_checks_the_result_against_the_contract_and_finalizes(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    job = await new_job(client, keys)
    first = job["attempts"][0]["id"]
    await store.claim_next_attempt("w1", **LEASE)
    await store.mark_unknown(first, {"reason": "timeout"})

    bad = await resolve(client, keys, first, outcome="succeeded", result={"nope": 1})
    assert bad.status_code == 422
    assert bad.json()["type"] == "urn:onejob:invalid-input"
    missing = await resolve(client, keys, first, outcome="succeeded")
    assert missing.status_code == 422
    weird = await resolve(client, keys, first, outcome="exploded")
    assert weird.status_code == 422

    ok = await resolve(client, keys, first, outcome="succeeded", result={"echo": 1}, note="seen")
    assert ok.status_code == 200, ok.text
    done = ok.json()["job"]
    assert (done["status"], done["result"], done["completed_by"]) == (
        "succeeded",
        {"echo": 1},
        first,
    )
    assert done["version"] == 2

    closed = await ask_attempt(client, keys, job["id"])
    assert closed.status_code == 409
    assert closed.json()["type"] == "urn:onejob:job-closed"


async def test_a_fallback_needs_a_certificate_and_an_unknown_provider_is_refused(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore, certifications: Any
) -> None:
    job = await new_job(client, keys)
    first = job["attempts"][0]["id"]
    await store.claim_next_attempt("w1", **LEASE)
    await store.mark_unknown(first, {"reason": "timeout"})
    await resolve(client, keys, first, outcome="failed")

    unknown = await ask_attempt(client, keys, job["id"], provider="nope")
    assert (unknown.status_code, unknown.json()["type"]) == (422, "urn:onejob:unknown-provider")
    refused = await ask_attempt(client, keys, job["id"], provider="sim-anthropic")
    assert refused.status_code == 422
    assert refused.json()["type"] == "urn:onejob:fallback-not-certified"
    assert "missing certificate" in refused.json()["detail"]
    [audit] = [e for e in await store.events(job["id"]) if e.kind == "attempt_refused"]
    assert audit.detail["why"] == "fallback not certified"
    assert audit.detail["provider"] == "sim-anthropic"
    not_a_string = await client.post(
        f"/v1/jobs/{job['id']}/attempts", json={"provider": 7}, headers=keys.auth()
    )
    assert not_a_string.status_code == 422
    after = await store.get_job(job["id"])
    assert after is not None and len(after.attempts) == 1

    certifications.pairs.add(("sim-openai", "sim-anthropic"))
    accepted = await ask_attempt(client, keys, job["id"], provider="sim-anthropic")
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["attempts"][-1]["provider"] == "sim-anthropic"


async def test_cancel_closes_the_job_once_and_later_cancels_say_so(
    client: httpx.AsyncClient, keys: Any
) -> None:
    job = await new_job(client, keys)
    r = await client.post(f"/v1/jobs/{job['id']}/cancel", headers=keys.auth())
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["version"]) == ("cancelled", 2)
    assert r.json()["attempts"][0]["state"] == "cancelled"
    again = await client.post(f"/v1/jobs/{job['id']}/cancel", headers=keys.auth())
    assert (again.status_code, again.json()["version"]) == (200, 2)
    attempt = await ask_attempt(client, keys, job["id"])
    assert (attempt.status_code, attempt.json()["type"]) == (409, "urn:onejob:job-closed")


async def test_cancelling_a_succeeded_job_is_a_409(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    job = await new_job(client, keys)
    claimed = await store.claim_next_attempt("w1", **LEASE)
    assert claimed is not None
    assert (await store.finalize(claimed.attempt.id, {"echo": 1})).outcome is FinalizeOutcome.WON
    r = await client.post(f"/v1/jobs/{job['id']}/cancel", headers=keys.auth())
    assert r.status_code == 409
    assert (r.json()["type"], r.json()["job_status"]) == ("urn:onejob:job-closed", "succeeded")


@pytest.mark.parametrize("round_", range(5))
async def test_a_cancel_racing_a_finalize_takes_effect_only_if_it_wins(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore, round_: int
) -> None:
    job = await new_job(client, keys)
    claimed = await store.claim_next_attempt("w1", **LEASE)
    assert claimed is not None
    cancel, final = await asyncio.gather(
        client.post(f"/v1/jobs/{job['id']}/cancel", headers=keys.auth()),
        store.finalize(claimed.attempt.id, {"echo": round_}),
    )
    after = await store.get_job(job["id"])
    assert after is not None and after.version == 2
    if final.outcome is FinalizeOutcome.WON:
        assert cancel.status_code == 409
        assert (after.status.value, after.result) == ("succeeded", {"echo": round_})
    else:
        assert cancel.status_code == 200
        assert (after.status.value, after.result) == ("cancelled", None)
        assert after.attempts[0].state is AttemptState.LOST


async def test_the_job_shows_the_attempt_that_won_the_cas(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore, certifications: Any
) -> None:
    job = await new_job(client, keys)
    slow = await store.claim_next_attempt("w1", **LEASE)
    assert slow is not None
    await store.mark_unknown(slow.attempt.id, {"reason": "timeout"})
    await resolve(client, keys, slow.attempt.id, outcome="failed")
    await ask_attempt(client, keys, job["id"])
    fast = await store.claim_next_attempt("w2", **LEASE)
    assert fast is not None
    assert (await store.finalize(fast.attempt.id, {"echo": "fast"})).outcome is FinalizeOutcome.WON
    r = await client.get(f"/v1/jobs/{job['id']}", headers=keys.auth())
    assert (r.json()["result"], r.json()["completed_by"]) == ({"echo": "fast"}, fast.attempt.id)


async def test_resolving_unknown_as_failed_fails_over_to_the_certified_fallback(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore, certifications: Any
) -> None:
    certifications.pairs.add(("sim-openai", "sim-anthropic"))
    job = await new_job(client, keys)
    first = job["attempts"][0]["id"]
    await store.claim_next_attempt("w1", **LEASE)
    await store.mark_unknown(first, {"reason": "timeout"})

    r = await resolve(client, keys, first, outcome="failed", note="provider confirmed no work")
    assert r.status_code == 200, r.text

    after = await store.get_job(job["id"])
    assert after is not None
    assert [(a.number, a.provider, a.reason.value, a.state.value) for a in after.attempts] == [
        (1, "sim-openai", "initial", "failed"),
        (2, "sim-anthropic", "failover", "starting"),
    ]
    assert after.status.value == "queued"
    assert "failover_skipped" not in [e.kind for e in await store.events(job["id"])]


async def test_resolving_unknown_as_failed_without_a_certified_fallback_leaves_the_job_failed(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    job = await new_job(client, keys)
    first = job["attempts"][0]["id"]
    await store.claim_next_attempt("w1", **LEASE)
    await store.mark_unknown(first, {"reason": "timeout"})
    r = await resolve(client, keys, first, outcome="failed")
    assert r.status_code == 200, r.text
    after = await store.get_job(job["id"])
    assert after is not None and len(after.attempts) == 1
    assert after.status.value == "failed"
    # The job says which configured fallback was passed over, and why (as after the
    # dispatcher's own failures).
    r = await client.get(f"/v1/jobs/{job['id']}/events", headers=keys.auth())
    [skipped] = [e for e in r.json()["events"] if e["kind"] == "failover_skipped"]
    assert skipped["attempt_id"] == first
    assert skipped["detail"] == {
        "fallback": "sim-anthropic",
        "primary": "sim-openai",
        "reason": "missing certificate for sim-anthropic",
    }


async def test_resolving_an_attempt_that_does_not_exist_is_a_404(
    client: httpx.AsyncClient, keys: Any
) -> None:
    r = await resolve(client, keys, "att_00000000000000000000000000", outcome="failed")
    assert r.status_code == 404
    assert r.json()["type"] == "urn:onejob:not-found"


async def test_the_audit_trail_shows_replays_refusals_and_is_private(
    client: httpx.AsyncClient, keys: Any
) -> None:
    job = await new_job(client, keys)
    replay = await client.post(
        "/v1/jobs", json={"contract": ECHO, "input": {"n": 1}}, headers=keys.job()
    )
    assert replay.status_code == 200
    refused = await ask_attempt(client, keys, job["id"])
    assert refused.status_code == 409

    r = await client.get(f"/v1/jobs/{job['id']}/events", headers=keys.auth())
    assert r.status_code == 200, r.text
    kinds = [e["kind"] for e in r.json()["events"]]
    assert kinds == ["job_created", "attempt_created", "replayed", "attempt_refused"]
    refusal = r.json()["events"][-1]
    assert refusal["detail"]["blocking"] == job["attempts"][0]["id"]

    other = await client.get(f"/v1/jobs/{job['id']}/events", headers=keys.auth("bob"))
    assert other.status_code == 404
