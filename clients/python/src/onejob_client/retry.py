"""When to try a request again, and how long to wait first (no I/O: the clients sleep).

A request is tried again, with the same key and the same body, when it may not have been
answered: a connection error or a timeout, or 429, 502, 503 or 504. Any other answer,
success or refusal, is final: a 4xx would come back the same. The wait is the server's
``Retry-After`` when it sends one, else an exponential backoff with jitter (half the step
plus a random part of the other half, as stripe-python does), capped; everything stops
at the overall deadline, with ``Unavailable`` (``QueueFull`` when the last answer was the
gateway's 503 ``urn:onejob:queue-full``, which is retried the same way: it comes with a
``Retry-After``, and nothing was made for the key).
"""

from __future__ import annotations

import dataclasses
import email.utils
import random
import time
from collections.abc import Callable, Mapping

import httpx

from onejob_client.errors import QUEUE_FULL, QueueFull, Unavailable

#: Statuses that mean "not now": the same request may succeed later.
RETRY_STATUSES = frozenset({429, 502, 503, 504})


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How long one call may keep trying, and how it spaces its tries."""

    deadline: float = 60.0  # seconds for one call, every try and wait included
    request_timeout: float = 30.0  # seconds one try may take (plus any ``Prefer: wait``)
    initial_backoff: float = 0.25  # seconds before the second try
    max_backoff: float = 5.0  # seconds, the longest wait between tries
    max_retry_after: float = 60.0  # seconds: a longer ``Retry-After`` is cut to this


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Return ``Retry-After`` in seconds (delta-seconds or an HTTP date), None if absent."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class Retrying:
    """The state of one call's tries: ``wait_after_*`` say how long to sleep, or raise."""

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        extra: float = 0.0,  # seconds added to the deadline: the call's ``Prefer: wait``
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.policy = policy
        self._clock = clock
        self._rng = rng
        self._deadline = clock() + policy.deadline + extra
        self.tries = 0  #: requests sent so far
        self.last_status: int | None = None
        self.last_outcome: str | None = None
        self.last_type: str | None = None  #: the last 503's problem type

    def remaining(self) -> float:
        """Return the seconds left before the deadline."""
        return max(0.0, self._deadline - self._clock())

    def timeout(self, extra: float = 0.0) -> float:
        """Return the timeout of the next try (``extra``: a ``Prefer: wait``), and count it."""
        self.tries += 1
        return max(0.1, min(self.policy.request_timeout + extra, self.remaining()))

    def backoff(self) -> float:
        """Return the jittered exponential wait after try number ``tries``."""
        growth = 2.0 ** max(0, self.tries - 1)
        step = min(self.policy.max_backoff, self.policy.initial_backoff * growth)
        return step * (0.5 + 0.5 * self._rng())

    def wait_after_status(self, status: int, headers: Mapping[str, str]) -> float | None:
        """Return the seconds to wait before trying again, or None: the answer is final."""
        if status not in RETRY_STATUSES:
            return None
        self.last_status = status
        retry_after = parse_retry_after(headers.get("retry-after"))
        if retry_after is not None:
            # A little jitter on top, so clients told the same second do not come back
            # in step.
            delay = min(retry_after, self.policy.max_retry_after) + 0.1 * self._rng()
        else:
            delay = self.backoff()
        return self._within_deadline(delay, f"onejob answered {status}")

    def wait_after_error(self, exc: httpx.TransportError) -> float:
        """Return the seconds to wait after a try that got no answer, or raise."""
        if not isinstance(exc, httpx.TimeoutException | httpx.NetworkError | httpx.ProtocolError):
            raise exc  # a bad URL or proxy setting: trying again cannot help
        self.last_status = None
        self.last_type = None
        return self._within_deadline(
            self.backoff(), f"no answer from onejob ({type(exc).__name__})", exc
        )

    def note_outcome(self, outcome: str | None, problem_type: str | None = None) -> None:
        """Remember what an answer's 503 said, for the error raised at the deadline: its
        ``outcome`` (``unknown`` or ``not_done``) and its problem ``type``."""
        self.last_outcome = outcome
        self.last_type = problem_type

    def _within_deadline(self, delay: float, why: str, cause: Exception | None = None) -> float:
        if delay >= self.remaining():
            error = QueueFull if self.last_type == QUEUE_FULL else Unavailable
            raise error(
                f"{why}; gave up after {self.tries} tries with the same key "
                f"({self.policy.deadline:g} s deadline)",
                tries=self.tries,
                last_status=self.last_status,
                outcome=self.last_outcome,
            ) from cause
        return delay
