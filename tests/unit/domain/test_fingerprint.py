"""R2's fingerprint: what the client asked for, independent of spelling."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.domain.fingerprint import UnfingerprintableInput, canonical_json, fingerprint

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def shuffled(value: Any, rnd: Any) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


@given(json_values, st.randoms())
def test_key_order_does_not_change_the_fingerprint(value: Any, rnd: Any) -> None:
    assert fingerprint("c@1", value, None) == fingerprint("c@1", shuffled(value, rnd), None)


@given(json_values)
def test_a_json_round_trip_does_not_change_the_fingerprint(value: Any) -> None:
    assert fingerprint("c@1", json.loads(json.dumps(value)), "p") == fingerprint("c@1", value, "p")


@given(st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1))
def test_integer_and_float_spelling_of_one_number_match(n: int) -> None:
    assert fingerprint("c@1", {"n": n}, None) == fingerprint("c@1", {"n": float(n)}, None)


@given(json_values, json_values)
def test_different_inputs_give_different_fingerprints(a: Any, b: Any) -> None:
    if canonical_json(a) != canonical_json(b):
        assert fingerprint("c@1", a, None) != fingerprint("c@1", b, None)


def test_contract_and_provider_are_part_of_the_intention() -> None:
    base = fingerprint("c@1", {"x": 1}, None)
    assert base != fingerprint("c@2", {"x": 1}, None)
    assert base != fingerprint("c@1", {"x": 1}, "sim-openai")
    assert len(base) == 64 and int(base, 16) >= 0


@pytest.mark.parametrize("value", [2**60, float("nan"), float("inf"), {"k": {1, 2}}])
def test_values_json_cannot_carry_are_refused(value: Any) -> None:
    with pytest.raises(UnfingerprintableInput):
        fingerprint("c@1", {"v": value}, None)


#: Every code point, lone surrogates and characters beyond U+FFFF included.
any_text = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None))
plain_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) - 2, max_value=2**53 + 2)
    | any_text
    | st.sampled_from(["", "\x00\x1f\x7f", '"\\/\b\f\n\r\t', "\u2028\u2029", "\ufeff", "é😀"]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=5)
    ),
    max_leaves=25,
)


def assert_written_as_rfc8785_writes(value: Any) -> None:
    """``canonical_json`` writes what ``rfc8785`` writes, or refuses what it refuses."""
    import rfc8785

    try:
        expected = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        with pytest.raises(UnfingerprintableInput):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


@given(plain_values | json_values)
def test_canonical_json_writes_exactly_what_rfc8785_writes(value: Any) -> None:
    assert_written_as_rfc8785_writes(value)


@pytest.mark.parametrize(
    "value",
    [
        {"\ue000": 1, "\U0001f600": 2},  # code-point order differs from UTF-16's here
        {"a": "\ud800"},  # a lone surrogate as a value
        {"\udfff": 1},  # and as a key
        {"n": 2**53 - 1, "m": -(2**53) + 1},  # the safe integers' ends
        {"n": 2**53},  # one past
        {"f": 1.0, "g": 1e21, "h": -0.0},  # floats: rfc8785's spelling
        ["\x00", "\x1f", "\x7f", "\\", '"', "\u2028"],
    ],
)
def test_canonical_json_matches_rfc8785_at_the_edges(value: Any) -> None:
    assert_written_as_rfc8785_writes(value)
