"""``--compare``: what changed between two runs, from reports or from the registry."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from certify.compare import (
    CompareError,
    compare,
    load_previous,
    snapshot_of_certificates,
    snapshot_of_report,
)


def report(seed: str = "s1", **changes: Any) -> dict[str, Any]:
    case = {"case": "c1", "passed": True, "agree": {"category": "billing"}, "why": ""}
    variant = {
        "case": "c1~v1",
        "variant_of": "c1",
        "relations": ["other-customer"],
        "passed": True,
        "agree": {"category": "billing"},
        "why": "",
    }
    unit = {
        "provider": "p",
        "contract": "ticket-triage@1",
        "verdict": "pass",
        "variants": {"seed": seed},
        "cases": [case],
        "variant_cases": [variant],
    }
    doc = {"format": "onejob.contracts-report/1", "run_id": "run-1", "units": [unit]}
    doc = copy.deepcopy(doc)
    for key, value in changes.items():
        where, field = key.split("__")
        target = doc["units"][0] if where == "unit" else doc["units"][0][where][0]
        target[field] = value
    return doc


def test_nothing_changed_lists_nothing() -> None:
    result = compare(snapshot_of_report(report()), snapshot_of_report(report()), "prev.json")
    assert result.changes == () and result.units == 1
    assert result.lines() == ["changes since prev.json: 0 over 1 unit(s)"]


def test_a_case_that_fails_now_and_changed_values_are_listed_as_regressions() -> None:
    now = report(
        cases__passed=False,
        cases__why="semantics: category-matches: wrong category",
        unit__verdict="fail",
    )
    result = compare(snapshot_of_report(report()), snapshot_of_report(now), "prev.json")
    kinds = [(c.item, c.kind, c.regression) for c in result.changes]
    assert kinds == [("(unit)", "verdict", True), ("c1", "fails now", True)]
    assert result.changes[1].detail == "semantics: category-matches: wrong category"
    drift = compare(
        snapshot_of_report(report()),
        snapshot_of_report(report(cases__agree={"category": "refund"})),
        "prev.json",
    )
    [change] = drift.changes
    assert change.kind == "values changed" and change.detail == "category: 'billing' -> 'refund'"


def test_variants_of_one_seed_are_compared_one_by_one() -> None:
    now = report(variant_cases__passed=False, variant_cases__why="semantics: wrong")
    [change] = compare(snapshot_of_report(report()), snapshot_of_report(now), "x").changes
    assert change.item == "c1~v1" and change.kind == "fails now"
    assert change.detail == "variant of c1 (other-customer); semantics: wrong"


def test_variants_of_other_seeds_are_compared_by_their_counts() -> None:
    now = report(seed="s2", variant_cases__passed=False)
    [change] = compare(snapshot_of_report(report()), snapshot_of_report(now), "x").changes
    assert change.item == "(variants)" and change.regression
    assert change.detail == (
        "1/1 passed with seed s1; 0/1 pass with seed s2; failing now: c1~v1; "
        "give --seed to compare them one by one"
    )
    same = compare(snapshot_of_report(report()), snapshot_of_report(report(seed="s2")), "x")
    assert same.changes == ()


def test_the_registry_snapshot_reads_evidence_and_failures_of_the_newest_certificate() -> None:
    old = {
        "provider": "p",
        "contract": "ticket-triage@1",
        "verdict": "pass",
        "certified_at": "2026-03-01T10:00:00Z",
        "run_id": "run-0",
        "evidence": {"c1": {"agree": {"category": "billing"}}},
    }
    new = old | {
        "verdict": "fail",
        "certified_at": "2026-03-02T10:00:00Z",
        "variants": {"seed": "s9"},
        "variant_evidence": {"c1~v1": {"case": "c1", "relations": ["greeting"], "agree": None}},
        "failures": [
            {"case": "c1", "layer": "variants", "variant": "c1~v1", "reason": "variant failed"}
        ],
    }
    snap = snapshot_of_certificates([new, old])[("p", "ticket-triage@1")]
    assert snap.verdict == "fail" and snap.seed == "s9" and snap.cases["c1"].passed
    assert not snap.variants["c1~v1"].passed and snap.variants["c1~v1"].variation == "greeting"


def test_an_unreadable_previous_report_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CompareError, match="cannot read a previous report"):
        load_previous(str(tmp_path / "missing.json"), [])
    (tmp_path / "other.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(CompareError, match=r"not a contracts\.json written by onejob certify"):
        load_previous(str(tmp_path / "other.json"), [])
