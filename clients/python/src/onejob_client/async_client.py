"""``AsyncClient``: onejob from asyncio code, the twin of ``client.Client``.

Every decision (which request, whether to retry, how long to wait, what an answer means)
is made in ``protocol`` and ``retry``; this module only sends, sleeps and reads, and
reads exactly as ``client`` does, with ``await``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import httpx

from onejob_client.errors import AttemptInProgress, StreamUnsupported
from onejob_client.intention import Intention
from onejob_client.jobs import AttemptAdded, Created, FallbackOutcome, Job, is_settled
from onejob_client.protocol import (
    STREAM_RECONNECT,
    STREAM_SILENCE,
    USER_AGENT,
    Call,
    Waiting,
    attempt_call,
    create_call,
    events_call,
    job_call,
    job_of,
    may_have_settled,
    open_stream,
    read_attempt,
    read_created,
    read_job,
    still_in_progress,
    unavailable_answer,
)
from onejob_client.retry import RETRY_STATUSES, Retrying, RetryPolicy
from onejob_client.sse import ServerSentEvent
from onejob_client.tracing import trace_headers

log = logging.getLogger("onejob_client")

OnEvent = Callable[[ServerSentEvent], None]
OnJob = Callable[[Job], None]
Until = Callable[[Job], bool]


class AsyncClient:
    """Call onejob from asyncio so that one intention stays one job, retrying safely."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        policy: RetryPolicy | None = None,
        http: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.policy = policy or RetryPolicy()
        self._auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._owns_http = http is None
        self._http = http if http is not None else httpx.AsyncClient()
        self._sleep = sleep
        self._clock = clock
        #: False once the gateway answered the events path without a stream: poll then.
        self.streams = True

    async def aclose(self) -> None:
        """Close the HTTP client if this client made it."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def create_job(
        self,
        intention: Intention,
        *,
        wait: float | None = None,
        deadline_s: float | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Created:
        """Create the intention's job, or get it back if an earlier try already made it.

        ``deadline_s`` asks for a shorter job deadline than the route's (seconds from the
        job's creation); it is not part of the fingerprint, so a job already made keeps
        its own. ``QueueFull`` (an ``Unavailable``): the gateway still refused new jobs
        when the retries ran out. ``traceparent``/``tracestate``: the W3C trace context
        the job joins; by default the current OpenTelemetry context, if it is installed.
        """
        call = create_call(intention, wait, deadline_s)
        call.headers.update(trace_headers(traceparent, tracestate) if traceparent else {})
        response, retrying = await self._send(call)
        return read_created(response, retrying.tries)

    async def get_job(self, job_id: str, *, wait: float | None = None) -> Job:
        """Return the job; with ``wait``, once it settles or after ``wait`` seconds."""
        return read_job((await self._send(job_call(job_id, wait)))[0])

    async def request_attempt(self, job_id: str, provider: str) -> AttemptAdded:
        """Add a manual attempt on ``provider``; raise ``AttemptInProgress`` while blocked."""
        return read_attempt((await self._send(attempt_call(job_id, provider)))[0])

    async def fallback(self, job_id: str, provider: str) -> FallbackOutcome:
        """Press the fallback button: an attempt added, or "still in progress, wait"."""
        try:
            return await self.request_attempt(job_id, provider)
        except AttemptInProgress as exc:
            return still_in_progress(job_id, exc)

    async def run(
        self,
        intention: Intention,
        *,
        timeout: float = 60.0,
        until: Until | None = None,
        on_event: OnEvent | None = None,
        on_job: OnJob | None = None,
        deadline_s: float | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Job:
        """Create the intention's job (or find it again) and wait for it to settle."""
        created = await self.create_job(
            intention, deadline_s=deadline_s, traceparent=traceparent, tracestate=tracestate
        )
        if on_job is not None:
            on_job(created.job)
        if (until or is_settled)(created.job):
            return created.job
        return await self.wait(
            created.job.id, timeout=timeout, until=until, on_event=on_event, on_job=on_job
        )

    async def wait(
        self,
        job_id: str,
        *,
        timeout: float = 60.0,
        until: Until | None = None,
        on_event: OnEvent | None = None,
        on_job: OnJob | None = None,
    ) -> Job:
        """Return the job once it settles (or as it is after ``timeout`` seconds).

        Waits on the job's event stream when the gateway serves one (reconnecting with
        ``Last-Event-ID`` after a drop), else with ``Prefer: wait`` polls. ``until(job)``
        says when to stop: ``is_settled`` by default (``unknown`` included); pass
        ``is_decided`` to follow an unknown job until someone resolves it.
        """
        waiting = Waiting(timeout, self._clock(), until)
        while True:
            if self.streams:
                try:
                    job = await self._stream_once(job_id, waiting, on_event, on_job)
                except StreamUnsupported as exc:
                    log.debug("no event stream, polling instead: %s", exc)
                    self.streams = False
                    continue
            else:
                left = waiting.remaining(self._clock())
                job = await self._observe(job_id, on_job, left if left >= 1 else None)
                if job.settled and not waiting.until(job):
                    # Prefer: wait answers a settled job at once: no tight loop.
                    await self._sleep(min(STREAM_RECONNECT, waiting.remaining(self._clock())))
            if waiting.until(job) or waiting.remaining(self._clock()) <= 0:
                return job

    async def _observe(self, job_id: str, on_job: OnJob | None, wait: float | None = None) -> Job:
        job = await self.get_job(job_id, wait=wait)
        if on_job is not None:
            on_job(job)
        return job

    async def _stream_once(
        self, job_id: str, waiting: Waiting, on_event: OnEvent | None, on_job: OnJob | None
    ) -> Job:
        """Read the event stream until the job settles or the stream ends; return the job."""
        decoder = waiting.new_decoder()
        call = events_call(job_id, decoder.last_event_id)
        silence = max(0.1, min(STREAM_SILENCE, waiting.remaining(self._clock())))
        try:
            async with self._http.stream(
                call.method,
                self.base_url + call.path,
                headers=self._headers(call),
                timeout=httpx.Timeout(silence),
            ) as response:
                if response.status_code not in RETRY_STATUSES:
                    open_stream(response)
                    async for chunk in response.aiter_bytes():
                        for event in decoder.feed(chunk):
                            if on_event is not None:
                                on_event(event)
                            job = job_of(event)
                            if job is not None:
                                waiting.job_events = True
                                if on_job is not None:
                                    on_job(job)
                            elif waiting.job_events or not may_have_settled(event):
                                continue
                            else:
                                job = await self._observe(job_id, on_job)
                            if waiting.until(job):
                                return job
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            log.info("event stream of %s dropped (%s); resuming", job_id, type(exc).__name__)
        job = await self._observe(job_id, on_job)
        if not waiting.until(job):
            waiting.reconnects += 1
            await self._sleep(min(waiting.reconnect_delay(), waiting.remaining(self._clock())))
        return job

    def _headers(self, call: Call) -> dict[str, str]:
        """Every request carries the current trace context (a call's own goes first)."""
        return {"User-Agent": USER_AGENT, **self._auth, **trace_headers(), **call.headers}

    async def _send(self, call: Call) -> tuple[httpx.Response, Retrying]:
        """Send ``call`` until it gets a final answer; the same key and body every time."""
        retrying = Retrying(self.policy, extra=call.wait, clock=self._clock)
        while True:
            request = self._http.build_request(
                call.method,
                self.base_url + call.path,
                headers=self._headers(call),
                content=call.content,
                timeout=retrying.timeout(call.wait),
            )
            try:
                response = await self._http.send(request)
            except httpx.TransportError as exc:
                delay = retrying.wait_after_error(exc)
                log.info("%s %s: %s; retry in %.2f s", call.method, call.path, exc, delay)
                await self._sleep(delay)
                continue
            retrying.note_outcome(*unavailable_answer(response))
            delay_or_none = retrying.wait_after_status(response.status_code, response.headers)
            if delay_or_none is None:
                return response, retrying
            log.info(
                "%s %s: %d; retry in %.2f s",
                call.method,
                call.path,
                response.status_code,
                delay_or_none,
            )
            await self._sleep(delay_or_none)
