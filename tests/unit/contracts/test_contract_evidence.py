"""Evidence in certificates: replays, model identity at transport, languages, agreement."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from contracts.assertions import Assertion, AssertionSpecError
from contracts.catalog import load_catalog
from contracts.checks import Layer, check_replays
from contracts.evidence import answer_hash, compare_evidence
from contracts.runner import Mode, Runner
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


def test_answer_hashes_ignore_key_order_and_number_spelling() -> None:
    assert answer_hash({"a": 1, "b": [1.0]}) == answer_hash({"b": [1], "a": 1.0})
    assert answer_hash({"a": 1}) != answer_hash({"a": 2})
    assert answer_hash(None) is None


def evidence_of(**agree: dict[str, Any]) -> dict[str, Any]:
    return {
        "evidence": {
            c.id: {"agree": {**{f: "v" for f in TRIAGE.must_agree}, **agree.get(c.id, {})}}
            for c in TRIAGE.cases
        }
    }


def test_equal_evidence_agrees_on_every_case() -> None:
    agreement = compare_evidence(TRIAGE, evidence_of(), evidence_of())
    assert agreement.agrees and agreement.compared == len(TRIAGE.cases) and agreement.rate == 1


def test_one_differing_must_agree_value_is_a_named_disagreement() -> None:
    changed = evidence_of(**{CASE.id: {"priority": "low"}})
    agreement = compare_evidence(TRIAGE, evidence_of(), changed)
    assert agreement.computable and not agreement.agrees
    assert agreement.failures == (
        {"case": CASE.id, "reason": "disagree on priority: 'v' vs 'low'"},
    )


def test_a_case_without_an_answer_on_one_side_cannot_be_compared() -> None:
    holed = evidence_of()
    holed["evidence"][CASE.id]["agree"] = None  # that case produced no valid output
    agreement = compare_evidence(TRIAGE, evidence_of(), holed)
    assert not agreement.computable and agreement.missing == (CASE.id,)
    assert not compare_evidence(TRIAGE, None, evidence_of()).computable


def language_rule(**spec: Any) -> Assertion:
    return Assertion.from_dict({"id": "lang", "kind": "language", "path": "$.text", **spec})


@pytest.mark.parametrize(
    ("text", "want", "found"),
    [
        ("Billing ticket from Jürgen: Rechnung doppelt abgebucht, bitte erstatten", "en", "de"),
        ("Thank you for contacting us about your order, we will refund it.", "pt", "en"),
        ("Hemos pedido a la empresa de transporte que lo localice.", "en", "es"),
    ],
)
def test_free_text_in_another_language_breaks_a_language_assertion(
    text: str, want: str, found: str
) -> None:
    message = language_rule(value=want).evaluate({}, {"text": text}, {})
    assert message is not None and message.startswith("lang: $.text is written in ")
    assert f"({found}, " in message and "expected " in message and f"({want}, " in message


def test_the_language_can_come_from_the_input() -> None:
    rule = language_rule(input="$.language")
    text = {"text": "Vielen Dank für Ihre Nachricht zu Ihrer Bestellung."}
    assert rule.evaluate({"language": "de"}, text, {}) is None
    assert rule.evaluate({"language": "en"}, text, {}) is not None
    assert "cannot be detected" in (rule.evaluate({"language": "xx"}, text, {}) or "")


def test_names_and_ids_in_another_language_do_not_fail_english_text() -> None:
    text = (
        "Shipping ticket from María José, written in Spanish, about an order that has not arrived."
    )
    assert language_rule(value="en").evaluate({}, {"text": text}, {}) is None


def test_text_too_short_to_judge_passes() -> None:
    assert language_rule(value="en").evaluate({}, {"text": "Ja, OK"}, {}) is None


def test_an_undetectable_fixed_language_is_refused_when_the_contract_loads() -> None:
    with pytest.raises(AssertionSpecError, match="language 'tlh' cannot be detected"):
        language_rule(value="tlh")
