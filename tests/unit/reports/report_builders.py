"""Synthetic scenario results for the report tests (unit and Chromium): one of each verdict."""

from __future__ import annotations

from scenarios.model import (
    Check,
    Exchange,
    MarkKind,
    RunReport,
    ScenarioResult,
    TimelineMark,
    Verdict,
)


def reverse_order_timeline() -> list[TimelineMark]:
    """Return marks of a slow primary that loses to a fast hedge."""
    a1, a2 = "attempt 1 · sim-openai", "attempt 2 · sim-anthropic"
    return [
        TimelineMark(0.05, "scenario", MarkKind.ACTION, "POST /v1/jobs"),
        TimelineMark(0.10, a1, MarkKind.SENT, "sent (initial)"),
        TimelineMark(0.11, "call #1 · sim-openai", MarkKind.CALL_RECEIVED, "job_1/1"),
        TimelineMark(0.62, a2, MarkKind.SENT, "sent (hedge)"),
        TimelineMark(0.63, "call #2 · sim-anthropic", MarkKind.CALL_RECEIVED, "job_1/2"),
        TimelineMark(0.70, "call #2 · sim-anthropic", MarkKind.CALL_ENDED, "ok → answered"),
        TimelineMark(0.71, a2, MarkKind.FINISHED, "finished"),
        TimelineMark(0.71, a2, MarkKind.WON, "succeeded"),
        TimelineMark(2.60, "call #1 · sim-openai", MarkKind.CALL_ENDED, "delay → answered"),
        TimelineMark(2.61, a1, MarkKind.FINISHED, "finished"),
        TimelineMark(2.61, a1, MarkKind.LOST, "lost"),
    ]


def make_result(name: str, verdict: Verdict, reason: str = "") -> ScenarioResult:
    """Return a result with checks, a timeline and one exchange."""
    ok = verdict is not Verdict.FAIL
    return ScenarioResult(
        name=name,
        title=f"The {name} scenario <b>escaped</b>",
        verdict=verdict,
        reason=reason or ("3 checks held" if ok else "one job id: ids ['job_a', 'job_b']"),
        duration=1.25,
        database="sqlite",
        checks=[Check("the job is created", True), Check("one job id", ok, "ids")],
        timeline=reverse_order_timeline(),
        exchanges=[
            Exchange(
                0.05,
                0.012,
                "client",
                "POST",
                "http://127.0.0.1:1/v1/jobs?x=1",
                201,
                {"idempotency-key": '"k"'},
                '{"contract": "c"}',
                {"location": "/v1/jobs/job_1"},
                '{"id": "job_1"}',
            )
        ],
        timeline_source="attempts and simulator calls",
        notes=["a note"],
        logs={"gateway": "/tmp/gateway.log"},
    )


def mixed_report() -> RunReport:
    """Return a run with one PASS, one FAIL, one ERROR and one SKIP."""
    return RunReport(
        results=[
            make_result("reverse-order-finish", Verdict.PASS),
            make_result("double-click", Verdict.FAIL),
            make_result("worker-crash", Verdict.ERROR, "gateway exited with 1 before it was ready"),
            make_result("cross-instance-double-click", Verdict.SKIP, "needs PostgreSQL"),
        ],
        started_at="2026-11-30T07:00:00Z",
        duration=12.5,
        database="sqlite",
    )


def passing_report() -> RunReport:
    """Return a run where every scenario passed."""
    return RunReport(
        [make_result("reverse-order-finish", Verdict.PASS)],
        "2026-11-30T07:00:00Z",
        1.3,
        "postgresql",
    )
