"""The attempt guard of R4, as a pure function over a job's attempts."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.domain.records import AttemptRecord
from gateway.domain.states import AttemptState


def blocking_attempt(
    attempts: Iterable[AttemptRecord], *, allow_running: bool = False
) -> AttemptRecord | None:
    """Return the attempt that forbids a new one, or None when a new attempt may start.

    ``starting`` and ``unknown`` always block; ``running`` blocks everyone but the
    dispatcher's hedge (``allow_running``).
    """
    attempts = list(attempts)
    for attempt in attempts:
        if attempt.state.blocks_new_attempts:
            return attempt
    if not allow_running:
        for attempt in attempts:
            if attempt.state is AttemptState.RUNNING:
                return attempt
    return None
