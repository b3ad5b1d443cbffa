"""The W3C Trace Context a job keeps: a malformed header is ignored, never an error."""

from __future__ import annotations

import pytest

from gateway.domain.trace_context import (
    MAX_TRACESTATE,
    clean_tracestate,
    job_span_id,
    job_trace_id,
    parse_traceparent,
    trace_context,
)

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_traceparent_is_kept_with_its_tracestate() -> None:
    assert trace_context([GOOD], ["rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE"]) == (
        GOOD,
        "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
    )
    parent = parse_traceparent(GOOD)
    assert parent is not None and parent.sampled and parent.header() == GOOD


@pytest.mark.parametrize(
    "value",
    [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",  # flags too short
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
        GOOD + "-extra",  # version 00 is exactly 55 characters
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  # no dash after 55
        "garbage",
    ],
)
def test_a_malformed_traceparent_is_ignored_with_its_tracestate(value: str) -> None:
    assert parse_traceparent(value) is None
    assert trace_context([value], ["rojo=1"]) == (None, None)


def test_a_later_version_is_read_as_version_00() -> None:
    later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next"
    assert trace_context([later], []) == (GOOD, None)


def test_two_traceparent_lines_are_no_context() -> None:
    assert trace_context([GOOD, GOOD], []) == (None, None)


def test_tracestate_keeps_valid_members_within_512_characters() -> None:
    assert clean_tracestate(["a=1, BAD=2 ,b@t=3", "=x"]) == "a=1,b@t=3"
    long = [f"k{i:03}={'v' * 40}" for i in range(30)]
    kept = clean_tracestate([",".join(long)])
    assert kept is not None and len(kept) <= MAX_TRACESTATE
    assert kept.split(",") == long[: len(kept.split(","))]  # whole members, in order


def test_a_jobs_span_ids_are_derived_from_its_id() -> None:
    assert job_span_id("job_1") == job_span_id("job_1") != job_span_id("job_2")
    assert 0 < job_span_id("job_1") < 2**64 and 0 < job_trace_id("job_1") < 2**128
