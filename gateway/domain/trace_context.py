"""The W3C Trace Context a job keeps (``traceparent``, ``tracestate``), and the ids its
spans derive from the job's id.

Plain rules of https://www.w3.org/TR/trace-context/ (level 1): a header that breaks them
is ignored, never an error; what is kept is at most 55 characters of ``traceparent`` and
512 of ``tracestate``. A job outlives the processes that work on it, so its span's id is
derived from its id (``job_span_id``): any process can parent an attempt on the job's
span before the process that decides the job has emitted it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence

TRACEPARENT_LENGTH = 55  # characters of a version 00 traceparent
MAX_TRACESTATE = 512  # characters of tracestate kept (the specification's minimum to pass on)
MAX_TRACESTATE_MEMBERS = 32  # list members, as the specification allows
#: version - trace-id - parent-id - trace-flags, lowercase hex.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
#: One tracestate list member: a key (simple or multi-tenant) and a value.
_MEMBER = re.compile(
    r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)
SAMPLED = 0x01  # the trace-flags bit: the caller records this trace


@dataclasses.dataclass(frozen=True, slots=True)
class TraceParent:
    """A valid ``traceparent``'s parts."""

    trace_id: int
    span_id: int
    flags: int

    @property
    def sampled(self) -> bool:
        """Say whether the caller records this trace."""
        return bool(self.flags & SAMPLED)

    def header(self) -> str:
        """The version 00 header of these parts."""
        return format_traceparent(self.trace_id, self.span_id, self.flags)


def parse_traceparent(value: str | None) -> TraceParent | None:
    """Return the parts of a valid ``traceparent``; None for a missing or malformed one.

    Version 00 is exactly 55 characters; a later version may be longer, its extra
    fields after a dash (they are dropped: the version 00 prefix is what is understood).
    """
    if value is None:
        return None
    value = value.strip(" \t")
    found = _TRACEPARENT.match(value)
    if found is None:
        return None
    version, trace_id, span_id, flags = found.groups()
    if version == "ff" or (version == "00" and len(value) != TRACEPARENT_LENGTH):
        return None
    if len(value) > TRACEPARENT_LENGTH and value[TRACEPARENT_LENGTH] != "-":
        return None
    trace, span = int(trace_id, 16), int(span_id, 16)
    if not trace or not span:
        return None
    return TraceParent(trace, span, int(flags, 16))


def clean_tracestate(values: Sequence[str]) -> str | None:
    """Return the header lines of ``tracestate`` joined, their valid members only, cut to
    ``MAX_TRACESTATE`` characters at a member's end (None: nothing left)."""
    kept: list[str] = []
    size = 0
    for line in values:
        for raw in line.split(","):
            member = raw.strip(" \t")
            if not member or _MEMBER.fullmatch(member) is None:
                continue
            grown = size + len(member) + (1 if kept else 0)
            if grown > MAX_TRACESTATE or len(kept) == MAX_TRACESTATE_MEMBERS:
                return ",".join(kept) or None
            kept.append(member)
            size = grown
    return ",".join(kept) or None


def trace_context(
    traceparents: Sequence[str], tracestates: Sequence[str]
) -> tuple[str | None, str | None]:
    """The context a request carries, as a job keeps it: ``(traceparent, tracestate)``.

    Two ``traceparent`` lines or a malformed one: no context (and then no tracestate,
    which means nothing without its parent).
    """
    if len(traceparents) != 1:
        return None, None
    parent = parse_traceparent(traceparents[0])
    if parent is None:
        return None, None
    return parent.header(), clean_tracestate(tracestates)


def format_traceparent(trace_id: int, span_id: int, flags: int) -> str:
    """A version 00 ``traceparent``."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def _digest(job_id: str) -> bytes:
    return hashlib.sha256(job_id.encode()).digest()


def job_span_id(job_id: str) -> int:
    """The span id of a job's span: the first 8 bytes of the SHA-256 of its id."""
    return int.from_bytes(_digest(job_id)[:8], "big") or 1


def job_trace_id(job_id: str) -> int:
    """The trace id of a job created with no context: the next 16 bytes of that hash."""
    return int.from_bytes(_digest(job_id)[8:24], "big") or 1
