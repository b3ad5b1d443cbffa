"""A scenario's timeline: its own actions, and a job's attempts, events and provider calls."""

from __future__ import annotations

import datetime as dt
from typing import Any

from scenarios.model import MarkKind, TimelineMark

_STATE_MARK = {
    "succeeded": MarkKind.WON,
    "lost": MarkKind.LOST,
    "failed": MarkKind.FAILED,
    "cancelled": MarkKind.CANCELLED,
    "unknown": MarkKind.TIMED_OUT,
}


class Timeline:
    """Marks in seconds since ``t0`` (a unix time), built from documented API bodies."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.marks: list[TimelineMark] = []
        self.source = "attempts and simulator calls"

    def rel(self, unix: float) -> float:
        """Turn a unix time into seconds since ``t0``."""
        return unix - self.t0

    def action(self, at: float, label: str) -> None:
        """Put something the scenario did at ``at`` on its own lane."""
        self.marks.append(TimelineMark(at, "scenario", MarkKind.ACTION, label))

    def seen_unknown(self, at: float, job: dict[str, Any], label: str = "") -> None:
        """Mark, at ``at``, every attempt of ``job`` that is unknown."""
        for attempt in job["attempts"]:
            if attempt.get("state") == "unknown":
                self.marks.append(
                    TimelineMark(at, _lane(attempt, label), MarkKind.TIMED_OUT, "seen unknown")
                )

    def add_job(
        self,
        observed: float,
        job_id: str,
        job: dict[str, Any],
        events: list[dict[str, Any]] | None,
        calls: list[dict[str, Any]],
        label: str = "",
    ) -> None:
        """Add the job's attempts, its events (when served) and the calls carrying its id."""
        lanes: dict[str, str] = {}
        for attempt in job["attempts"]:
            lane = _lane(attempt, label)
            lanes[str(attempt.get("id"))] = lane
            started = _iso_to_unix(attempt.get("started_at"))
            finished = _iso_to_unix(attempt.get("finished_at"))
            state = str(attempt.get("state"))
            reason = str(attempt.get("reason", ""))
            if started is not None:
                self.marks.append(
                    TimelineMark(self.rel(started), lane, MarkKind.SENT, f"sent ({reason})")
                )
            end = self.rel(finished) if finished is not None else observed
            if state in ("succeeded", "lost"):
                self.marks.append(TimelineMark(end, lane, MarkKind.FINISHED, "finished"))
            seen = any(m.lane == lane and m.kind is MarkKind.TIMED_OUT for m in self.marks)
            if state in _STATE_MARK and not (state == "unknown" and seen):
                self.marks.append(TimelineMark(end, lane, _STATE_MARK[state], state))
        prefix = f"{label} " if label else ""
        if events is not None:
            self.source = "job events, attempts and simulator calls"
            for event in events:
                at = _iso_to_unix(event.get("at"))
                if at is None:
                    continue
                lane = lanes.get(str(event.get("attempt_id")), f"{prefix}job")
                self.marks.append(
                    TimelineMark(self.rel(at), lane, MarkKind.EVENT, str(event.get("kind")))
                )
        for call in calls:
            ikey = str(call.get("idempotency_key") or "")
            if job_id not in ikey:
                continue
            lane = f"{prefix}call #{call.get('seq')} · {call.get('provider')}"
            received = call.get("received_at")
            finished = call.get("finished_at")
            if isinstance(received, int | float):
                self.marks.append(
                    TimelineMark(self.rel(received), lane, MarkKind.CALL_RECEIVED, ikey)
                )
            if isinstance(finished, int | float):
                outcome = call.get("outcome") or call.get("status") or ""
                self.marks.append(
                    TimelineMark(
                        self.rel(finished),
                        lane,
                        MarkKind.CALL_ENDED,
                        f"{call.get('behaviour')} → {outcome}",
                    )
                )


def _lane(attempt: dict[str, Any], label: str) -> str:
    prefix = f"{label} " if label else ""
    return f"{prefix}attempt {attempt.get('number')} · {attempt.get('provider')}"


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
