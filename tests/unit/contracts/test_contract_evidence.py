"""Evidence in certificates: answer hashes, agreement between providers, languages."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.assertions import Assertion, AssertionSpecError
from contracts.evidence import answer_hash, compare_evidence
from contracts.loader import load_catalog

CATALOG = load_catalog()
TRIAGE = CATALOG["ticket-triage@1"]
CASE = TRIAGE.case("double-charge-march")


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


def with_variants(seed: str, **agree: str) -> dict[str, Any]:
    cert = evidence_of()
    cert["variants"] = {"seed": seed}
    cert["variant_evidence"] = {
        f"{CASE.id}~v{i}": {
            "case": CASE.id,
            "relations": ["signature"],
            "agree": {f: agree.get(f"v{i}", "v") for f in TRIAGE.must_agree},
        }
        for i in (1, 2)
    }
    return cert


def test_variants_drawn_with_one_seed_are_compared_and_named_when_they_disagree() -> None:
    agreement = compare_evidence(TRIAGE, with_variants("s"), with_variants("s", v2="x"))
    assert agreement.compared == len(TRIAGE.cases) and agreement.variants_compared == 2
    assert [f["case"] for f in agreement.failures] == [f"{CASE.id}~v2"]
    assert agreement.failures[0]["reason"].startswith(f"variant of {CASE.id}: disagree on ")


def test_variants_of_other_seeds_are_other_inputs_and_are_not_compared() -> None:
    agreement = compare_evidence(TRIAGE, with_variants("s1"), with_variants("s2", v2="x"))
    assert agreement.agrees and agreement.variants_compared == 0
