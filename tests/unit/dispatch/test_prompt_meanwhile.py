"""A first attempt's prompt, rendered while its creation is on the wire (``ClaimSpec.meanwhile``).

The store may run the spec's ``meanwhile`` or not (it does for a PostgreSQL creation sent
alone); either way the attempt sends the same request, renders the prompt once, and a
render that fails is reported by the attempt as before.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from typing import Any

import pytest
from dispatch_fakes import MakeDispatcher, ScriptedProvider, SpyStore, make_attempt, make_job

from gateway.domain.records import ClaimedAttempt, ClaimSpec, NewJob

#: These test the shortcut itself: on, whatever ONEJOB_SHORTCUTS says.
pytestmark = pytest.mark.shortcut


def new_job(input: Any) -> NewJob:
    return NewJob(
        owner_id="o",
        idempotency_key="k",
        fingerprint="f",
        contract="toy@1",
        provider="p1",
        requested_provider=None,
        input=input,
    )


def claimed(store: SpyStore, input: Any) -> ClaimedAttempt:
    """The attempt the creating statement claimed for a job with ``input``."""
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    attempt = dataclasses.replace(
        make_attempt(1, "p1", job_id="job_1", deadline_at=deadline), id="att_1"
    )
    job = make_job("job_1", input=input)
    store.jobs["job_1"] = make_job("job_1", input=input, attempts=(attempt,))
    return ClaimedAttempt(attempt=attempt, job=job)


async def run(
    make_dispatcher: MakeDispatcher,
    store: SpyStore,
    spec_input: Any,
    job_input: Any,
    *,
    meanwhile_runs: bool,
) -> tuple[Any, ScriptedProvider, ClaimSpec]:
    """Reserve for a job with ``spec_input``, maybe run the spec's ``meanwhile`` (as the
    store would), then run the attempt claimed for a job with ``job_input``."""
    p1 = ScriptedProvider("p1")
    d = make_dispatcher(
        providers={"p1": p1, "p2": ScriptedProvider("p2"), "p3": ScriptedProvider("p3")}
    )
    await d.start()
    try:
        await asyncio.sleep(0.05)  # the runners' first look is over: their slots are free
        spec = await d.reserve("p1", new_job(spec_input))
        assert spec is not None and spec.meanwhile is not None
        if meanwhile_runs:
            spec.meanwhile()
        await asyncio.wait_for(d.run_claimed(claimed(store, job_input), spec), 5)
    finally:
        await d.stop()
    return d.catalog["toy@1"], p1, spec


@pytest.mark.parametrize("meanwhile_runs", [True, False], ids=["rendered-meanwhile", "not-run"])
async def test_the_same_request_is_sent_and_the_prompt_rendered_once(
    store: SpyStore, make_dispatcher: MakeDispatcher, meanwhile_runs: bool
) -> None:
    """Run by the store or not (a batch, SQLite), the attempt sends the same request."""
    input = {"text": "hi"}
    toy, p1, _ = await run(make_dispatcher, store, input, input, meanwhile_runs=meanwhile_runs)
    assert toy.renders == 1
    assert [r.user for r in p1.requests] == [str(input)]
    assert store.named("finalize")


async def test_a_prompt_rendered_for_another_input_is_not_used(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    # Equal but not the same object: only the very input the spec was made for counts.
    toy, p1, _ = await run(
        make_dispatcher, store, {"text": "a"}, {"text": "b"}, meanwhile_runs=True
    )
    assert toy.renders == 2
    assert [r.user for r in p1.requests] == [str({"text": "b"})]


async def test_a_render_that_fails_meanwhile_is_reported_by_the_attempt(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    bad = {"text": "unrenderable"}
    toy, p1, _ = await run(make_dispatcher, store, bad, bad, meanwhile_runs=True)
    assert toy.renders == 2  # meanwhile swallowed its error; the attempt met it again
    assert p1.requests == []  # nothing was sent
    (((_, error), _),) = [(c[0], c[1]) for c in store.named("fail_attempt")]
    assert error["reason"] == "render_failed"


async def test_a_reservation_without_its_job_carries_nothing_to_do_meanwhile(
    make_dispatcher: MakeDispatcher,
) -> None:
    d = make_dispatcher()
    await d.start()
    try:
        await asyncio.sleep(0.05)
        spec = await d.reserve("p1")
        assert spec is not None and spec.meanwhile is None
        d.release()
        spec = await d.reserve("p1", dataclasses.replace(new_job({}), contract="nope@1"))
        assert spec is not None and spec.meanwhile is None  # no such contract here
        d.release()
    finally:
        await d.stop()
