"""An intention's key is made once and kept, with the same body, across every retry."""

from __future__ import annotations

import json
import uuid

import pytest
from onejob_client import Intention
from onejob_client.intention import check_key, key_header

TICKET = {"ticket_id": "SUP-42", "customer": {"name": "Priya", "plan": "pro"}}


def test_the_key_is_made_when_the_intention_is_made_and_never_again() -> None:
    intention = Intention.new("ticket-triage@1", TICKET)
    uuid.UUID(intention.key)
    assert intention.key == intention.key
    assert Intention.new("ticket-triage@1", TICKET).key != intention.key


def test_a_stored_intention_comes_back_with_the_same_key_and_body() -> None:
    intention = Intention.new("ticket-triage@1", TICKET, "sim-openai")
    again = Intention.from_json(intention.to_json())
    assert again == intention
    assert again.body == intention.body
    assert json.loads(again.body) == {
        "contract": "ticket-triage@1",
        "input": TICKET,
        "provider": "sim-openai",
    }


def test_changing_the_callers_dict_afterwards_changes_nothing() -> None:
    data = {"ticket_id": "SUP-42"}
    intention = Intention.new("ticket-triage@1", data)
    body = intention.body
    data["ticket_id"] = "SUP-43"
    assert intention.input == {"ticket_id": "SUP-42"}
    assert intention.body == body


def test_a_caller_supplied_key_is_kept_and_checked() -> None:
    assert Intention.new("c@1", {}, key="order-42-triage").key == "order-42-triage"
    for bad in ("", "x" * 256, "naïve", "tab\there"):
        with pytest.raises(ValueError):
            check_key(bad)


def test_the_key_header_is_an_sf_string_carrying_any_printable_key() -> None:
    assert key_header('a "quoted" \\ key') == '"a \\"quoted\\" \\\\ key"'
