"""R2's creation is one specification, whichever path runs it (issue 44).

A creation is decided by PostgreSQL's one statement (with the API key checked by it, or
for a known owner), by a batch of them (the ``creation_batches`` shortcut, when creations
queue while one is on the wire), by a transaction when the key's job is not visible yet
(a concurrent first click committing), or by SQLite's statements. Hypothesis sends waves
of concurrent creations (two owners, three keys, two inputs, through the API key or for
the owner) and every path must answer what one model says: per owner and key exactly one
``created``; every other answer the same job, ``replayed`` when its input is the created
one's and ``conflict`` otherwise; one ``job_created`` event per job and one ``replayed`` or
``conflict`` event per such answer, with the asked fingerprint on a conflict. On SQLite
and PostgreSQL, shortcuts on and off.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import CreateOutcome, CreateResult, NewJob
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store

EXAMPLES = int(os.environ.get("ONEJOB_PROPERTY_EXAMPLES", "0")) or 40
DERANDOMIZE = "ONEJOB_PROPERTY_EXAMPLES" not in os.environ
OWNERS = ("alice", "bob")
INPUTS = ({"text": "printer on fire"}, {"text": "printer fine"})
_runs = itertools.count()

# One creation: (owner, key, input, through the API key).
ASK = st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 1), st.booleans())
WAVES = st.lists(st.lists(ASK, min_size=1, max_size=6), min_size=1, max_size=4)


def new_job(owner: str, key: str, input_: dict[str, Any]) -> NewJob:
    return NewJob(owner, key, fingerprint("c@1", input_, None), "c@1", "a", None, input_)


async def create(
    store: SqlJobStore, secrets: dict[str, str], ask: tuple[int, int, int, bool], run: int
) -> tuple[tuple[str, str], str, CreateResult]:
    owner_at, key_at, input_at, by_key = ask
    owner, key = OWNERS[owner_at], f"run{run}-k{key_at}"
    new = new_job(owner, key, INPUTS[input_at])
    result = None
    if by_key:  # as the API does: the key checked by the creating statement, if it can
        result = await store.create_or_get_for_key(secrets[owner], dataclasses.replace(new))
    if result is None:
        result = await store.create_or_get(new)
    return (owner, key), new.fingerprint, result


async def check_waves(
    store: SqlJobStore, secrets: dict[str, str], waves: list[list[tuple[int, int, int, bool]]]
) -> None:
    run = next(_runs)
    answers: list[tuple[tuple[str, str], str, CreateResult]] = []
    for wave in waves:  # each wave at once: double clicks, retries, other keys beside
        answers += await asyncio.gather(*(create(store, secrets, ask, run) for ask in wave))
    by_pair: dict[tuple[str, str], list[tuple[str, CreateResult]]] = {}
    for pair, asked, result in answers:
        by_pair.setdefault(pair, []).append((asked, result))
    for (owner, _key), tries in by_pair.items():
        created = [(asked, r) for asked, r in tries if r.outcome is CreateOutcome.CREATED]
        assert len(created) == 1, [r.outcome for _, r in tries]
        first, job = created[0][0], created[0][1].job
        assert job.owner_id == owner and job.fingerprint == first
        expected = Counter()
        for asked, result in tries:
            assert result.job.id == job.id
            if result is created[0][1]:
                continue
            outcome = CreateOutcome.REPLAYED if asked == first else CreateOutcome.CONFLICT
            assert result.outcome is outcome, (asked == first, result.outcome)
            expected[outcome.value] += 1
        events = await store.events(job.id)
        kinds = Counter(e.kind for e in events)
        assert kinds["job_created"] == 1
        assert (kinds["replayed"], kinds["conflict"]) == (
            expected["replayed"],
            expected["conflict"],
        )
        asked_on_conflict = sorted(a for a, r in tries if r.outcome is CreateOutcome.CONFLICT)
        assert sorted(e.detail["fingerprint"] for e in events if e.kind == "conflict") == (
            asked_on_conflict
        )


@pytest.fixture(params=["on", "off"])
def shortcuts(request: pytest.FixtureRequest) -> ShortcutsConfig:
    return ShortcutsConfig() if request.param == "on" else ShortcutsConfig.all_off()


@pytest.mark.slow
def test_every_creation_path_answers_as_the_model(
    database_url: str, shortcuts: ShortcutsConfig
) -> None:
    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(
        open_store(database_url, shortcuts=shortcuts, database=DatabaseConfig.from_env())
    )
    secrets = {
        owner: loop.run_until_complete(store.create_api_key(owner, frozenset({"jobs"})))[1]
        for owner in OWNERS
    }

    @settings(
        max_examples=EXAMPLES,
        derandomize=DERANDOMIZE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(waves=WAVES)
    @example(waves=[[(0, 0, 0, True)] * 4])  # a quadruple click, all at once
    @example(waves=[[(0, 0, 0, True), (0, 0, 1, True), (1, 0, 1, False)]])  # divergent
    @example(waves=[[(0, 1, 0, False)], [(0, 1, 0, True), (0, 1, 1, False)]])  # retries
    def waves_of_creations(waves: list[list[tuple[int, int, int, bool]]]) -> None:
        loop.run_until_complete(check_waves(store, secrets, waves))

    try:
        waves_of_creations()
    finally:
        loop.run_until_complete(store.close())
        loop.close()
