from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import InvalidIdempotencyKey
from gateway.http.idempotency import MAX_KEY_LENGTH, parse_idempotency_key

PRINTABLE = st.text(alphabet=[chr(c) for c in range(0x20, 0x7F)], min_size=1, max_size=255)
TOKEN_CHARS = "!#$%&'*+-.^_`|~:/" + string.ascii_letters + string.digits


def sf_string(key: str) -> str:
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ('"abc"', "abc"),
        ("abc", "abc"),
        ("0f8fad5b-d9cb-469f-a165-70867728950e", "0f8fad5b-d9cb-469f-a165-70867728950e"),
        ('"a\\"b"', 'a"b'),
        ('"a\\\\b"', "a\\b"),
        ('"with space, and comma"', "with space, and comma"),
        ("  padded  ", "padded"),
        ("order:42/retry", "order:42/retry"),
    ],
)
def test_valid_keys_are_unquoted(header: str, key: str) -> None:
    assert parse_idempotency_key([header]) == key


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [""],
        ["   "],
        ['""'],
        ["abc", "abc"],
        ["abc, def"],
        ['"abc", "abc"'],
        ['"abc"def'],
        ['"abc'],
        ['"a\\nb"'],
        ["abc;param=1"],
        ['"abc";p'],
        ["(abc)"],
        ["a b"],
        ["café"],
        ['"café"'],
        ['"tab\there"'],
        ["x" * (MAX_KEY_LENGTH + 1)],
        [sf_string("y" * (MAX_KEY_LENGTH + 1))],
    ],
)
def test_bad_or_repeated_headers_are_refused(headers: list[str]) -> None:
    with pytest.raises(InvalidIdempotencyKey):
        parse_idempotency_key(headers)


def test_a_key_of_exactly_the_maximum_length_is_accepted() -> None:
    assert parse_idempotency_key(["k" * MAX_KEY_LENGTH]) == "k" * MAX_KEY_LENGTH


def test_the_refusal_is_a_400_problem() -> None:
    with pytest.raises(InvalidIdempotencyKey) as info:
        parse_idempotency_key(["a, b"])
    assert info.value.status == 400
    assert info.value.type == "urn:onejob:invalid-idempotency-key"


@given(PRINTABLE)
def test_any_printable_key_round_trips_through_an_sf_string(key: str) -> None:
    assert parse_idempotency_key([sf_string(key)]) == key


@given(st.text(alphabet=TOKEN_CHARS, min_size=1, max_size=255))
def test_any_token_is_its_own_key(token: str) -> None:
    assert parse_idempotency_key([token]) == token


@given(st.text(max_size=300))
def test_the_parser_accepts_only_printable_keys_of_valid_length_or_refuses_cleanly(
    raw: str,
) -> None:
    try:
        key = parse_idempotency_key([raw])
    except InvalidIdempotencyKey:
        return
    assert 1 <= len(key) <= MAX_KEY_LENGTH
    assert all(" " <= ch <= "~" for ch in key)


@given(PRINTABLE, PRINTABLE)
def test_two_joined_sf_strings_are_refused(a: str, b: str) -> None:
    with pytest.raises(InvalidIdempotencyKey):
        parse_idempotency_key([f"{sf_string(a)}, {sf_string(b)}"])
