"""Scripted misbehaviour and the call log: the simulator's control state.

``POST /_sim/script`` queues behaviours; each provider request takes the next one queued for
its provider, else the next one queued for any provider, else answers normally. Every
request is logged with its downstream idempotency key, so a test can count how many times
a provider really ran a job.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from typing import Any

MAX_DELAY = 600.0  # seconds, the longest scripted delay or hang
MAX_SCRIPT_COUNT = 10_000  # behaviours one script call may queue


class BehaviourKind(enum.StrEnum):
    """What the simulator does with one request."""

    OK = "ok"  #: answer normally
    DELAY = "delay"  #: wait ``seconds``, then answer normally
    HANG = "hang"  #: never answer; hold the connection until the client gives up
    STATUS = "status"  #: answer ``code`` in the API's error shape (``retry_after`` optional)
    MALFORMED = "malformed"  #: a normal envelope whose model text is broken JSON
    TRUNCATED = "truncated"  #: declare the full Content-Length, send half the body, close
    DROP_AFTER_HEADERS = "drop_after_headers"  #: send the status line and headers, close
    #: send headers and close *without running the request*: nothing is done or stored
    #: (a request lost on its way in, e.g. a proxy that died after taking it)
    DROP_UNPROCESSED = "drop_unprocessed"
    #: answer the API's hard-quota error (OpenAI ``insufficient_quota``, Anthropic's spent
    #: credit balance, Gemini's per-day quota): waiting will not make it pass
    QUOTA = "quota"


@dataclasses.dataclass(frozen=True, slots=True)
class Behaviour:
    """One scripted behaviour for one request."""

    kind: BehaviourKind
    seconds: float = 0.0  #: for ``delay`` (seconds)
    code: int = 500  #: for ``status``
    retry_after: float | None = None  #: for ``status``: the Retry-After header (seconds)

    @classmethod
    def from_json(cls, data: Any) -> Behaviour:
        """Build a behaviour from its JSON form; raise ``ValueError`` when it is wrong."""
        if not isinstance(data, dict):
            raise ValueError("a behaviour is an object with a 'kind'")
        try:
            kind = BehaviourKind(str(data.get("kind")))
        except ValueError:
            known = ", ".join(k.value for k in BehaviourKind)
            message = f"unknown behaviour kind {data.get('kind')!r} (known: {known})"
            raise ValueError(message) from None
        allowed = {"kind", "seconds", "code", "retry_after"}
        if unknown := set(data) - allowed:
            raise ValueError(f"unknown behaviour fields: {sorted(unknown)}")
        seconds = data.get("seconds")
        if kind is BehaviourKind.DELAY and (
            not isinstance(seconds, int | float)
            or isinstance(seconds, bool)
            or not 0 <= seconds <= MAX_DELAY
        ):
            raise ValueError(f"delay needs 'seconds' between 0 and {MAX_DELAY}")
        code = data.get("code", 500)
        if kind is BehaviourKind.STATUS and (
            not isinstance(code, int) or isinstance(code, bool) or not 400 <= code <= 599
        ):
            raise ValueError("status needs an error 'code' between 400 and 599")
        retry_after = data.get("retry_after")
        if retry_after is not None and (
            not isinstance(retry_after, int | float) or retry_after < 0
        ):
            raise ValueError("'retry_after' must be a non-negative number of seconds")
        return cls(
            kind=kind,
            seconds=float(seconds) if kind is BehaviourKind.DELAY and seconds is not None else 0.0,
            code=code if kind is BehaviourKind.STATUS else 500,
            retry_after=float(retry_after) if retry_after is not None else None,
        )


class Script:
    """FIFO queues of behaviours: one per provider and one for any provider."""

    def __init__(self) -> None:
        self._by_provider: dict[str, collections.deque[Behaviour]] = {}
        self._any: collections.deque[Behaviour] = collections.deque()

    def queue(self, provider: str | None, behaviours: list[Behaviour], count: int = 1) -> int:
        """Queue ``behaviours`` ``count`` times for ``provider`` (None: any); return how many."""
        target = (
            self._any
            if provider is None
            else self._by_provider.setdefault(provider, collections.deque())
        )
        for _ in range(count):
            target.extend(behaviours)
        return len(behaviours) * count

    def next_for(self, provider: str) -> Behaviour | None:
        """Take the next behaviour for ``provider``: its own queue first, then the shared one."""
        own = self._by_provider.get(provider)
        if own:
            return own.popleft()
        if self._any:
            return self._any.popleft()
        return None

    def pending(self) -> dict[str, int]:
        """Return how many behaviours wait per provider (``*`` for any)."""
        counts = {name: len(q) for name, q in self._by_provider.items() if q}
        if self._any:
            counts["*"] = len(self._any)
        return counts

    def clear(self) -> None:
        """Forget every queued behaviour."""
        self._by_provider.clear()
        self._any.clear()


@dataclasses.dataclass(slots=True)
class CallRecord:
    """One request the simulator received (never holds headers or keys, only the facts)."""

    seq: int
    provider: str
    protocol: str
    path: str
    idempotency_key: str | None
    received_at: float  # unix seconds
    model: str | None = None
    contract: str | None = None
    system_prompt: bool = False  #: a system prompt arrived where this API wants it
    #: the behaviour kind, or ``rate_limited`` / ``outage`` for a call turned away unrun
    behaviour: str = BehaviourKind.OK.value
    status: int | None = None  #: the HTTP status sent (None: no complete status was sent)
    outcome: str = "pending"  #: ``answered``, ``error``, ``hung_up``, ``dropped``, ``truncated``
    finished_at: float | None = None  # unix seconds
    #: the id of the completion kept for a later lookup (OpenAI ``store: true``), if any
    stored_id: str | None = None
    #: the W3C ``traceparent`` the call carried (the trace it is part of), if any
    traceparent: str | None = None

    def as_json(self) -> dict[str, Any]:
        """Return the JSON form served by ``GET /_sim/calls``."""
        return dataclasses.asdict(self)
