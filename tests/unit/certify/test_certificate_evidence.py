"""Evidence the runner gathers for certificates: replays, model identity at transport, run ids."""

from __future__ import annotations

import json
from typing import Any

import httpx

from certify.checks import Layer, check_replays
from certify.results import Mode
from certify.runner import Runner
from contracts.evidence import answer_hash
from contracts.loader import load_catalog
from providers.config import ProviderConfig

CATALOG = load_catalog()
TRIAGE = CATALOG["ticket-triage@1"]
CASE = TRIAGE.case("double-charge-march")
OPENAI = ProviderConfig(name="p", protocol="openai", base_url="http://p/v1", model="gpt-4o")


def test_distinct_provider_ids_are_k_samples() -> None:
    assert check_replays(["a", "b", "c"], {}) is None
    assert check_replays([None, None], {}) is None  # no ids: nothing to judge


def test_a_repeated_provider_id_is_a_replay_not_a_sample() -> None:
    check = check_replays(["a", "b", "a"], {})
    assert check is not None and check.layer is Layer.STABILITY and not check.passed
    assert check.reason == (
        "replayed: repeat 3/3 came back with the provider id 'a' of repeat 1; "
        "the 3 repeats are 2 sample(s), not 3"
    )


def test_a_provider_id_from_an_earlier_run_is_a_replay() -> None:
    check = check_replays(["x"], {"x": "cert-old"})
    assert check is not None
    assert "already answered in run cert-old" in check.reason


def openai_answer(output: Any, *, model: str = "gpt-4o-2024-08-06", rid: str | None = None):
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        body = {
            "id": f"chatcmpl-{rid or calls['n']}",
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": json.dumps(output)},
                    "finish_reason": "stop",
                }
            ],
        }
        headers = {"x-request-id": f"req_{rid or calls['n']}"}
        return httpx.Response(200, json=body, headers=headers)

    return handler


async def run(handler: Any, mode: Mode = Mode.LIVE, **runner: Any) -> Any:
    r = Runner(mode, repeats=3, **runner)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        return r, await r.run_case(client, TRIAGE, CASE, OPENAI)


async def test_a_dated_snapshot_of_the_configured_model_certifies() -> None:
    _, result = await run(openai_answer(TRIAGE.simulate(CASE.input)))
    assert result.passed, result.first_failure()
    assert result.models == ["gpt-4o-2024-08-06"] * 3


async def test_a_different_model_fails_the_transport_layer() -> None:
    _, result = await run(openai_answer(TRIAGE.simulate(CASE.input), model="gpt-4o-mini"))
    check = result.checks[Layer.TRANSPORT]
    assert not check.passed
    assert check.reason.startswith("model mismatch: configured 'gpt-4o', the provider reported")
    assert result.checks[Layer.SCHEMA].detail.get("not_reached")
    assert result.valid == [False, False, False]  # never evidence for agreement


async def test_repeats_answered_with_one_provider_id_fail_stability_as_replays() -> None:
    _, result = await run(openai_answer(TRIAGE.simulate(CASE.input), rid="same"))
    assert result.checks[Layer.SEMANTICS].passed
    check = result.checks[Layer.STABILITY]
    assert not check.passed and check.reason.startswith("replayed: repeat 2/3")


async def test_replay_mode_serves_one_recording_to_every_repeat_without_complaint() -> None:
    _, result = await run(openai_answer(TRIAGE.simulate(CASE.input), rid="same"), Mode.REPLAY)
    assert result.checks[Layer.STABILITY].passed


async def test_an_id_an_earlier_certificate_holds_is_reported_with_its_run() -> None:
    def earlier(provider: str, contract: str) -> dict[str, str]:
        return {"req_2": "cert-previous"} if (provider, contract) == ("p", TRIAGE.name) else {}

    _, result = await run(openai_answer(TRIAGE.simulate(CASE.input)), earlier_ids=earlier)
    assert "repeat 2/3 came back with provider id 'req_2', already answered in run " in (
        result.checks[Layer.STABILITY].reason
    )


async def test_every_downstream_key_carries_the_run_id() -> None:
    keys: list[str] = []
    inner = openai_answer(TRIAGE.simulate(CASE.input))

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers["idempotency-key"])
        return inner(request)

    await run(handler, run_id="cert-test-1")
    assert keys == [
        f"certify/cert-test-1/ticket-triage@1/double-charge-march/{r}" for r in (1, 2, 3)
    ]
    assert Runner(Mode.LIVE).run_id != Runner(Mode.LIVE).run_id


async def test_the_certificate_keeps_per_case_evidence_and_the_run_id() -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(openai_answer_for_every_case()))
    async with client:
        runner = Runner(Mode.LIVE, repeats=2, run_id="cert-e", client=client)
        run = await runner.run([TRIAGE], [OPENAI])
    cert = run.units[0].certificate()
    assert cert["run_id"] == "cert-e"
    assert cert["reported_models"] == ["gpt-4o-2024-08-06"]
    ev = cert["evidence"][CASE.id]
    expected = TRIAGE.simulate(CASE.input)
    assert ev["agree"] == {f: expected[f] for f in TRIAGE.must_agree}
    assert ev["answers"] == [answer_hash(expected)] * 2
    assert len(set(ev["provider_ids"])) == 2 and all(
        p.startswith("req_") for p in ev["provider_ids"]
    )
    assert len(cert["evidence"]) == len(TRIAGE.cases)


def openai_answer_for_every_case() -> Any:
    from contracts.model import parse_input_block

    counter = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        counter["n"] += 1
        user = json.loads(request.content)["messages"][-1]["content"]
        _, data = parse_input_block(user)
        return openai_answer(TRIAGE.simulate(data), rid=str(counter["n"]))(request)

    return handler
