"""What a scenario body works with: processes, a recording HTTP client, checks, a timeline."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from scenarios.harness import Harness, HarnessError, Process
from scenarios.model import Check, Exchange, MarkKind, TimelineMark
from scenarios.setup import GatewayConfig, database_kind, fresh_database
from scenarios.workload import sample_input

BODY_LIMIT = 2000  # characters of a request or response body kept in the report
REQUEST_TIMEOUT = 30.0  # seconds, one HTTP request of a scenario
KEPT_HEADERS = (
    "idempotency-key", "prefer", "location", "idempotent-replayed", "preference-applied",
    "content-type", "retry-after", "x-onejob-instance",
)


class ScenarioFailure(Exception):
    """A check did not hold; the message says which and why."""


class ScenarioSkipped(Exception):
    """A prerequisite is missing; the message says which."""


def _iso_to_unix(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


_STATE_MARK = {
    "succeeded": MarkKind.WON,
    "lost": MarkKind.LOST,
    "failed": MarkKind.FAILED,
    "cancelled": MarkKind.CANCELLED,
    "unknown": MarkKind.TIMED_OUT,
}


class ScenarioContext:
    """One scenario's processes, HTTP exchanges, checks and timeline."""

    def __init__(
        self,
        name: str,
        harness: Harness,
        database_url: str | None,
        registry_factory: Callable[[ScenarioContext], Awaitable[Path]],
    ) -> None:
        self.name = name
        self.harness = harness
        self.database_url = database_url
        self.db_kind = database_kind(database_url)
        self.t0 = time.time()
        self.checks: list[Check] = []
        self.exchanges: list[Exchange] = []
        self.timeline: list[TimelineMark] = []
        self.notes: list[str] = []
        self.timeline_source = "attempts and simulator calls"
        self._registry_factory = registry_factory
        self._drops: list[Callable[[], Awaitable[None]]] = []
        self._watched: list[tuple[Process, str, str, Process | None, str]] = []
        self.http = httpx.AsyncClient(
            timeout=REQUEST_TIMEOUT,
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=200),
        )

    # -- time and checks -------------------------------------------------------------

    def now(self) -> float:
        """Return seconds since the scenario started."""
        return time.time() - self.t0

    def rel(self, unix: float) -> float:
        """Turn a unix time into seconds since the scenario started."""
        return unix - self.t0

    def expect(self, ok: bool, what: str, detail: str = "") -> None:
        """Record a check; stop the scenario with FAIL when it does not hold."""
        self.checks.append(Check(what=what, ok=bool(ok), detail=detail))
        if not ok:
            raise ScenarioFailure(f"{what}: {detail}" if detail else what)

    def note(self, text: str) -> None:
        """Record something a reader of the report should know."""
        self.notes.append(text)

    def action(self, label: str) -> None:
        """Put something the scenario did on the timeline."""
        self.timeline.append(TimelineMark(self.now(), "scenario", MarkKind.ACTION, label))

    # -- processes -------------------------------------------------------------------

    async def fresh_db(self, tag: str = "db") -> str:
        """Create a fresh database for this scenario and return its URL."""
        url, drop = await fresh_database(
            self.database_url, self.harness.work_dir, f"{self.name}-{tag}"
        )
        self._drops.append(drop)
        return url

    async def simulator(self, name: str = "sim", port: int | None = None) -> Process:
        """Start a simulator process."""
        return await self.harness.start_simulator(name, port)

    async def gateway(
        self, name: str, config: GatewayConfig, database_url: str, port: int | None = None
    ) -> Process:
        """Write ``config`` and start a gateway process on ``database_url``."""
        path = config.write(self.harness.work_dir / f"{name}.toml")
        return await self.harness.start_gateway(name, path, database_url, port)

    async def certified_registry(self) -> Path:
        """Return a registry file certifying the simulated providers (made once per run)."""
        return await self._registry_factory(self)

    def empty_registry(self, name: str = "empty-registry.json") -> Path:
        """Write a registry with no certificates and return its path."""
        path = self.harness.work_dir / name
        path.write_text(json.dumps({"format": "onejob.certifications/1", "certificates": []}))
        return path

    async def close(self) -> None:
        """Stop processes, drop databases and close the client."""
        await self.http.aclose()
        await self.harness.close()
        for drop in self._drops:
            try:
                await drop()
            except Exception as exc:  # a leftover database is untidy, not a verdict
                self.note(f"could not drop a scenario database: {exc}")

    # -- HTTP ------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        url: str,
        *,
        actor: str = "client",
        key: str | None = None,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
        record: bool = True,
        timeout: float = REQUEST_TIMEOUT,
    ) -> httpx.Response:
        """Send one request, record the exchange, and return the response."""
        sent_headers = dict(headers or {})
        if key is not None:
            sent_headers["Authorization"] = f"Bearer {key}"
        at = self.now()
        started = time.monotonic()
        body_text = json.dumps(json_body) if json_body is not None else ""
        try:
            response = await self.http.request(
                method, url, json=json_body, headers=sent_headers, timeout=timeout
            )
        except httpx.HTTPError as exc:
            if record:
                self.exchanges.append(Exchange(
                    at=at, elapsed=time.monotonic() - started, actor=actor, method=method,
                    url=url, status=None, request_headers=_kept(sent_headers),
                    request_body=body_text[:BODY_LIMIT], error=f"{type(exc).__name__}: {exc}",
                ))
            raise
        if record:
            self.exchanges.append(Exchange(
                at=at, elapsed=time.monotonic() - started, actor=actor, method=method, url=url,
                status=response.status_code, request_headers=_kept(sent_headers),
                request_body=body_text[:BODY_LIMIT],
                response_headers=_kept(dict(response.headers)),
                response_body=response.text[:BODY_LIMIT],
            ))
        return response

    async def contract(self, gateway: Process, key: str, hedgeable: bool = False) -> str:
        """Pick a contract the gateway offers (a hedgeable one when asked)."""
        response = await self.request("GET", f"{gateway.base_url}/v1/contracts", key=key,
                                      record=False)
        if response.status_code != 200:
            raise HarnessError(f"GET /v1/contracts answered {response.status_code}")
        body = response.json()
        if isinstance(body, dict) and "contracts" in body:
            body = body["contracts"]
        names = sorted((str(c["name"]), bool(c.get("hedgeable"))) for c in items_of(body))
        preferred = [n for n, h in names if h or not hedgeable]
        if not preferred:
            raise ScenarioSkipped("no hedgeable contract in the catalog")
        for candidate in ("ticket-triage@1", *preferred):
            if candidate in preferred:
                return candidate
        return preferred[0]

    def job_body(self, contract: str, seed: int = 0, provider: str | None = None) -> dict[str, Any]:
        """Return a ``POST /v1/jobs`` body for ``contract`` with a valid input."""
        body: dict[str, Any] = {"contract": contract, "input": sample_input(contract, seed)}
        if provider is not None:
            body["provider"] = provider
        return body

    async def wait_job(
        self,
        gateway: Process,
        key: str,
        job_id: str,
        until: Callable[[dict[str, Any]], bool],
        timeout: float,
        what: str,
    ) -> dict[str, Any]:
        """Poll ``GET /v1/jobs/{id}`` until ``until(job)`` holds; FAIL when time runs out."""
        deadline = time.monotonic() + timeout
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            response = await self.request(
                "GET", f"{gateway.base_url}/v1/jobs/{job_id}", key=key, record=False
            )
            if response.status_code == 200:
                job = response.json()
                if until(job):
                    return job
            await asyncio.sleep(0.1)
        self.expect(False, what, f"not within {timeout:.1f} s; last seen {_brief(job)}")
        return job

    # -- simulator -------------------------------------------------------------------

    async def script(
        self, sim: Process, provider: str | None, behaviours: list[dict[str, Any]], count: int = 1
    ) -> None:
        """Queue simulator behaviours for ``provider``."""
        body: dict[str, Any] = {"behaviours": behaviours, "count": count}
        if provider is not None:
            body["provider"] = provider
        response = await self.request("POST", f"{sim.base_url}/_sim/script", actor="scenario",
                                      json_body=body)
        if response.status_code >= 300:
            raise HarnessError(f"/_sim/script refused {body}: {response.text[:300]}")

    async def sim_calls(self, sim: Process, provider: str | None = None) -> list[dict[str, Any]]:
        """Return the simulator's call log (for one provider when named)."""
        response = await self.request("GET", f"{sim.base_url}/_sim/calls", record=False)
        response.raise_for_status()
        calls = [c for c in response.json().get("calls", []) if isinstance(c, dict)]
        return [c for c in calls if provider is None or c.get("provider") == provider]

    async def wait_calls(
        self, sim: Process, count: int, timeout: float, provider: str | None = None
    ) -> list[dict[str, Any]]:
        """Wait until the simulator has received ``count`` calls; return the log."""
        deadline = time.monotonic() + timeout
        calls = await self.sim_calls(sim, provider)
        while len(calls) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            calls = await self.sim_calls(sim, provider)
        return calls

    # -- timeline --------------------------------------------------------------------

    def observe_unknown(self, job: dict[str, Any], label: str = "") -> None:
        """Mark, at this moment, every attempt the scenario has just seen become unknown."""
        prefix = f"{label} " if label else ""
        for attempt in job.get("attempts", []):
            if attempt.get("state") == "unknown":
                lane = f"{prefix}attempt {attempt.get('number')} · {attempt.get('provider')}"
                self.timeline.append(
                    TimelineMark(self.now(), lane, MarkKind.TIMED_OUT, "seen unknown")
                )

    def watch(
        self, gateway: Process, key: str, job_id: str, sim: Process | None, label: str = ""
    ) -> None:
        """Put this job on the timeline when the scenario ends, whatever its verdict."""
        self._watched.append((gateway, key, job_id, sim, label))

    async def capture_watched(self) -> None:
        """Capture every watched job (skipping those whose gateway is gone)."""
        for gateway, key, job_id, sim, label in self._watched:
            if not gateway.running:
                self.note(f"timeline of {job_id} not captured: {gateway.name} is not running")
                continue
            try:
                await self.capture(gateway, key, job_id, sim, label)
            except httpx.HTTPError as exc:
                self.note(f"timeline of {job_id} not captured: {type(exc).__name__}: {exc}")

    async def capture(
        self, gateway: Process, key: str, job_id: str, sim: Process | None, label: str = ""
    ) -> dict[str, Any]:
        """Add the job's attempts, events and provider calls to the timeline; return the job."""
        response = await self.request(
            "GET", f"{gateway.base_url}/v1/jobs/{job_id}", key=key, record=False
        )
        job: dict[str, Any] = response.json() if response.status_code == 200 else {}
        prefix = f"{label} " if label else ""
        observed = self.now()
        lanes: dict[str, str] = {}
        for attempt in job.get("attempts", []):
            lane = f"{prefix}attempt {attempt.get('number')} · {attempt.get('provider')}"
            lanes[str(attempt.get("id"))] = lane
            started = _iso_to_unix(attempt.get("started_at"))
            finished = _iso_to_unix(attempt.get("finished_at"))
            state = str(attempt.get("state"))
            reason = str(attempt.get("reason", ""))
            if started is not None:
                self.timeline.append(
                    TimelineMark(self.rel(started), lane, MarkKind.SENT, f"sent ({reason})")
                )
            end = self.rel(finished) if finished is not None else observed
            if state in ("succeeded", "lost"):
                self.timeline.append(TimelineMark(end, lane, MarkKind.FINISHED, "finished"))
            seen = any(m.lane == lane and m.kind is MarkKind.TIMED_OUT for m in self.timeline)
            if state in _STATE_MARK and not (state == "unknown" and seen):
                self.timeline.append(TimelineMark(end, lane, _STATE_MARK[state], state))
        events = await self._events(gateway, key, job_id)
        if events is not None:
            self.timeline_source = "job events, attempts and simulator calls"
            for event in events:
                at = _iso_to_unix(event.get("at"))
                if at is None:
                    continue
                lane = lanes.get(str(event.get("attempt_id")), f"{prefix}job")
                self.timeline.append(
                    TimelineMark(self.rel(at), lane, MarkKind.EVENT, str(event.get("kind")))
                )
        if sim is not None:
            for call in await self.sim_calls(sim):
                ikey = str(call.get("idempotency_key") or "")
                if job_id not in ikey:
                    continue
                lane = f"{prefix}call #{call.get('seq')} · {call.get('provider')}"
                received = call.get("received_at")
                finished = call.get("finished_at")
                if isinstance(received, int | float):
                    self.timeline.append(
                        TimelineMark(self.rel(received), lane, MarkKind.CALL_RECEIVED, ikey)
                    )
                if isinstance(finished, int | float):
                    outcome = call.get("outcome") or call.get("status") or ""
                    self.timeline.append(TimelineMark(
                        self.rel(finished), lane, MarkKind.CALL_ENDED,
                        f"{call.get('behaviour')} → {outcome}",
                    ))
        return job

    async def _events(self, gateway: Process, key: str, job_id: str) -> list[dict[str, Any]] | None:
        response = await self.request(
            "GET", f"{gateway.base_url}/v1/jobs/{job_id}/events", key=key, record=False
        )
        if response.status_code != 200:
            return None
        body = response.json()
        events = body.get("events", body.get("items")) if isinstance(body, dict) else body
        return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else None


def _kept(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower() in KEPT_HEADERS}


def _brief(job: dict[str, Any]) -> str:
    if not job:
        return "no job"
    attempts = ", ".join(
        f"#{a.get('number')} {a.get('provider')} {a.get('state')}" for a in job.get("attempts", [])
    )
    return f"status={job.get('status')} attempts=[{attempts}]"


def brief(job: dict[str, Any]) -> str:
    """Summarize a job body in one line for a check's detail."""
    return _brief(job)


def log_dir_for(report_dir: Path, name: str) -> Path:
    """Return where a scenario's process logs go."""
    return report_dir / "logs" / name


def winner_of(job: dict[str, Any]) -> dict[str, Any]:
    """Return the attempt named by the job's ``completed_by`` (empty when none)."""
    for attempt in job.get("attempts", []):
        if attempt.get("id") == job.get("completed_by"):
            return dict(attempt)
    return {}


def attempt_number(job: dict[str, Any], number: int) -> dict[str, Any]:
    """Return the job's attempt with ``number`` (empty when missing)."""
    for attempt in job.get("attempts", []):
        if attempt.get("number") == number:
            return dict(attempt)
    return {}


def items_of(body: Any) -> list[dict[str, Any]]:
    """Return the list in a listing response (``items`` or ``jobs``), or the body if a list."""
    if isinstance(body, dict):
        body = body.get("items", body.get("jobs", body.get("attempts", [])))
    return [i for i in body if isinstance(i, dict)] if isinstance(body, list) else []
