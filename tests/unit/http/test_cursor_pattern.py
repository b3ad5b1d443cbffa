"""The cursor's pattern in the OpenAPI document is exactly a shape ``decode_cursor`` takes."""

from __future__ import annotations

import base64
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.domain.clock import ulid_text
from gateway.http.openapi import CURSOR_PATTERN, JOB_ID_PATTERN
from gateway.store.rows import decode_cursor, encode_cursor

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


@given(st.integers(0, 2**48 - 1), st.integers(0, 2**80 - 1))
def test_every_job_ids_cursor_matches_the_pattern(milliseconds: int, randomness: int) -> None:
    job_id = f"job_{ulid_text(milliseconds, randomness)}"
    assert re.fullmatch(JOB_ID_PATTERN, job_id)
    assert re.fullmatch(CURSOR_PATTERN, encode_cursor(job_id))


@given(st.text(alphabet=[chr(c) for c in range(0x30, 0x60)], min_size=26, max_size=26))
def test_every_id_of_the_patterns_alphabet_is_matched(tail: str) -> None:
    assert re.fullmatch(CURSOR_PATTERN, encode_cursor(f"job_{tail}"))


@settings(max_examples=500)
@given(st.from_regex(CURSOR_PATTERN, fullmatch=True))
def test_every_text_the_pattern_matches_decodes_to_a_job_id(cursor: str) -> None:
    decoded = decode_cursor(cursor)
    assert decoded.startswith("job_") and len(decoded) == 30
    assert all(0x30 <= ord(c) <= 0x5F for c in decoded[4:])


def test_texts_off_the_shape_do_not_match() -> None:
    near = encode_cursor("job_" + "0" * 26)
    for cursor in ("0", near[:-1], near + "A", encode_cursor("job_" + "a" * 26), "am9iXw"):
        assert not re.fullmatch(CURSOR_PATTERN, cursor), cursor
    assert not re.fullmatch(CURSOR_PATTERN, base64.urlsafe_b64encode(b"x" * 30).decode())
