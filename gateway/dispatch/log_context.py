"""The dispatcher's one logger, and the log context of the attempt it runs, bound once.

Every line the dispatcher logs while it runs an attempt carries ``job_id``,
``attempt_id`` and ``provider``: ``attempt_logged`` binds them when the attempt starts
(``AttemptRunner.execute``), in a context variable, and a filter on the logger adds them
to each record that does not name them itself. The tasks and timers started for the
attempt (its lease renewal, its hedge, a wake-up after a wait) copy the context when they
are made, so they log with the attempt's ids too.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator

#: The one logger name of the dispatcher (runners, attempts, outcomes, leases, hedges).
DISPATCHER_LOGGER = "gateway.dispatcher"

_ATTEMPT: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "onejob_attempt_log_context", default=None
)


class AttemptFields(logging.Filter):
    """Add the bound attempt's ids to a record (a field the call named itself wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _ATTEMPT.get()
        if fields:
            for key, value in fields.items():
                if key not in record.__dict__:
                    setattr(record, key, value)
        return True


log = logging.getLogger(DISPATCHER_LOGGER)
if not any(isinstance(f, AttemptFields) for f in log.filters):
    log.addFilter(AttemptFields())


@contextlib.contextmanager
def attempt_logged(job_id: str, attempt_id: str, provider: str) -> Iterator[None]:
    """Log everything inside (and the tasks it starts) with this attempt's ids."""
    with logged_as({"job_id": job_id, "attempt_id": attempt_id, "provider": provider}):
        yield


@contextlib.contextmanager
def logged_as(fields: dict[str, str]) -> Iterator[None]:
    """Log the dispatcher's lines inside with ``fields`` (e.g. a shadow check's ids: its
    provider call is the dispatcher's ``call_provider``)."""
    token = _ATTEMPT.set(dict(fields))
    try:
        yield
    finally:
        _ATTEMPT.reset(token)
