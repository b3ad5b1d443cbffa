"""Strings both databases can store."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.domain.jsontext import find_unstorable, scrub, unstorable_reason


def test_nul_and_lone_surrogates_are_unstorable() -> None:
    assert unstorable_reason("a\x00b") == "contains U+0000"
    assert unstorable_reason("a\ud800b") == "contains an unpaired surrogate"
    assert unstorable_reason("naïve 🧾") is None
    assert find_unstorable({"a": [1, {"k\x00": "v"}]}) == "contains U+0000"
    assert find_unstorable({"a": [1, {"k": "v"}]}) is None


@given(
    st.recursive(
        st.text() | st.integers() | st.none(),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(), c, max_size=3),
        max_leaves=10,
    )
)
def test_scrubbed_values_are_always_storable(value: object) -> None:
    assert find_unstorable(scrub(value)) is None
    if find_unstorable(value) is None:
        assert scrub(value) == value or isinstance(value, tuple)
