"""The scenario client records exchanges through httpx event hooks and reads documented shapes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from scenarios.context import ScenarioContext, ScenarioFailure, listed
from scenarios.harness import Harness
from scenarios.recorder import ExchangeRecorder, exchange_options


def answer(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/down":
        raise httpx.ConnectError("connection refused", request=request)
    return httpx.Response(
        201, json={"id": "job_1"}, headers={"Location": "/v1/jobs/job_1", "X-Other": "dropped"}
    )


async def test_the_hooks_record_who_sent_what_and_what_came_back() -> None:
    recorder = ExchangeRecorder(lambda: 4.5)
    async with recorder.client(transport=httpx.MockTransport(answer)) as client:
        await client.post(
            "http://gw/v1/jobs",
            json={"contract": "c@1"},
            headers={"Idempotency-Key": '"k1"', "Authorization": "Bearer secret"},
            extensions=exchange_options("client#2", True),
        )
    [exchange] = recorder.exchanges
    assert (exchange.at, exchange.actor, exchange.method, exchange.status) == (
        4.5,
        "client#2",
        "POST",
        201,
    )
    assert exchange.url == "http://gw/v1/jobs"
    assert exchange.request_headers["idempotency-key"] == '"k1"'
    assert "authorization" not in exchange.request_headers  # keys never reach the report
    assert exchange.request_body == '{"contract":"c@1"}'
    assert exchange.response_headers == {
        "location": "/v1/jobs/job_1",
        "content-type": "application/json",
    }
    assert exchange.response_body == '{"id":"job_1"}'


async def test_a_request_marked_not_recorded_stays_out_of_the_report() -> None:
    recorder = ExchangeRecorder(lambda: 0.0)
    async with recorder.client(transport=httpx.MockTransport(answer)) as client:
        await client.get("http://gw/v1/jobs/job_1", extensions=exchange_options("client", False))
        await client.get("http://sim/_sim/calls")
    assert [(e.actor, e.url) for e in recorder.exchanges] == [("scenario", "http://sim/_sim/calls")]


async def test_a_request_without_a_response_is_recorded_with_its_error(tmp_path: Path) -> None:
    async def no_registry(ctx: ScenarioContext) -> Path:
        raise AssertionError("not used")

    ctx = ScenarioContext("t", Harness(tmp_path / "w", tmp_path / "l"), None, no_registry)
    await ctx.http.aclose()
    ctx.http = ctx._recorder.client(transport=httpx.MockTransport(answer))
    with pytest.raises(httpx.ConnectError):
        await ctx.request("POST", "http://gw/down", actor="admin", json_body={"a": 1})
    await ctx.close()
    [exchange] = ctx.exchanges
    assert (exchange.actor, exchange.status, exchange.request_body) == ("admin", None, '{"a":1}')
    assert exchange.error == "ConnectError: connection refused"


def test_a_listing_without_its_documented_key_fails_the_scenario() -> None:
    request = httpx.Request("GET", "http://gw/v1/jobs")
    drifted = httpx.Response(200, json={"items": [{"id": "job_1"}]}, request=request)
    with pytest.raises(ScenarioFailure, match=r"GET /v1/jobs answered without a 'jobs' list"):
        listed(drifted, "jobs")
    documented = httpx.Response(
        200, json={"jobs": [{"id": "job_1"}], "next_cursor": None}, request=request
    )
    assert listed(documented, "jobs") == [{"id": "job_1"}]
