"""A creation's JSON parameters: msgspec's text is the same JSON value as json.dumps's."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.store.rows import as_checked_json, as_json

#: What a parsed request body can hold: any integer, finite floats, no lone surrogates.
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)))
storable = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=25,
)


def typed(text: str) -> Any:
    """Read JSON text keeping what ``==`` would blur: ``1`` from ``1.0``, ``-0.0`` from ``0.0``."""
    return json.loads(
        text,
        parse_int=lambda t: ("int", int(t)),
        parse_float=lambda t: ("float", repr(float(t))),
    )


@given(storable)
def test_checked_json_is_the_same_value_as_json_dumps(value: Any) -> None:
    assert typed(as_checked_json(value)) == typed(as_json(value))


@pytest.mark.parametrize("number", [1, 1.0, -0.0, 0.0, 1e16, 1e-5, 10**20, 2.5e-300])
def test_numbers_keep_their_kind_and_value(number: float) -> None:
    assert typed(as_checked_json({"n": number})) == typed(as_json({"n": number}))


def test_big_integers_and_unicode_keep_their_text() -> None:
    value = {"n": 10**30, "x": -(10**30), "s": "é\u2028\U0001f600"}
    assert json.loads(as_checked_json(value)) == value


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_result_with_nan_is_still_refused(bad: float) -> None:
    with pytest.raises(ValueError):
        as_json({"x": bad})
