"""Declarative semantic assertions: each kind holds, breaks, or does not apply."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.assertions import Assertion, AssertionSpecError

OUT = {
    "category": "billing",
    "body": "Hi Ana, order WEB-1 is on its way.",
    "items": [{"amount": 10.0}, {"amount": 5.5}],
    "subtotal": 15.5,
    "tax": 1.5,
    "total": 17.0,
}
INPUT = {"order_id": "WEB-1", "max_chars": 20}


def run(spec: dict[str, Any], expect: dict[str, Any] | None = None) -> str | None:
    return Assertion.from_dict({"id": "a", **spec}).evaluate(INPUT, OUT, expect or {})


@pytest.mark.parametrize(
    ("spec", "expect", "broken"),
    [
        (
            {"kind": "equals", "path": "$.category", "expect": "$.category"},
            {"category": "billing"},
            False,
        ),
        (
            {"kind": "equals", "path": "$.category", "expect": "$.category"},
            {"category": "refund"},
            True,
        ),
        (
            {"kind": "one_of", "path": "$.category", "expect": "$.c"},
            {"c": ["refund", "billing"]},
            False,
        ),
        ({"kind": "one_of", "path": "$.category", "values": ["refund"]}, None, True),
        ({"kind": "regex", "path": "$.body", "pattern": "WEB-\\d+"}, None, False),
        ({"kind": "regex", "path": "$.body", "pattern": "^Dear"}, None, True),
        ({"kind": "approx", "path": "$.total", "value": 17.004}, None, False),
        ({"kind": "approx", "path": "$.total", "value": 17.5, "tolerance": 0.1}, None, True),
        (
            {"kind": "sum_equals", "paths": ["$.items[*].amount"], "total": "$.subtotal"},
            None,
            False,
        ),
        ({"kind": "sum_equals", "paths": ["$.subtotal", "$.tax"], "total": "$.total"}, None, False),
        ({"kind": "sum_equals", "paths": ["$.items[*].amount"], "total": "$.total"}, None, True),
        ({"kind": "count_equals", "path": "$.items", "value": 2}, None, False),
        ({"kind": "count_equals", "path": "$.items", "value": 3}, None, True),
        ({"kind": "max_length", "path": "$.body", "value": 100}, None, False),
        ({"kind": "max_length", "path": "$.body", "input": "$.max_chars"}, None, True),
        ({"kind": "contains", "path": "$.body", "input": "$.order_id"}, None, False),
        ({"kind": "contains", "path": "$.body", "value": "web-1"}, None, True),
        (
            {"kind": "contains", "path": "$.body", "value": "web-1", "ignore_case": True},
            None,
            False,
        ),
        ({"kind": "excludes", "path": "$.body", "expect": "$.bad"}, {"bad": ["voucher"]}, False),
        (
            {"kind": "excludes", "path": "$.body", "expect": "$.bad"},
            {"bad": ["ON ITS", "x"]},
            False,
        ),
        (
            {"kind": "excludes", "path": "$.body", "expect": "$.bad", "ignore_case": True},
            {"bad": ["ON ITS"]},
            True,
        ),
        ({"kind": "equals", "path": "$.missing", "value": 1}, None, True),
    ],
)
def test_assertion_kinds_hold_or_break(
    spec: dict[str, Any], expect: dict[str, Any] | None, broken: bool
) -> None:
    assert (run(spec, expect) is not None) is broken


def test_assertion_does_not_apply_when_the_case_has_no_expectation() -> None:
    assert run({"kind": "equals", "path": "$.category", "expect": "$.category"}, {}) is None


def test_failure_names_the_assertion_the_path_and_both_values() -> None:
    msg = run(
        {"kind": "equals", "path": "$.category", "expect": "$.category", "message": "wrong"},
        {"category": "refund"},
    )
    assert msg == "a: wrong ($.category = 'billing', expected 'refund')"
    msg = run({"kind": "sum_equals", "paths": ["$.items[*].amount"], "total": "$.total"})
    assert msg == "a: sum of $.items[*].amount = 15.50, but $.total = 17.0"


def test_missing_input_field_is_reported_not_skipped() -> None:
    msg = run({"kind": "contains", "path": "$.body", "input": "$.nowhere"})
    assert msg is not None and "input has nothing at $.nowhere" in msg


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"kind": "nearly", "path": "$.a"}, "kind must be one of"),
        ({"kind": "equals", "path": "$.a"}, "exactly one of"),
        ({"kind": "equals", "path": "$.a", "value": 1, "expect": "$.a"}, "exactly one of"),
        ({"kind": "equals", "value": 1}, "needs 'path'"),
        ({"kind": "regex", "path": "$.a", "pattern": "("}, "bad pattern"),
        ({"kind": "sum_equals", "paths": ["$.a"]}, "needs 'paths' and 'total'"),
        ({"kind": "equals", "path": "$[", "value": 1}, "bad JSONPath"),
        ({"kind": "equals", "path": "$.a", "value": 1, "colour": "red"}, "unknown field"),
    ],
)
def test_malformed_declarations_are_rejected(spec: dict[str, Any], reason: str) -> None:
    with pytest.raises(AssertionSpecError, match=reason):
        Assertion.from_dict({"id": "a", **spec})
