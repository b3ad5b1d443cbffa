"""Timeline capture from a job body, its events (when served) and the simulator's call log."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import httpx
import respx

from scenarios.context import ScenarioContext
from scenarios.harness import Harness, Process
from scenarios.model import MarkKind

GATEWAY = Process("gateway", [], Path("/dev/null"), 18001, "", {})
SIM = Process("sim", [], Path("/dev/null"), 18002, "", {})


def iso(ctx: ScenarioContext, seconds: float) -> str:
    """Return the ISO time ``seconds`` after the scenario started."""
    return dt.datetime.fromtimestamp(ctx.t0 + seconds, dt.UTC).isoformat()


def job_body(ctx: ScenarioContext) -> dict[str, Any]:
    return {
        "id": "job_1",
        "status": "succeeded",
        "completed_by": "att_2",
        "attempts": [
            {
                "id": "att_1",
                "number": 1,
                "provider": "sim-openai",
                "reason": "initial",
                "state": "lost",
                "started_at": iso(ctx, 1.0),
                "finished_at": iso(ctx, 3.5),
            },
            {
                "id": "att_2",
                "number": 2,
                "provider": "sim-anthropic",
                "reason": "hedge",
                "state": "succeeded",
                "started_at": iso(ctx, 1.5),
                "finished_at": iso(ctx, 1.7),
            },
        ],
    }


def calls(ctx: ScenarioContext) -> dict[str, Any]:
    return {
        "calls": [
            {
                "seq": 1,
                "provider": "sim-openai",
                "idempotency_key": "job_1/1",
                "behaviour": "delay",
                "outcome": "answered",
                "received_at": ctx.t0 + 1.01,
                "finished_at": ctx.t0 + 3.49,
            },
            {
                "seq": 2,
                "provider": "sim-anthropic",
                "idempotency_key": "job_1/2",
                "behaviour": "ok",
                "outcome": "answered",
                "received_at": ctx.t0 + 1.51,
                "finished_at": ctx.t0 + 1.69,
            },
            {
                "seq": 3,
                "provider": "sim-openai",
                "idempotency_key": "job_other/1",
                "behaviour": "ok",
                "received_at": ctx.t0 + 2.0,
                "finished_at": ctx.t0 + 2.1,
            },
        ]
    }


def make_ctx(tmp_path: Path) -> ScenarioContext:
    async def no_registry(ctx: ScenarioContext) -> Path:
        raise AssertionError("not used")

    return ScenarioContext("t", Harness(tmp_path / "w", tmp_path / "l"), None, no_registry)


@respx.mock
async def test_capture_maps_attempts_and_only_this_jobs_calls(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    respx.get(f"{GATEWAY.base_url}/v1/jobs/job_1").mock(
        return_value=httpx.Response(200, json=job_body(ctx))
    )
    respx.get(f"{GATEWAY.base_url}/v1/jobs/job_1/events").mock(return_value=httpx.Response(404))
    respx.get(f"{SIM.base_url}/_sim/calls").mock(return_value=httpx.Response(200, json=calls(ctx)))
    await ctx.capture(GATEWAY, "k", "job_1", SIM)
    await ctx.http.aclose()
    got = {(m.lane, m.kind): round(m.at, 2) for m in ctx.timeline}
    assert got[("attempt 1 · sim-openai", MarkKind.SENT)] == 1.0
    assert got[("attempt 1 · sim-openai", MarkKind.LOST)] == 3.5
    assert got[("attempt 2 · sim-anthropic", MarkKind.WON)] == 1.7
    assert got[("call #1 · sim-openai", MarkKind.CALL_ENDED)] == 3.49
    assert not any("#3" in m.lane for m in ctx.timeline)  # another job's call
    assert ctx.timeline_source == "attempts and simulator calls"


@respx.mock
async def test_capture_uses_job_events_when_the_gateway_serves_them(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    respx.get(f"{GATEWAY.base_url}/v1/jobs/job_1").mock(
        return_value=httpx.Response(200, json=job_body(ctx))
    )
    events = {
        "events": [
            {"attempt_id": "att_1", "kind": "race_lost", "at": iso(ctx, 3.5)},
            {"attempt_id": None, "kind": "created", "at": iso(ctx, 0.9)},
        ]
    }
    respx.get(f"{GATEWAY.base_url}/v1/jobs/job_1/events").mock(
        return_value=httpx.Response(200, json=events)
    )
    await ctx.capture(GATEWAY, "k", "job_1", None, label="x")
    await ctx.http.aclose()
    events_seen = {(m.lane, m.label) for m in ctx.timeline if m.kind is MarkKind.EVENT}
    assert events_seen == {("x attempt 1 · sim-openai", "race_lost"), ("x job", "created")}
    assert ctx.timeline_source.startswith("job events")


async def test_a_seen_unknown_is_not_marked_twice(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    job = {
        "attempts": [
            {
                "id": "a",
                "number": 1,
                "provider": "p",
                "state": "unknown",
                "started_at": iso(ctx, 0.1),
                "finished_at": None,
            }
        ]
    }
    ctx.observe_unknown(job)
    with respx.mock:
        respx.get(f"{GATEWAY.base_url}/v1/jobs/j").mock(return_value=httpx.Response(200, json=job))
        respx.get(f"{GATEWAY.base_url}/v1/jobs/j/events").mock(return_value=httpx.Response(404))
        await ctx.capture(GATEWAY, "k", "j", None)
    await ctx.http.aclose()
    assert [m.kind for m in ctx.timeline].count(MarkKind.TIMED_OUT) == 1
