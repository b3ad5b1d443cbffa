"""Property: over HTTP, a respelled request replays and a changed one conflicts (R2)."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SAFE_INT = 2**53
_keys = itertools.count()
# U+0000 is refused (PostgreSQL's JSONB cannot store it): see test_request_refusals.
chars = st.characters(exclude_characters="\x00", exclude_categories=("Cs",))

leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-SAFE_INT + 1, max_value=SAFE_INT - 1)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | st.text(chars, max_size=20)
)
json_values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(chars, max_size=8), inner, max_size=4)
    ),
    max_leaves=15,
)
inputs = st.dictionaries(st.text(chars, max_size=8), json_values, min_size=1, max_size=5)


def respell(value: Any, rng: random.Random) -> str:
    """Serialize ``value`` with shuffled keys and integers written as floats where exact."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        inner = ", ".join(f"{json.dumps(k)}: {respell(v, rng)}" for k, v in items)
        return "{" + inner + "}"
    if isinstance(value, list):
        return "[" + ", ".join(respell(v, rng) for v in value) + "]"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**50:
        return f"{value}.0" if rng.random() < 0.5 else str(value)
    return json.dumps(value)


def changed(value: dict[str, Any]) -> dict[str, Any]:
    """Return ``value`` with one real difference."""
    return {**value, "__changed__": [value.get("__changed__")]}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=inputs, seed=st.integers(0, 2**32))
async def test_respelled_requests_replay_and_changed_ones_conflict(
    client: httpx.AsyncClient, keys: Any, value: dict[str, Any], seed: int
) -> None:
    key = f"prop-{next(_keys)}"
    headers = {**keys.job(key=key), "Content-Type": "application/json"}
    first = await client.post(
        "/v1/jobs", json={"contract": "echo@1", "input": value}, headers=headers
    )
    assert first.status_code == 201, first.text
    body = '{"input": ' + respell(value, random.Random(seed)) + ', "contract": "echo@1"}'
    again = await client.post("/v1/jobs", content=body, headers=headers)
    assert again.status_code == 200, (body, again.text)
    assert again.json()["id"] == first.json()["id"]
    other = await client.post(
        "/v1/jobs", json={"contract": "echo@1", "input": changed(value)}, headers=headers
    )
    assert other.status_code == 409
    assert other.json()["job_id"] == first.json()["id"]
