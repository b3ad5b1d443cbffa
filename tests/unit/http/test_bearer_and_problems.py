from __future__ import annotations

import json

import pytest

from gateway.errors import (
    FallbackNotCertified,
    GatewayError,
    InvalidInput,
    NotFound,
    Unauthorized,
)
from gateway.http.auth import bearer_token
from gateway.http.responses import PROBLEM_JSON, error_response


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic abc",
        "bearer\tabc",
        "Token abc",
        "Bearer ké",
        "Bearer " + "a" * 600,
    ],
)
def test_missing_or_odd_authorization_is_unauthorized(header: str | None) -> None:
    with pytest.raises(Unauthorized):
        bearer_token(header)


@pytest.mark.parametrize("header", ["Bearer abc", "bearer abc", "BEARER  abc ", " Bearer abc"])
def test_the_bearer_scheme_is_case_insensitive(header: str) -> None:
    assert bearer_token(header) == "abc"


def test_unauthorized_asks_for_a_bearer_token() -> None:
    response = error_response(Unauthorized())
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.media_type == PROBLEM_JSON


def test_invalid_input_carries_its_errors_in_the_problem() -> None:
    response = error_response(InvalidInput("bad", errors=["a is required", "b too long"]))
    body = response.content
    assert body["type"] == "urn:onejob:invalid-input"
    assert body["status"] == 422
    assert body["errors"] == ["a is required", "b too long"]
    json.dumps(body)


@pytest.mark.parametrize(
    ("error", "status", "type_"),
    [
        (NotFound(), 404, "urn:onejob:not-found"),
        (FallbackNotCertified("x"), 422, "urn:onejob:fallback-not-certified"),
        (Unauthorized(), 401, "urn:onejob:unauthorized"),
    ],
)
def test_each_error_class_names_its_status_and_type(
    error: GatewayError, status: int, type_: str
) -> None:
    body = error_response(error).content
    assert (body["status"], body["type"]) == (status, type_)
    assert body["title"] and body["detail"]


def test_a_flood_of_validation_errors_is_capped() -> None:
    error = InvalidInput("bad", errors=[f"error {i} " + "x" * 1000 for i in range(500)])
    assert len(error.errors) == InvalidInput.MAX_ERRORS + 1
    assert error.errors[-1] == "... and 450 more"
    assert all(len(e) <= 503 for e in error.errors)
