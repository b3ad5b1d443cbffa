"""The event stream decoder against the WHATWG rules, however the bytes are cut."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st
from onejob_client import ServerSentEvent, SSEDecoder

STREAM = (
    "\ufeffretry: 2500\n"
    ": heartbeat\n"
    "\n"
    'id: 1\nevent: job_created\ndata: {"kind": "job_created"}\n\n'
    "data: first line\r\ndata: second line\r\n\r\n"
    "id: 3\rdata:no space\r\r"
    "data\n\n"  # a field with no colon: an empty data line
    "id\n"  # an empty id resets the last event id
    "data: x\n\n"
    "id: 7\0\ndata: nul ignored\n\n"
    "retry: soon\nevent: only-event\n\n"  # no data: nothing dispatched
    "id: 9\ndata: cut off at the end"
)
EXPECTED = [
    ServerSentEvent("job_created", '{"kind": "job_created"}', "1", 2500),
    ServerSentEvent("message", "first line\nsecond line", "1", 2500),
    ServerSentEvent("message", "no space", "3", 2500),
    ServerSentEvent("message", "", "3", 2500),
    ServerSentEvent("message", "x", "", 2500),
    ServerSentEvent("message", "nul ignored", "", 2500),
]


def decode(chunks: list[bytes]) -> tuple[list[ServerSentEvent], SSEDecoder]:
    decoder = SSEDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events, decoder


def test_the_stream_decodes_by_the_whatwg_rules() -> None:
    events, decoder = decode([STREAM.encode()])
    assert events == EXPECTED
    assert decoder.comments == 1
    # The event cut off by the end of the stream is dropped, but its id was read.
    assert decoder.last_event_id == "9"
    assert events[0].json() == {"kind": "job_created"}
    assert events[1].json() is None


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM.encode())), max_size=40))
def test_any_cutting_of_the_bytes_gives_the_same_events(cuts: list[int]) -> None:
    data = STREAM.encode()
    points = [0, *sorted(cuts), len(data)]
    events, decoder = decode([data[a:b] for a, b in itertools.pairwise(points)])
    assert events == EXPECTED
    assert decoder.last_event_id == "9"


def test_a_crlf_cut_between_its_cr_and_its_lf_is_one_line_end() -> None:
    events, _ = decode([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"])
    assert events == [ServerSentEvent("message", "a\nb", "", None)]


def test_a_resumed_decoder_starts_from_the_last_event_id() -> None:
    decoder = SSEDecoder("41")
    assert decoder.feed(b"data: next\n\n") == [ServerSentEvent("message", "next", "41", None)]
