from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import GatewayError, InvalidInput, MalformedJson
from gateway.http.strict_json import MAX_JSON_DEPTH, _check_shape, parse_json


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"   ",
        b"{",
        b"{'a': 1}",
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": -Infinity}',
        b'{"a": 1e400}',
        b'{"a": 1, "a": 2}',
        b"\xff\xfe{}",
        b'{"a": 1} trailing',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"n": ' + b"9" * 5000 + b"}",
    ],
)
def test_malformed_bodies_are_a_400(raw: bytes) -> None:
    with pytest.raises(MalformedJson) as info:
        parse_json(raw)
    assert info.value.status == 400


def test_nesting_past_the_limit_is_a_422() -> None:
    raw = b'{"a":' * MAX_JSON_DEPTH + b"1" + b"}" * MAX_JSON_DEPTH
    assert parse_json(raw) is not None
    deeper = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(InvalidInput):
        parse_json(deeper)


@pytest.mark.parametrize(
    "raw",
    [b'{"s": "a\\u0000b"}', b'{"a\\u0000": 1}', b'[[["\\u0000"]]]', b'{"s": "\\udc00"}'],
)
def test_nul_characters_are_refused_anywhere(raw: bytes) -> None:
    with pytest.raises(InvalidInput):
        parse_json(raw)


def test_unicode_and_numbers_parse_as_json() -> None:
    assert parse_json('{"name": "Zoë ✓", "n": 1.0, "m": 1}'.encode()) == {
        "name": "Zoë ✓",
        "n": 1.0,
        "m": 1,
    }


# U+0000 is refused on purpose (test_nul_characters_are_refused_anywhere).
TEXT = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)))


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | TEXT,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
        max_leaves=20,
    )
)
def test_any_json_value_parses_back_to_itself(value: object) -> None:
    assert parse_json(json.dumps(value).encode()) == value


@given(st.binary(max_size=200))
def test_arbitrary_bytes_parse_or_give_a_4xx(raw: bytes) -> None:
    try:
        parse_json(raw)
    except GatewayError as exc:
        assert 400 <= exc.status < 500


#: Strings with what may not be stored (U+0000, lone surrogates) and what may.
hostile_text = st.text(alphabet=st.sampled_from(["a", "é", "\x00", "\ud800", "\udc00", "[", "{"]))
nested = st.recursive(
    st.none() | st.integers() | hostile_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(hostile_text, children, max_size=3)
    ),
    max_leaves=80,
)


@given(nested, st.booleans())
def test_only_bodies_that_may_hold_the_unstorable_are_walked(value: object, ascii: bool) -> None:
    """The text's quick test never lets through what the walk over every value refuses."""
    raw = json.dumps(value, ensure_ascii=ascii).encode("utf-8", "surrogatepass")
    try:
        _check_shape(json.loads(raw.decode("utf-8", "surrogatepass")))
        refused = False
    except InvalidInput:
        refused = True
    try:
        parse_json(raw)
    except InvalidInput:
        assert refused
    except MalformedJson:  # a raw surrogate is not UTF-8: refused before the walk
        assert not ascii
    else:
        assert not refused


def test_brackets_inside_strings_cost_a_walk_not_a_refusal() -> None:
    inside = {"s": "[" * (MAX_JSON_DEPTH + 5)}  # many brackets, all in a string
    assert parse_json(json.dumps(inside).encode()) == inside
