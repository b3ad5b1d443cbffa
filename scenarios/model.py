"""What a scenario run produces: verdicts, checks, HTTP exchanges and a timeline.

Plain data, no processes: the renderers in ``reports/`` read only these records.
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any

DEFAULT_REPORT_DIR = Path("reports/out/scenarios")
DEFAULT_JOBS = 2  # scenarios at once: most of a scenario is waiting, not computing


class Verdict(enum.StrEnum):
    """How one scenario ended."""

    #: Every check held.
    PASS = "PASS"
    #: A check did not hold: the system broke the promise the scenario tests.
    FAIL = "FAIL"
    #: The scenario could not run to its checks (a process did not start, a crash).
    ERROR = "ERROR"
    #: A prerequisite is missing (no PostgreSQL, no nginx); nothing was proven.
    SKIP = "SKIP"


class MarkKind(enum.StrEnum):
    """What a point on the timeline means."""

    #: The attempt was claimed and its request sent to the provider.
    SENT = "sent"
    #: The attempt's deadline passed or its lease expired: outcome unknown.
    TIMED_OUT = "timed_out"
    #: The attempt's provider answered (before the compare-and-swap decided).
    FINISHED = "finished"
    #: The attempt won the compare-and-swap; its result is the job's.
    WON = "won"
    #: The attempt finished after another decision; its payload was dropped.
    LOST = "lost"
    #: The attempt failed definitely.
    FAILED = "failed"
    #: The attempt or the job was cancelled.
    CANCELLED = "cancelled"
    #: A request reached the simulated provider.
    CALL_RECEIVED = "call_received"
    #: The simulated provider stopped handling a request (answered, hung up, dropped).
    CALL_ENDED = "call_ended"
    #: Something the scenario itself did (a click, a kill, a restart).
    ACTION = "action"
    #: A job event that maps to none of the kinds above.
    EVENT = "event"


@dataclasses.dataclass(frozen=True, slots=True)
class TimelineMark:
    """One point on one lane of the timeline."""

    at: float  # seconds since the scenario started
    lane: str  #: ``attempt 1 · sim-openai``, ``call sim-openai #3`` or ``scenario``
    kind: MarkKind
    label: str = ""

    def as_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "at": round(self.at, 4),
            "lane": self.lane,
            "kind": self.kind.value,
            "label": self.label,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Exchange:
    """One HTTP request a scenario made and what came back."""

    at: float  # seconds since the scenario started
    elapsed: float  # seconds
    actor: str  #: who sent it: ``client``, ``admin``, ``client#7``
    method: str
    url: str
    status: int | None  #: None when no response arrived
    request_headers: dict[str, str] = dataclasses.field(default_factory=dict)
    request_body: str = ""
    response_headers: dict[str, str] = dataclasses.field(default_factory=dict)
    response_body: str = ""
    error: str = ""

    def as_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "at": round(self.at, 4),
            "elapsed": round(self.elapsed, 4),
            "actor": self.actor,
            "method": self.method,
            "url": self.url,
            "status": self.status,
            "request_headers": self.request_headers,
            "request_body": self.request_body,
            "response_headers": self.response_headers,
            "response_body": self.response_body,
            "error": self.error,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """One assertion a scenario made, and whether it held."""

    what: str
    ok: bool
    detail: str = ""

    def as_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {"what": self.what, "ok": self.ok, "detail": self.detail}


@dataclasses.dataclass(slots=True)
class ScenarioResult:
    """Everything one scenario run proved or failed to prove."""

    name: str
    title: str
    verdict: Verdict
    reason: str
    duration: float  # seconds
    database: str  #: ``sqlite`` or ``postgresql``
    checks: list[Check] = dataclasses.field(default_factory=list)
    timeline: list[TimelineMark] = dataclasses.field(default_factory=list)
    exchanges: list[Exchange] = dataclasses.field(default_factory=list)
    #: Where the timeline came from: ``job events`` or ``attempts and simulator calls``.
    timeline_source: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)
    logs: dict[str, str] = dataclasses.field(default_factory=dict)  #: process -> log path

    @property
    def passed(self) -> bool:
        """Say whether the scenario did not fail (PASS or SKIP)."""
        return self.verdict in (Verdict.PASS, Verdict.SKIP)

    def as_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "name": self.name,
            "title": self.title,
            "verdict": self.verdict.value,
            "reason": self.reason,
            "duration": round(self.duration, 3),
            "database": self.database,
            "checks": [c.as_json() for c in self.checks],
            "timeline": [m.as_json() for m in self.timeline],
            "timeline_source": self.timeline_source,
            "exchanges": [e.as_json() for e in self.exchanges],
            "notes": list(self.notes),
            "logs": dict(sorted(self.logs.items())),
        }


@dataclasses.dataclass(slots=True)
class RunReport:
    """One ``onejob scenarios run``: its results in the order they ran."""

    results: list[ScenarioResult]
    started_at: str  #: ISO 8601 UTC
    duration: float  # seconds
    database: str

    @property
    def passed(self) -> bool:
        """Say whether no scenario failed or errored."""
        return all(r.passed for r in self.results)

    def counts(self) -> dict[str, int]:
        """Return how many scenarios ended with each verdict."""
        return {v.value: sum(1 for r in self.results if r.verdict is v) for v in Verdict}

    def as_json(self) -> dict[str, Any]:
        """Return the canonical JSON form (``onejob.scenarios/1``)."""
        return {
            "format": "onejob.scenarios/1",
            "started_at": self.started_at,
            "duration": round(self.duration, 3),
            "database": self.database,
            "passed": self.passed,
            "counts": self.counts(),
            "results": [r.as_json() for r in self.results],
        }


def run_report_from_json(doc: dict[str, Any]) -> RunReport:
    """Rebuild a ``RunReport`` from its JSON form (``scenarios.json``), e.g. to re-render it."""
    results = []
    for r in doc["results"]:
        results.append(
            ScenarioResult(
                name=r["name"],
                title=r["title"],
                verdict=Verdict(r["verdict"]),
                reason=r["reason"],
                duration=r["duration"],
                database=r["database"],
                checks=[Check(**c) for c in r["checks"]],
                timeline=[
                    TimelineMark(m["at"], m["lane"], MarkKind(m["kind"]), m["label"])
                    for m in r["timeline"]
                ],
                exchanges=[Exchange(**e) for e in r["exchanges"]],
                timeline_source=r.get("timeline_source", ""),
                notes=list(r.get("notes", [])),
                logs=dict(r.get("logs", {})),
            )
        )
    return RunReport(results, doc["started_at"], doc["duration"], doc["database"])
