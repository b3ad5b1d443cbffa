"""Waiting for a provider's capacity (issue 43): the rules, as plain Python.

A provider that answers "not now" before doing anything (429 rate limit, 503/529 overload)
has done none of the work: the same request may be sent to it again later, under the same
downstream key, and a durable job is exactly what can wait. So such an answer neither
fails the attempt nor the job. What follows (``next_step``):

- with a certified fallback that can take the call, the job fails over at once when the
  wait is longer than ``patience`` (or would outlast the job's deadline); otherwise
- a job whose deadline would pass before the wait is over fails with ``job_deadline``;
- otherwise the attempt waits: ``waiting``, sent again no earlier than the time the
  provider asked for, or after a jittered exponential backoff when it asked for none
  (``backoff``), never longer than ``max_wait``.

A hard quota (a billing limit, a daily quota) is not a wait: it is a definite failure,
and fails over at once like any other. The same rules apply when the gateway itself knows
the provider would refuse (it is paused, paced, or its circuit is open): the attempt is
then not sent at all.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import random
from collections.abc import Callable


class Step(enum.StrEnum):
    """What becomes of an attempt its provider cannot take now."""

    #: Wait for the provider: ``waiting`` until the wait is over.
    WAIT = "wait"
    #: Fail over to the next certified fallback now.
    FAILOVER = "failover"
    #: The job's deadline would pass first: the job fails with ``job_deadline``.
    EXPIRE = "expire"


def backoff(
    waits: int, *, base: float, cap: float, rand: Callable[[], float] = random.random
) -> float:
    """Seconds to wait after ``waits`` earlier waits when the provider named no time:
    exponential from ``base``, at most ``cap``, with equal jitter (half of it random), so
    attempts refused together do not all come back together."""
    ceiling = min(cap, base * 2.0 ** min(waits, 32))
    return ceiling / 2 + rand() * ceiling / 2


def next_step(
    wait_s: float,
    *,
    now: dt.datetime,
    job_deadline: dt.datetime | None,
    can_fail_over: bool,
    patience: float,
) -> Step:
    """Decide what an attempt that must wait ``wait_s`` seconds for its provider does."""
    outlasts = job_deadline is not None and now + dt.timedelta(seconds=wait_s) >= job_deadline
    if can_fail_over and (wait_s > patience or outlasts):
        return Step.FAILOVER
    if outlasts:
        return Step.EXPIRE
    return Step.WAIT


@dataclasses.dataclass(frozen=True, slots=True)
class SharedCapacity:
    """What every process sharing the database knows of one provider's capacity."""

    provider: str
    paused_until: dt.datetime | None = None  #: it asked everyone to wait until then
    pause_reason: str | None = None
    circuit_until: dt.datetime | None = None  #: its circuit is open until then
    requests_per_minute: int | None = None  #: the limits it announced
    tokens_per_minute: int | None = None
    members: int = 1  #: processes pacing calls to it now (each takes its slice)


@dataclasses.dataclass(frozen=True, slots=True)
class CapacityNews:
    """What one process learned of a provider's capacity, for the others.

    A pause only ever lengthens the one in force; ``circuit`` ``open`` sets
    ``circuit_until``, ``closed`` clears it; announced limits replace the ones known.
    """

    provider: str
    paused_until: dt.datetime | None = None
    pause_reason: str | None = None
    circuit: str | None = None  #: ``open`` or ``closed`` (None: no change)
    circuit_until: dt.datetime | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
