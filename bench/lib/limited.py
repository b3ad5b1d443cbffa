"""Jobs against a rate-limited upstream: the clients, the gateway's pace as it goes, and
what the upstream's call log says (``bench.capacity``, issue 43).

The upstream is the product's simulator (``onejob sim serve``) with a token bucket on one
simulated provider (``POST /_sim/limits``): a call that finds no token is answered
OpenAI's 429 with ``retry-after``, ``retry-after-ms`` and ``x-ratelimit-*``, and is logged
with behaviour ``rate_limited`` (``GET /_sim/calls``).

Each of ``clients`` concurrent clients takes the next job of ``jobs`` and holds it until
it is settled, then takes the next: onejob's clients ``POST /v1/jobs`` with an
``Idempotency-Key`` and ``Prefer: wait=60``, then ``GET /v1/jobs/{id}`` with ``Prefer:
wait`` until the job is settled (a 503 or a dropped connection is sent again under the
same key, after its ``Retry-After``); LiteLLM's clients ``POST /v1/chat/completions`` once
(what a client of a stateless proxy has: an answer, or an error). Every loop is bounded
by ``bound_s`` from the run's start.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.lib.children import say
from bench.lib.loads import CASES, CONTRACT
from bench.lib.peers import LITELLM_KEY
from contracts.loader import load_catalog

#: A job (or a LiteLLM request) is over in one of these.
SETTLED = frozenset({"succeeded", "failed", "cancelled", "unknown"})
#: ``Prefer: wait`` per request: the most the API allows.
WAIT_S = 60
#: Seconds between two reads of ``GET /v1/providers``.
SAMPLE_S = 0.5


def contract_request(job_input: dict[str, Any]) -> dict[str, Any]:
    """The Chat Completions request a client sends LiteLLM: the contract's own messages
    (the simulator answers from the input block that ends the user message), for the
    model LiteLLM routes to the limited provider."""
    prompt = load_catalog()[CONTRACT].render(job_input)
    return {
        "model": "bench-gpt",
        "messages": [
            {"role": "system", "content": prompt.system},
            {"role": "user", "content": prompt.user},
        ],
    }


def inputs() -> list[dict[str, Any]]:
    """The contract's cases' inputs, which the jobs cycle through."""
    lines = CASES.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["input"] for line in lines if line.strip()]


@dataclass
class Outcome:
    """How one job (or request) ended, and when (seconds from the run's start)."""

    n: int
    status: str
    at_s: float
    reason: str | None = None
    waits: int = 0  #: the provider's "not now"s its attempts were told (onejob)
    attempts: int = 0


@dataclass
class Run:
    """What one system's run measured, as the clients saw it."""

    started: float  #: time.time() at the first request (the call log's clock)
    began: float  #: time.monotonic() at the same moment
    outcomes: list[Outcome] = field(default_factory=list)

    def elapsed(self) -> float:
        return time.monotonic() - self.began


async def clients_loop(
    jobs: int, clients: int, one: Callable[[int], Awaitable[Outcome]], run: Run
) -> None:
    """Run ``one(n)`` for each of ``jobs`` from ``clients`` concurrent clients; say how
    many are settled at each tenth."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(jobs):
        queue.put_nowait(n)
    step = max(1, jobs // 10)

    async def client() -> None:
        while True:
            try:
                n = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            run.outcomes.append(await one(n))
            done = len(run.outcomes)
            if done % step == 0 or done == jobs:
                bad = sum(o.status != "succeeded" for o in run.outcomes)
                say(f"  {done}/{jobs} settled at {run.elapsed():.1f} s ({bad} not succeeded)")

    await asyncio.gather(*(client() for _ in range(clients)))


async def onejob_job(
    client: httpx.AsyncClient,
    base: str,
    key: str,
    tag: str,
    n: int,
    job_input: dict[str, Any],
    run: Run,
    bound_s: float,
) -> Outcome:
    """Create job ``n`` and wait until it is settled (or ``bound_s`` from the start)."""
    auth = {"Authorization": f"Bearer {key}"}
    body = {"contract": CONTRACT, "input": job_input}
    job: dict[str, Any] | None = None
    while job is None:
        if run.elapsed() > bound_s:
            return Outcome(n, "unsettled", run.elapsed(), "client gave up before creating")
        try:
            r = await client.post(
                f"{base}/v1/jobs",
                json=body,
                headers={**auth, "Idempotency-Key": f"{tag}-{n}", "Prefer": f"wait={WAIT_S}"},
            )
        except httpx.TransportError:
            await asyncio.sleep(1.0)
            continue
        if r.status_code in (200, 201):
            job = r.json()
        elif r.status_code == 503:  # queue full, or the database: the same key again
            await asyncio.sleep(float(r.headers.get("retry-after", "1")))
        else:
            return Outcome(n, f"http-{r.status_code}", run.elapsed(), r.text[:200])
    while job["status"] not in SETTLED:
        left = bound_s - run.elapsed()
        if left <= 0:
            return Outcome(n, "unsettled", run.elapsed(), job["status"])
        wait = max(1, min(WAIT_S, int(left)))
        with contextlib.suppress(httpx.TransportError):
            r = await client.get(
                f"{base}/v1/jobs/{job['id']}", headers={**auth, "Prefer": f"wait={wait}"}
            )
            if r.status_code == 200:
                job = r.json()
    error = job.get("error") or {}
    attempts = job.get("attempts") or []
    return Outcome(
        n,
        job["status"],
        run.elapsed(),
        error.get("reason") if isinstance(error, dict) else str(error),
        sum(int(a.get("waits") or 0) for a in attempts),
        len(attempts),
    )


async def litellm_request(
    client: httpx.AsyncClient, base: str, n: int, job_input: dict[str, Any], run: Run
) -> Outcome:
    """Send request ``n`` to LiteLLM's proxy once: 200 is a succeeded job, anything else
    a failed one (its status, and the error's type)."""
    try:
        r = await client.post(
            f"{base}/v1/chat/completions",
            json=contract_request(job_input),
            headers={"Authorization": f"Bearer {LITELLM_KEY}"},
        )
    except httpx.TransportError as exc:
        return Outcome(n, "failed", run.elapsed(), type(exc).__name__)
    if r.status_code == 200:
        return Outcome(n, "succeeded", run.elapsed())
    return Outcome(n, "failed", run.elapsed(), f"http-{r.status_code}")


async def sample_providers(
    client: httpx.AsyncClient, base: str, key: str, provider: str, run: Run, stop: asyncio.Event
) -> list[dict[str, Any]]:
    """Read ``GET /v1/providers`` every ``SAMPLE_S`` until ``stop``; return ``provider``'s
    rows with the time of each (seconds from the run's start). Say one line every 5 s."""
    samples: list[dict[str, Any]] = []
    last_said = -5.0
    while not stop.is_set():
        with contextlib.suppress(httpx.HTTPError, ValueError):
            r = await client.get(f"{base}/v1/providers", headers={"Authorization": f"Bearer {key}"})
            for row in r.json()["providers"]:
                if row["name"] == provider:
                    samples.append({"t_s": round(run.elapsed(), 2), **row})
                    if run.elapsed() - last_said >= 5.0:
                        last_said = run.elapsed()
                        say("  " + pace_line(samples[-1]))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SAMPLE_S)
    return samples


def pace_line(row: dict[str, Any]) -> str:
    """One sample of ``GET /v1/providers`` as a line."""
    pause = f", paused until {row['paused_until']} ({row['pause_reason']})"
    return (
        f"[{row['t_s']:5.1f} s] pace {row.get('pace_requests_per_minute')} req/min"
        f" (share {row.get('share')}), in flight {row.get('in_flight')},"
        f" queued {row.get('queued')}, waiting {row.get('waiting')},"
        f" circuit {row.get('circuit')}" + (pause if row.get("paused_until") else "")
    )


def pace_summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """What the samples of ``GET /v1/providers`` say about the pace kept: when a pace first
    showed, its lowest and highest, how often a pause or an open circuit was seen."""
    paced = [s for s in samples if s.get("pace_requests_per_minute")]
    rates = [float(s["pace_requests_per_minute"]) for s in paced]
    return {
        "samples": len(samples),
        "first_pace_at_s": paced[0]["t_s"] if paced else None,
        "first_pace_rpm": rates[0] if rates else None,
        "min_pace_rpm": min(rates) if rates else None,
        "max_pace_rpm": max(rates) if rates else None,
        "last_pace_rpm": rates[-1] if rates else None,
        "samples_paused": sum(bool(s.get("paused_until")) for s in samples),
        "samples_circuit_open": sum(s.get("circuit") not in (None, "closed") for s in samples),
        "max_waiting": max((int(s.get("waiting") or 0) for s in samples), default=0),
        "max_queued": max((int(s.get("queued") or 0) for s in samples), default=0),
    }


def call_log(calls: list[dict[str, Any]], started: float) -> dict[str, Any]:
    """Summarize the simulator's call log of one provider over one run: the calls, the
    429s and their share, the calls per downstream key, and per second from the run's
    start how many calls came and how many were turned away."""
    turned_away = [c for c in calls if c.get("status") == 429]
    statuses = collections.Counter(str(c.get("status")) for c in calls)
    per_key = collections.Counter(
        c.get("idempotency_key") for c in calls if c.get("idempotency_key")
    )
    seconds: dict[int, list[int]] = {}
    for c in calls:
        second = int(max(0.0, float(c["received_at"]) - started))
        row = seconds.setdefault(second, [0, 0])
        row[0] += 1
        row[1] += c.get("status") == 429
    times = [float(c["received_at"]) - started for c in calls]
    return {
        "calls": len(calls),
        "answered_429": len(turned_away),
        "share_429": round(len(turned_away) / len(calls), 4) if calls else None,
        "statuses": dict(sorted(statuses.items())),
        "behaviours": dict(collections.Counter(str(c.get("behaviour")) for c in calls)),
        "keys": len(per_key),
        "max_calls_per_key": max(per_key.values(), default=0),
        "keys_sent_more_than_once": sum(v > 1 for v in per_key.values()),
        "first_call_s": round(min(times), 3) if times else None,
        "last_call_s": round(max(times), 3) if times else None,
        "first_429_s": [round(float(c["received_at"]) - started, 3) for c in turned_away[:10]],
        "per_second": [{"s": s, "calls": v[0], "429": v[1]} for s, v in sorted(seconds.items())],
    }


def outcomes_summary(run: Run, jobs: int) -> dict[str, Any]:
    """The clients' view of a run: how many succeeded, failed (and why), the time until
    every job was settled, and (onejob) how many jobs waited for capacity."""
    statuses = collections.Counter(o.status for o in run.outcomes)
    reasons = collections.Counter(
        f"{o.status}:{o.reason}" for o in run.outcomes if o.status != "succeeded"
    )
    return {
        "jobs": jobs,
        "succeeded": statuses.get("succeeded", 0),
        "not_succeeded": jobs - statuses.get("succeeded", 0),
        "statuses": dict(statuses),
        "reasons": dict(reasons),
        "all_settled_s": round(max((o.at_s for o in run.outcomes), default=0.0), 3),
        "jobs_that_waited": sum(o.waits > 0 for o in run.outcomes),
        "waits": sum(o.waits for o in run.outcomes),
        "max_waits_of_a_job": max((o.waits for o in run.outcomes), default=0),
        "max_attempts_of_a_job": max((o.attempts for o in run.outcomes), default=0),
    }
