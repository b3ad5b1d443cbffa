"""docs/api.md and /schema/openapi.json name the same routes and the same answers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gateway.app import create_app, settings_for_tests

API_MD = Path(__file__).resolve().parents[3] / "docs" / "api.md"
_ROUTE = re.compile(r"`(GET|POST|HEAD|PUT|PATCH|DELETE) (/[^`?\s]*)")
_STATUS = re.compile(
    r"(?:^\s*- |\| |gives |and |else |give )([1-5]\d\d)\b(?= |`|\||:|,|$)", re.MULTILINE
)
#: Statuses of the problem table that no route declares: they come before routing or are
#: a bug (405 wrong method, 408/431/501 the HTTP edge, 500 internal error).
_NOT_PER_ROUTE = {"405", "408", "431", "500", "501"}


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


@pytest.fixture(scope="module")
def operations() -> dict[tuple[str, str], set[str]]:
    app = create_app(settings_for_tests(database_url="sqlite+aiosqlite:///unused.db"))
    doc: dict[str, Any] = app.openapi_schema.to_schema()
    return {
        (method.upper(), _shape(path)): set(op.get("responses", {}))
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
    }


def _sections() -> list[str]:
    return re.split(r"^## ", API_MD.read_text(), flags=re.MULTILINE)[1:]


def _documented_statuses() -> dict[tuple[str, str], set[str]]:
    """Map each route the doc names to the statuses written after it in its section."""
    found: dict[tuple[str, str], set[str]] = {}
    for section in _sections():
        if section.startswith("Problem types"):
            continue
        marks = sorted(
            [(m.start(), "route", (m[1], _shape(m[2]))) for m in _ROUTE.finditer(section)]
            + [(m.start(1), "status", m[1]) for m in _STATUS.finditer(section)],
            key=lambda mark: mark[0],
        )
        current: tuple[str, str] | None = None
        for _, kind, value in marks:
            if kind == "route":
                current = value  # type: ignore[assignment]
                found.setdefault(current, set())
            elif current is not None:
                found[current].add(value)  # type: ignore[arg-type]
    return found


def test_every_route_in_the_doc_is_in_the_openapi_document_and_back(
    operations: dict[tuple[str, str], set[str]],
) -> None:
    documented = set(_documented_statuses())
    assert documented - set(operations) == set(), "routes in api.md missing from OpenAPI"
    served = {op for op in operations if op[0] != "HEAD"}
    assert served - documented == set(), "OpenAPI routes that api.md never names"


def test_every_status_the_doc_gives_a_route_is_declared_for_it(
    operations: dict[tuple[str, str], set[str]],
) -> None:
    missing = {
        f"{method} {path} {status}"
        for (method, path), statuses in _documented_statuses().items()
        for status in statuses - operations.get((method, path), set())
    }
    assert missing == set()


def test_the_doc_names_statuses_for_the_routes_that_have_outcomes() -> None:
    statuses = _documented_statuses()
    assert {"201", "200", "409"} <= statuses[("POST", "/v1/jobs")]
    assert {"202", "409", "422"} <= statuses[("POST", "/v1/jobs/{}/attempts")]
    assert {"409", "422"} <= statuses[("POST", "/v1/admin/attempts/{}/resolve")]


def test_every_problem_status_in_the_doc_is_declared_by_some_route(
    operations: dict[tuple[str, str], set[str]],
) -> None:
    table = next(s for s in _sections() if s.startswith("Problem types"))
    rows = re.findall(r"^\| `urn:onejob:[a-z-]+` \| (\d{3}) \|", table, re.MULTILINE)
    assert len(rows) >= 15
    declared = set().union(*operations.values())
    assert set(rows) - _NOT_PER_ROUTE - declared == set()
