"""The attempt guard of R4, as a pure function over a job's attempts."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.domain.records import AttemptRecord
from gateway.domain.states import AttemptState


def blocking_attempt(
    attempts: Iterable[AttemptRecord],
    *,
    allow_running: bool = False,
    supersede_waiting: bool = False,
) -> AttemptRecord | None:
    """Return the attempt that forbids a new one, or None when a new attempt may start.

    ``starting`` and ``unknown`` always block; ``running`` blocks everyone but the
    dispatcher's hedge (``allow_running``); ``waiting`` (for its provider's capacity)
    blocks the automatic attempts, but not a manual one, which supersedes it
    (``supersede_waiting``): nothing of it is in flight, and its last try was refused
    before the provider did anything, so cancelling it cannot lose or repeat any work.
    """
    attempts = list(attempts)
    for attempt in attempts:
        if attempt.state.blocks_new_attempts:
            return attempt
    if not supersede_waiting:
        for attempt in attempts:
            if attempt.state is AttemptState.WAITING:
                return attempt
    if not allow_running:
        for attempt in attempts:
            if attempt.state is AttemptState.RUNNING:
                return attempt
    return None
