"""onejob's HTTP API as requests to send and answers to read (no I/O).

``Client`` and ``AsyncClient`` share everything here; each only sends, sleeps and
reads in its own way.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any

import httpx

from onejob_client.errors import ProblemError, StreamUnsupported, problem_error
from onejob_client.intention import Intention, key_header
from onejob_client.jobs import (
    SETTLED,
    AttemptAdded,
    AttemptState,
    Created,
    Job,
    StillInProgress,
    is_settled,
)
from onejob_client.sse import EVENT_STREAM, ServerSentEvent, SSEDecoder

VERSION = "0.1.0"
USER_AGENT = f"onejob-client-python/{VERSION}"
MAX_WAIT = 60  # seconds: the most ``Prefer: wait`` the gateway honours
#: Seconds to wait before reconnecting a dropped event stream when it named no ``retry``.
STREAM_RECONNECT = 1.0
#: Seconds an open event stream may stay silent (heartbeats included) before it is
#: taken for dead and reconnected.
STREAM_SILENCE = 30.0
#: Audit event kinds that never settle a job: after any other event (a kind this client
#: does not know included) the waiter reads the job, unless the event names its status.
QUIET_KINDS = frozenset(
    {
        "job_created",
        "attempt_created",
        "attempt_running",
        # the provider said not now: the job stays queued, its attempt waits to be sent again
        "attempt_waiting",
        "replayed",
        "conflict",
        "attempt_refused",
        "cancel_refused",
        "reconciler_checked",
        "job_reopened",
        # written just after the failure it follows (a fallback the registry refused)
        "failover_skipped",
    }
)
_SETTLED_VALUES = frozenset(s.value for s in SETTLED)


@dataclasses.dataclass(frozen=True)
class Call:
    """One request to send: method, path under the base URL, headers, body."""

    method: str
    path: str
    headers: dict[str, str]
    content: bytes | None = None
    wait: float = 0.0  # seconds of ``Prefer: wait``: the try's timeout grows by this


def create_call(
    intention: Intention, wait: float | None = None, deadline_s: float | None = None
) -> Call:
    """Return the creation request of ``intention``: its key and its body, every time.

    ``deadline_s`` asks for a job deadline shorter than the route's. It is not part of the
    request's fingerprint: when an earlier try (or an earlier call) already made the job,
    the job keeps the deadline it was made with, whatever this call asks.
    """
    headers = {"Idempotency-Key": key_header(intention.key), "Content-Type": "application/json"}
    seconds = _prefer_wait(headers, wait)
    return Call("POST", "/v1/jobs", headers, _with_deadline(intention.body, deadline_s), seconds)


def job_call(job_id: str, wait: float | None = None) -> Call:
    """Return the request that reads a job (waiting up to ``wait`` s for it to settle)."""
    headers: dict[str, str] = {}
    seconds = _prefer_wait(headers, wait)
    return Call("GET", f"/v1/jobs/{job_id}", headers, None, seconds)


def attempt_call(job_id: str, provider: str) -> Call:
    """Return the fallback button's request: a manual attempt on ``provider``."""
    body = json.dumps({"provider": provider}).encode()
    headers = {"Content-Type": "application/json"}
    return Call("POST", f"/v1/jobs/{job_id}/attempts", headers, body)


def events_call(job_id: str, last_event_id: str = "") -> Call:
    """Return the request that opens the job's event stream (resuming after an id)."""
    headers = {"Accept": EVENT_STREAM, "Cache-Control": "no-cache"}
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    return Call("GET", f"/v1/jobs/{job_id}/events", headers)


def _with_deadline(body: bytes, deadline_s: float | None) -> bytes:
    """Return the intention's body with ``deadline_s`` added (the same bytes without one)."""
    if deadline_s is None:
        return body
    if isinstance(deadline_s, bool) or not 0 < deadline_s < math.inf:
        raise ValueError(f"deadline_s is a number of seconds above 0, not {deadline_s!r}")
    document = json.loads(body)
    document["deadline_s"] = deadline_s
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


def _prefer_wait(headers: dict[str, str], wait: float | None) -> float:
    if wait is None or wait <= 0:
        return 0.0
    seconds = max(1, min(MAX_WAIT, int(wait)))
    headers["Prefer"] = f"wait={seconds}"
    return float(seconds)


def raise_problem(response: httpx.Response) -> None:
    """Raise the typed error of a non-success answer; return on 2xx."""
    if response.is_success:
        return
    try:
        problem = response.json()
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        problem = {"title": response.reason_phrase, "detail": response.text[:200]}
    raise problem_error(response.status_code, problem)


def unavailable_answer(response: httpx.Response) -> tuple[str | None, str | None]:
    """Return a 503's ``outcome`` (``unknown``: may have been written; ``not_done``) and
    problem ``type`` (``urn:onejob:unavailable``, ``urn:onejob:queue-full``); Nones else."""
    if response.status_code != 503:
        return None, None
    try:
        body = response.json()
    except ValueError:
        return None, None
    if not isinstance(body, dict):
        return None, None
    outcome, kind = body.get("outcome"), body.get("type")
    return (
        str(outcome) if outcome is not None else None,
        str(kind) if kind is not None else None,
    )


def read_created(response: httpx.Response, tries: int) -> Created:
    """Read a creation's answer: the job, replayed or new; raise a refusal."""
    raise_problem(response)
    replayed = response.headers.get("idempotent-replayed", "").lower() == "true"
    return Created(Job.from_json(response.json()), replayed, response.status_code, tries)


def read_job(response: httpx.Response) -> Job:
    """Read a job; raise a refusal."""
    raise_problem(response)
    return Job.from_json(response.json())


def read_attempt(response: httpx.Response) -> AttemptAdded:
    """Read the fallback button's answer (202); raise a refusal, ``AttemptInProgress`` too."""
    raise_problem(response)
    body: dict[str, Any] = response.json()
    return AttemptAdded(Job.from_json(body), str(body.get("attempt_id", "")))


def still_in_progress(job_id: str, error: ProblemError) -> StillInProgress:
    """Turn a 409 attempt-in-progress into the fallback button's "wait" answer."""
    state = str(error.problem.get("attempt_state", AttemptState.UNKNOWN.value))
    return StillInProgress(
        job_id, str(error.problem.get("attempt_id", "")), AttemptState(state), error.detail
    )


def open_stream(response: httpx.Response) -> None:
    """Check that the events path answered a stream; raise ``StreamUnsupported`` if not."""
    raise_problem(response)
    media = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != EVENT_STREAM:
        raise StreamUnsupported(f"GET {response.url.path} answered {media or 'no media type'}")


def job_of(event: ServerSentEvent) -> Job | None:
    """Return the job an ``event: job`` carries (the gateway sends one after each change)."""
    if event.event != "job":
        return None
    data = event.json()
    if not isinstance(data, dict):
        return None
    try:
        return Job.from_json(data)
    except (KeyError, TypeError, ValueError):
        return None


def may_have_settled(event: ServerSentEvent) -> bool:
    """Say whether the job may have settled with ``event``: worth reading the job."""
    data = event.json()
    kind = event.event
    if isinstance(data, dict):
        job = data.get("job")
        status = data.get("status") or data.get("job_status")
        if status is None and isinstance(job, dict):
            status = job.get("status")
        if isinstance(status, str):
            return status in _SETTLED_VALUES
        if isinstance(data.get("kind"), str):
            kind = data["kind"]
    return kind not in QUIET_KINDS


class Waiting:
    """The state of one wait for a job to settle: deadline, stream position, fallback."""

    def __init__(
        self, timeout: float, now: float, until: Callable[[Job], bool] | None = None
    ) -> None:
        self.deadline = now + timeout
        #: when to stop: settled by default (``unknown`` included)
        self.until: Callable[[Job], bool] = until or is_settled
        self.decoder = SSEDecoder()
        self.reconnects = 0  #: event streams reopened after a drop or a close
        #: The stream sends the job itself after each change: no need to read it.
        self.job_events = False

    def new_decoder(self) -> SSEDecoder:
        """Start reading a new stream, keeping the last event id (sent on reconnection)."""
        self.decoder = SSEDecoder(self.decoder.last_event_id)
        return self.decoder

    def reconnect_delay(self) -> float:
        """Return the seconds before reopening the stream: its ``retry``, else a second."""
        if self.decoder.retry is not None:
            return self.decoder.retry / 1000.0
        return STREAM_RECONNECT

    def remaining(self, now: float) -> float:
        return max(0.0, self.deadline - now)
