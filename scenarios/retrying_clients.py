"""Clients that keep one intention per key and retry it until it is acknowledged, timed.

Each client makes a key, posts its job, and on a 503 (honouring ``Retry-After``) or a
broken connection posts the same body with the same key again until it gets 201 or 200;
then it makes the next key. Every try is kept with when it was sent and answered, so a
scenario can check what a partition or a failover did to each request: how long it
waited, what it was told, and that a key never named two jobs. A readiness poller keeps
``/readyz``'s answers the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import httpx

CLIENT_TIMEOUT = 30.0  # seconds one try may take before the client gives up on it
PAUSE = 0.2  # seconds a client rests between two intentions
READY_EVERY = 0.25  # seconds between readiness probes
READY_TIMEOUT = 5.0  # seconds a readiness probe may take before it counts as no answer


@dataclasses.dataclass(frozen=True, slots=True)
class Try:
    """One request of one intention."""

    key: str
    wait: int | None  #: the ``Prefer: wait`` it asked for
    sent: float  #: monotonic seconds
    answered: float  #: monotonic seconds
    status: int | None  #: None: no answer (a transport error or a timeout)
    job_id: str | None
    detail: str  #: the problem type, the transport error, or the job's status

    @property
    def took(self) -> float:
        """Return the seconds it took."""
        return self.answered - self.sent


class RetryingClients:
    """``count`` clients, the first ``waiting`` of them asking ``Prefer: wait``."""

    def __init__(
        self,
        base_urls: list[str],
        api_key: str,
        body: dict[str, Any],
        *,
        count: int,
        waiting: int = 0,
        wait: int = 5,
        prefix: str = "rc",
    ) -> None:
        self.base_urls = base_urls
        self.api_key = api_key
        self.body = body
        self.count, self.waiting, self.wait = count, waiting, wait
        self.prefix = prefix
        self.tries: list[Try] = []
        self.stop = asyncio.Event()
        self.job_of_key: dict[str, str] = {}  #: the job each acknowledged key named first

    async def run(self) -> None:
        """Run the clients until ``stop`` is set; each finishes its intention in hand."""
        limits = httpx.Limits(max_connections=self.count * 2)
        async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT, limits=limits) as http:
            await asyncio.gather(*(self._client(http, n) for n in range(self.count)))

    async def _client(self, http: httpx.AsyncClient, n: int) -> None:
        base = self.base_urls[n % len(self.base_urls)]
        wait = self.wait if n < self.waiting else None
        intention = 0
        while not self.stop.is_set():
            key = f"{self.prefix}-{n}-{intention}"
            intention += 1
            while True:
                pause = await self._try(http, base, key, wait)
                if pause is None:
                    break
                await asyncio.sleep(pause)
            await asyncio.sleep(PAUSE)

    async def _try(
        self, http: httpx.AsyncClient, base: str, key: str, wait: int | None
    ) -> float | None:
        """Post once; return the pause before trying again, or None when acknowledged."""
        headers = {"Authorization": f"Bearer {self.api_key}", "Idempotency-Key": f'"{key}"'}
        if wait is not None:
            headers["Prefer"] = f"wait={wait}"
        sent = time.monotonic()
        try:
            r = await http.post(f"{base}/v1/jobs", json=self.body, headers=headers)
        except httpx.HTTPError as exc:
            self.tries.append(Try(key, wait, sent, time.monotonic(), None, None, repr(exc)))
            return 1.0
        answered = time.monotonic()
        body = _json(r)
        job_id = body.get("id") if r.status_code in (200, 201) else None
        detail = str(body.get("status") if job_id else body.get("type", r.text[:100]))
        self.tries.append(Try(key, wait, sent, answered, r.status_code, job_id, detail))
        if job_id is not None:
            self.job_of_key.setdefault(key, str(job_id))
            return None
        if r.status_code == 503:
            return float(r.headers.get("retry-after", "1"))
        return None  # anything else is not retried: the scenario reports it


class ReadinessPoller:
    """Ask ``/readyz`` every ``READY_EVERY`` seconds; keep (asked, took, status) per probe."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.probes: list[tuple[float, float, int | None]] = []
        self.stop = asyncio.Event()

    async def run(self) -> None:
        """Probe until ``stop`` is set."""
        async with httpx.AsyncClient(timeout=READY_TIMEOUT) as http:
            while not self.stop.is_set():
                asked = time.monotonic()
                try:
                    status: int | None = (await http.get(f"{self.base_url}/readyz")).status_code
                except httpx.HTTPError:
                    status = None
                self.probes.append((asked, time.monotonic() - asked, status))
                await asyncio.sleep(READY_EVERY)

    def first(self, status: int, after: float) -> float | None:
        """Return when the first answer after ``after`` said ``status``, if one did.

        By answer time: a probe asked just before a cut, whose packets the cut dropped,
        says 503 after it, and that is the first a load balancer hears.
        """
        answers = sorted((asked + took, got) for asked, took, got in self.probes)
        return next((at for at, got in answers if at >= after and got == status), None)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
