"""The simulator as a rate-limited, overloaded or quota-exhausted upstream, on a clock the
test moves: token buckets (``/_sim/limits``), outages (``/_sim/outage``), the ``quota``
behaviour, and each API's own shapes and headers for them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from providers.simulator import SimulatorApp
from providers.simulator.control_client import SimulatorControl, SimulatorControlError

USER = 'Do it.\n<input contract="echo@1">\n{"n": 5}\n</input>'
WALL = 1_736_951_040.0  # 2025-01-15T14:24:00Z


class Echo:
    def simulate(self, input: Any) -> dict[str, Any]:
        return {"echo": input["n"]}

    def simulate_sloppy(self, input: Any) -> dict[str, Any]:
        return {"echo": -input["n"]}


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "openai": (
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": USER}]},
    ),
    "anthropic": (
        "/v1/messages",
        {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": USER}]},
    ),
    "gemini": (
        "/v1beta/models/g:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": USER}]}]},
    ),
}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def client(clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    app = SimulatorApp(catalog={"echo@1": Echo()}, clock=lambda: WALL, monotonic=clock)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as c:
        yield c


async def ask(client: httpx.AsyncClient, protocol: str, provider: str = "sim-a") -> httpx.Response:
    path, body = BODIES[protocol]
    return await client.post(f"/p/{provider}{path}", json=body)


async def test_openai_bucket_answers_a_burst_then_429_with_the_real_headers(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    control = SimulatorControl(client)
    await control.limit("sim-a", 10, burst=5)
    answers = [await ask(client, "openai") for _ in range(6)]
    assert [a.status_code for a in answers] == [200] * 5 + [429]
    assert [a.headers["x-ratelimit-remaining-requests"] for a in answers] == [
        "4", "3", "2", "1", "0", "0"
    ]  # fmt: skip
    assert {a.headers["x-ratelimit-limit-requests"] for a in answers} == {"600"}
    assert answers[0].headers["x-ratelimit-reset-requests"] == "100ms"
    assert answers[4].headers["x-ratelimit-reset-requests"] == "500ms"
    refused = answers[5]
    assert refused.headers["retry-after"] == "1"  # whole seconds, rounded up
    assert refused.headers["retry-after-ms"] == "100"
    assert refused.headers["x-request-id"].startswith("req_")
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert "Limit 600" in error["message"] and "try again in 100ms" in error["message"]
    calls = await control.calls("sim-a")
    assert [c["behaviour"] for c in calls] == ["ok"] * 5 + ["rate_limited"]
    assert (calls[-1]["status"], calls[-1]["outcome"]) == (429, "error")
    assert calls[-1]["model"] is None and calls[-1]["contract"] is None  # never run
    clock.now += 0.1
    again = await ask(client, "openai")
    assert again.status_code == 200 and again.headers["x-ratelimit-remaining-requests"] == "0"


async def test_anthropic_bucket_says_when_it_is_full_as_an_rfc3339_time(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    await SimulatorControl(client).limit("sim-a", 0.5, burst=2)
    first = await ask(client, "anthropic")
    assert first.status_code == 200
    assert first.headers["anthropic-ratelimit-requests-limit"] == "30"
    assert first.headers["anthropic-ratelimit-requests-remaining"] == "1"
    assert first.headers["anthropic-ratelimit-requests-reset"] == "2025-01-15T14:24:02Z"
    await ask(client, "anthropic")
    refused = await ask(client, "anthropic")
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "2"
    assert "retry-after-ms" not in refused.headers  # Anthropic sends whole seconds only
    assert refused.headers["anthropic-ratelimit-requests-reset"] == "2025-01-15T14:24:04Z"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert "x-ratelimit-limit-requests" not in refused.headers


async def test_gemini_bucket_says_it_in_details_not_headers(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    await SimulatorControl(client).limit("sim-a", 4, burst=1)
    ok = await ask(client, "gemini")
    assert ok.status_code == 200
    assert not [h for h in ok.headers if "ratelimit" in h]
    refused = await ask(client, "gemini")
    assert refused.status_code == 429 and "retry-after" not in refused.headers
    error = refused.json()["error"]
    assert error["status"] == "RESOURCE_EXHAUSTED"
    by_type = {d["@type"].rsplit(".", 1)[1]: d for d in error["details"]}
    assert by_type["RetryInfo"]["retryDelay"] == "0.250s"
    [violation] = by_type["QuotaFailure"]["violations"]
    assert "PerMinute" in violation["quotaId"] and violation["quotaValue"] == "240"


async def test_limits_are_per_provider_listed_removed_and_reset(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    control = SimulatorControl(client)
    listed = await control.limit("sim-a", 1, burst=1)
    assert listed == {"sim-a": {"requests_per_second": 1.0, "burst": 1, "remaining": 1,
                                "reset_s": 0.0}}  # fmt: skip
    assert (await ask(client, "openai")).status_code == 200
    assert (await ask(client, "openai")).status_code == 429
    other = await ask(client, "openai", provider="sim-b")
    assert other.status_code == 200 and "x-ratelimit-limit-requests" not in other.headers
    assert (await control.limits())["sim-a"]["remaining"] == 0
    await control.clear_limit("sim-a")
    assert await control.limits() == {}
    assert (await ask(client, "openai")).status_code == 200
    await control.limit("sim-a", 1, burst=1)
    await ask(client, "openai")
    await control.reset()
    assert await control.limits() == {}
    assert (await ask(client, "openai")).status_code == 200


async def test_a_limit_without_burst_holds_one_seconds_worth(client: httpx.AsyncClient) -> None:
    control = SimulatorControl(client)
    assert (await control.limit("sim-a", 3))["sim-a"]["burst"] == 3
    assert (await control.limit("sim-a", 0.2))["sim-a"]["burst"] == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"requests_per_second": 1}, "provider"),
        ({"provider": "a", "requests_per_second": 0}, "requests_per_second"),
        ({"provider": "a", "requests_per_second": "fast"}, "requests_per_second"),
        ({"provider": "a", "requests_per_second": 1, "burst": 0}, "burst"),
        ({"provider": "a", "requests_per_second": 1, "burst": 1.5}, "burst"),
        ({"provider": "a", "requests_per_second": 1, "rpm": 5}, "unknown"),
    ],
)
async def test_wrong_limits_are_refused_with_a_reason(
    client: httpx.AsyncClient, body: dict[str, Any], reason: str
) -> None:
    response = await client.post("/_sim/limits", json=body)
    assert response.status_code == 400 and reason in response.json()["error"]


@pytest.mark.parametrize(
    ("protocol", "status", "check"),
    [
        ("openai", 503, lambda e: e["error"]["message"].startswith("The engine is currently")),
        ("anthropic", 529, lambda e: e["error"] == {"type": "overloaded_error",
                                                     "message": "Overloaded"}),
        ("gemini", 503, lambda e: e["error"]["status"] == "UNAVAILABLE"),
    ],
)  # fmt: skip
async def test_an_outage_answers_the_apis_overload_until_it_ends(
    client: httpx.AsyncClient, clock: Clock, protocol: str, status: int, check: Any
) -> None:
    control = SimulatorControl(client)
    await control.script("sim-a", {"kind": "status", "code": 401})
    await control.outage("sim-a", 20)
    for _ in range(3):
        refused = await ask(client, protocol)
        assert refused.status_code == status and check(refused.json())
    assert (await ask(client, protocol, provider="sim-b")).status_code == 200
    outages = (await client.get("/_sim/outage")).json()["outages"]
    assert outages == {"sim-a": {"seconds_left": 20.0, "code": None, "retry_after": None}}
    clock.now += 20
    assert (await ask(client, protocol)).status_code == 401  # the script waited its turn
    assert (await ask(client, protocol)).status_code == 200
    calls = await control.calls("sim-a")
    assert [c["behaviour"] for c in calls] == ["outage"] * 3 + ["status", "ok"]


async def test_an_outage_takes_its_code_and_retry_after_and_can_end_early(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    control = SimulatorControl(client)
    await control.outage("sim-a", 60, code=500, retry_after=4)
    openai = await ask(client, "openai")
    assert openai.status_code == 500 and openai.headers["retry-after"] == "4"
    gemini = await ask(client, "gemini")
    assert gemini.status_code == 500 and "retry-after" not in gemini.headers
    assert gemini.json()["error"]["details"][-1]["retryDelay"] == "4s"
    await control.outage("sim-a", 60, code=429)
    assert (await ask(client, "anthropic")).json()["error"]["type"] == "rate_limit_error"
    await control.outage("sim-a", 0)
    assert (await ask(client, "anthropic")).status_code == 200


async def test_an_outage_does_not_spend_the_buckets_tokens(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    control = SimulatorControl(client)
    await control.limit("sim-a", 1, burst=1)
    await control.outage("sim-a", 5)
    assert (await ask(client, "openai")).status_code == 503
    clock.now += 5
    assert (await ask(client, "openai")).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"seconds": 5},
        {"provider": "a", "seconds": -1},
        {"provider": "a", "seconds": 5, "code": 404},
        {"provider": "a", "seconds": 5, "retry_after": -2},
        {"provider": "a", "seconds": 5, "reason": "x"},
    ],
)
async def test_wrong_outages_are_refused(client: httpx.AsyncClient, body: dict[str, Any]) -> None:
    with pytest.raises(SimulatorControlError, match="answered 400"):
        await SimulatorControl(client)._send("POST", "/_sim/outage", json=body)


async def test_quota_behaviour_answers_each_apis_hard_quota(client: httpx.AsyncClient) -> None:
    control = SimulatorControl(client)
    await control.script(None, {"kind": "quota"}, count=3)
    openai = await ask(client, "openai")
    assert openai.status_code == 429
    assert openai.json()["error"]["code"] == "insufficient_quota"
    assert "retry-after" not in openai.headers
    anthropic = await ask(client, "anthropic")
    assert anthropic.status_code == 400
    assert anthropic.json()["error"]["message"].startswith("Your credit balance is too low")
    gemini = await ask(client, "gemini")
    assert gemini.status_code == 429
    details = gemini.json()["error"]["details"]
    [failure] = [d for d in details if d["@type"].endswith("QuotaFailure")]
    assert "PerDay" in failure["violations"][0]["quotaId"]
    assert not [d for d in details if d["@type"].endswith("RetryInfo")]
    assert [c["behaviour"] for c in await control.calls()] == ["quota"] * 3


async def test_scripted_overloads_use_the_overload_shapes(client: httpx.AsyncClient) -> None:
    control = SimulatorControl(client)
    await control.script(None, {"kind": "status", "code": 529}, {"kind": "status", "code": 503})
    await control.script(None, {"kind": "status", "code": 429, "retry_after": 0.5})
    anthropic = await ask(client, "anthropic")
    assert anthropic.status_code == 529
    assert anthropic.json()["error"]["type"] == "overloaded_error"
    openai = await ask(client, "openai")
    assert openai.status_code == 503 and "overloaded" in openai.json()["error"]["message"]
    gemini = await ask(client, "gemini")
    assert gemini.status_code == 429 and "retry-after" not in gemini.headers
    retry = [d for d in gemini.json()["error"]["details"] if d["@type"].endswith("RetryInfo")]
    assert retry == [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.500s"}]


async def test_a_scripted_429_on_openai_carries_retry_after_ms_too(
    client: httpx.AsyncClient,
) -> None:
    await SimulatorControl(client).script(None, {"kind": "status", "code": 429, "retry_after": 2})
    refused = await ask(client, "openai")
    assert (refused.headers["retry-after"], refused.headers["retry-after-ms"]) == ("2", "2000")
