"""Clients that keep one intention per key and retry it until acknowledged, timed.

Each client posts a job under a fresh ``Idempotency-Key`` and, on a 503 or when no answer
comes (a refused or dropped connection, a timeout), sends the same key and the same body
again, to the next gateway, after ``Retry-After``, until a gateway answers 201 or 200; then
it takes a new key. That is the client the gateway's 503 asks for: a retry with the same
key is safe, whether the first try committed or not. Every answer is kept with its time,
so a fault's longest stretch without a 201, and the statuses around it, are read after.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

READY_EVERY = 0.25  # seconds between readiness probes
READY_TIMEOUT = 5.0  # seconds a readiness probe may take before it counts as no answer
REQUEST_TIMEOUT = 30.0  # seconds one request may take (the gateway bounds its own waits)
RETRY_AFTER_CAP = 5.0  # seconds, the most a client honours of a Retry-After
NO_ANSWER_PAUSE = 0.5  # seconds before a retry that got no HTTP answer at all
FINISH_WITHIN = 30.0  # seconds a client keeps retrying its last key once asked to stop
UNAVAILABLE = "urn:onejob:unavailable"
#: What a client may be told: a job (new or replayed), or "the database failed, retry".
EXPECTED = frozenset({200, 201, 503})


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """One request a client sent and what came back."""

    sent: float  # monotonic seconds
    answered: float  # monotonic seconds
    client: int
    key: str
    gateway: int  #: index into the base URLs
    status: int | None  #: None: no HTTP answer (the error's class is in ``problem``)
    job_id: str | None = None
    problem: str = ""  #: a problem's ``type``, or the transport error's class name
    outcome: str = ""  #: a 503's ``outcome``: ``unknown`` (may have committed) or ``not_done``
    retry_after: float | None = None  # seconds, the answer's Retry-After
    wait: int | None = None  #: the ``Prefer: wait`` it asked for

    @property
    def took(self) -> float:
        """Return the seconds it took."""
        return self.answered - self.sent

    @property
    def label(self) -> str:
        """Name the answer for a count: ``201``, ``503 unknown``, ``no answer (ReadTimeout)``."""
        if self.status is None:
            return f"no answer ({self.problem})"
        if self.status == 503:
            return f"503 {self.outcome or self.problem or '?'}"
        return str(self.status)


class RetryingClients:
    """``clients`` clients creating jobs on the gateways until stopped (module docstring)."""

    def __init__(
        self,
        base_urls: list[str],
        api_key: str,
        body: Callable[[int], dict[str, Any]],
        *,
        clients: int = 10,
        pause: float = 0.3,  # seconds a client waits between two jobs
        prefix: str = "fo",
        waiting: int = 0,  # of the clients, those that ask ``Prefer: wait=wait``
        wait: int = 5,  # seconds
    ) -> None:
        self.base_urls = base_urls
        self.api_key = api_key
        self.body = body
        self.clients = clients
        self.pause = pause
        self.prefix = prefix
        self.waiting, self.wait = waiting, wait
        self.answers: list[Answer] = []
        self._stop = asyncio.Event()
        self._seq = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        self._http: httpx.AsyncClient | None = None

    def start(self) -> None:
        """Start every client."""
        limits = httpx.Limits(max_connections=self.clients * 2)
        self._http = httpx.AsyncClient(timeout=REQUEST_TIMEOUT, limits=limits)
        self._tasks = [asyncio.create_task(self._client(i)) for i in range(self.clients)]

    async def stop(self) -> None:
        """Let each client finish its key (bounded), then close the connections."""
        self._stop.set()
        try:
            await asyncio.wait_for(
                asyncio.gather(*self._tasks, return_exceptions=True),
                FINISH_WITHIN + REQUEST_TIMEOUT,
            )
        except TimeoutError:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()
        for task in self._tasks:
            if not task.cancelled() and (exc := task.exception()) is not None:
                raise exc

    async def _client(self, client: int) -> None:
        gateway = client % len(self.base_urls)
        while not self._stop.is_set():
            seq = next(self._seq)
            key, body = f"{self.prefix}-{client}-{seq}", self.body(seq)
            stop_by: float | None = None
            while True:
                answer = await self._post(client, gateway, key, body)
                self.answers.append(answer)
                if answer.status in (200, 201):
                    break
                if self._stop.is_set():
                    stop_by = stop_by or time.monotonic() + FINISH_WITHIN
                    if time.monotonic() > stop_by:
                        break
                gateway = (gateway + 1) % len(self.base_urls)  # as a load balancer would
                await asyncio.sleep(self._wait_before_retry(answer))
            await asyncio.sleep(self.pause)

    async def _post(self, client: int, gateway: int, key: str, body: dict[str, Any]) -> Answer:
        assert self._http is not None
        headers = {"Authorization": f"Bearer {self.api_key}", "Idempotency-Key": f'"{key}"'}
        wait = self.wait if client < self.waiting else None
        if wait is not None:
            headers["Prefer"] = f"wait={wait}"
        sent = time.monotonic()
        url = f"{self.base_urls[gateway]}/v1/jobs"
        try:
            response = await self._http.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            failed = type(exc).__name__
            return Answer(
                sent, time.monotonic(), client, key, gateway, None, None, failed, wait=wait
            )
        answered = time.monotonic()
        parsed: Any = None
        with contextlib.suppress(ValueError):
            parsed = response.json()
        fields = parsed if isinstance(parsed, dict) else {}
        status = response.status_code
        job_id = str(fields["id"]) if status in (200, 201) and "id" in fields else None
        problem = str(fields.get("type", "")) if status >= 400 else ""
        outcome = str(fields.get("outcome", "")) if status == 503 else ""
        header = response.headers.get("retry-after", "")
        retry_after = float(header) if header.isdigit() else None
        if status == 503 and retry_after is None:
            problem = f"{problem} without Retry-After"
        return Answer(
            sent,
            answered,
            client,
            key,
            gateway,
            status,
            job_id,
            problem,
            outcome,
            retry_after,
            wait,
        )

    def _wait_before_retry(self, answer: Answer) -> float:
        if answer.status is None:
            return NO_ANSWER_PAUSE
        return min(answer.retry_after or 1.0, RETRY_AFTER_CAP)

    # -- what they were told ---------------------------------------------------------------

    def acknowledged(self) -> dict[str, set[str]]:
        """Return every key that got a job (201 or 200) and the job ids it was given."""
        jobs: dict[str, set[str]] = {}
        for a in self.answers:
            if a.status in (200, 201) and a.job_id is not None:
                jobs.setdefault(a.key, set()).add(a.job_id)
        return jobs

    def statuses(self, began: float | None = None, ended: float | None = None) -> Counter[str]:
        """Count the answers (by ``Answer.label``) that came between two moments."""
        return Counter(
            a.label
            for a in self.answers
            if (began is None or a.answered >= began) and (ended is None or a.answered < ended)
        )

    def unexpected(self) -> list[Answer]:
        """Return the answers that were neither 201, 200 nor a 503 ``unavailable``."""
        return [
            a
            for a in self.answers
            if a.status is not None
            and (a.status not in EXPECTED or (a.status == 503 and a.problem != UNAVAILABLE))
        ]

    def first_created_after(self, moment: float) -> float | None:
        """Return when the first 201 sent after the moment came back (None: none yet)."""
        times = [a.answered for a in self.answers if a.status == 201 and a.sent >= moment]
        return min(times, default=None)

    def longest_without_created(self, began: float, ended: float) -> float:
        """Return the longest stretch between two 201s that ended in [began, ended).

        A stretch counts where the 201s came back, so a fault's outage is its own even
        when the last 201 before it came a moment before the fault was recorded.
        """
        times = sorted(a.answered for a in self.answers if a.status == 201)
        gaps = [
            after - before for before, after in itertools.pairwise(times) if began <= after < ended
        ]
        if not any(began <= t < ended for t in times):  # no 201 came back in the stretch
            gaps.append(ended - max((t for t in times if t < began), default=began))
        return max(gaps, default=0.0)


class ReadinessPoller:
    """Ask ``/readyz`` every ``READY_EVERY`` seconds; keep (asked, took, status) per probe.

    It probes from a thread of its own with a blocking client, as a load balancer's health
    checker is a process of its own: timed on the scenario's event loop, which also runs
    the load's clients, a probe counted that loop's lag (CI saw 1.22 s and 1.46 s while
    the gateway's access log said no answer took over 0.91 s).
    """

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.probes: list[tuple[float, float, int | None]] = []
        self.stop = threading.Event()

    async def run(self) -> None:
        """Probe until ``stop`` is set."""
        await asyncio.to_thread(self._probe_until_stopped)

    def _probe_until_stopped(self) -> None:
        with httpx.Client(timeout=READY_TIMEOUT) as http:
            while not self.stop.is_set():
                asked = time.monotonic()
                try:
                    status: int | None = http.get(f"{self.base_url}/readyz").status_code
                except httpx.HTTPError:
                    status = None
                self.probes.append((asked, time.monotonic() - asked, status))
                self.stop.wait(READY_EVERY)

    def first(self, status: int, after: float) -> float | None:
        """Return when the first answer after ``after`` said ``status``, if one did.

        By answer time: a probe asked just before a cut, whose packets the cut dropped,
        says 503 after it, and that is the first a load balancer hears.
        """
        answers = sorted((asked + took, got) for asked, took, got in self.probes)
        return next((at for at, got in answers if at >= after and got == status), None)
