"""The OpenAPI document says what the routes answer: bodies, codes, problems, auth."""

from __future__ import annotations

import re
from typing import Any

import httpx

from gateway.http.openapi import ATTEMPT_ID_PATTERN, CURSOR_PATTERN, ID_PATTERNS, JOB_ID_PATTERN


async def _doc(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.get("/schema/openapi.json")
    assert r.status_code == 200
    doc: dict[str, Any] = r.json()
    return doc


async def test_every_body_route_documents_its_typed_request_body(
    client: httpx.AsyncClient,
) -> None:
    doc = await _doc(client)
    schemas = doc["components"]["schemas"]
    for path, name in (
        ("/v1/jobs", "CreateJobBody"),
        ("/v1/jobs/{job_id}/attempts", "AttemptBody"),
    ):
        body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"]["$ref"] == f"#/components/schemas/{name}"
    resolve = doc["paths"]["/v1/admin/attempts/{attempt_id}/resolve"]["post"]["requestBody"]
    variants = resolve["content"]["application/json"]["schema"]["oneOf"]
    names = [v["$ref"].rsplit("/", 1)[1] for v in variants]
    assert names == ["ResolveSucceeded", "ResolveFailed", "ResolveCancelled"]
    outcomes = {schemas[n]["properties"]["outcome"]["const"]: schemas[n] for n in names}
    assert set(outcomes) == {"succeeded", "failed", "cancelled"}
    assert outcomes["succeeded"]["required"] == ["outcome", "result"]
    for outcome in ("failed", "cancelled"):
        assert "result" not in outcomes[outcome]["properties"]
        assert outcomes[outcome]["additionalProperties"] is False


async def test_the_served_document_says_this_deployments_contracts_inputs_and_providers(
    client: httpx.AsyncClient, catalog: dict[str, Any], settings: Any
) -> None:
    """Schema-valid means accepted: contract names, their input schemas, known providers."""
    schemas = (await _doc(client))["components"]["schemas"]
    variants = [v["$ref"].rsplit("/", 1)[1] for v in schemas["CreateJobBody"]["oneOf"]]
    by_contract = {schemas[v]["properties"]["contract"]["const"]: schemas[v] for v in variants}
    assert set(by_contract) == set(catalog)
    providers = sorted(settings.providers)
    for name, variant in by_contract.items():
        assert variant["additionalProperties"] is False
        documented = variant["properties"]["input"]
        own = {k: v for k, v in catalog[name].input_schema.items() if k != "$schema"}
        assert documented == own, name
        choices = variant["properties"]["provider"]["oneOf"]
        assert choices == [{"type": "string", "enum": providers}, {"type": "null"}]
    attempt = schemas["AttemptBody"]["properties"]["provider"]
    assert attempt == {"type": "string", "enum": providers}


async def test_the_document_declares_the_headers_answers_carry(
    client: httpx.AsyncClient, keys: Any
) -> None:
    paths = (await _doc(client))["paths"]
    create = paths["/v1/jobs"]["post"]["responses"]
    assert create["201"]["headers"]["Location"]["required"] is True
    assert create["200"]["headers"]["Idempotent-Replayed"]["required"] is True
    assert create["201"]["headers"]["Preference-Applied"]["required"] is False
    assert paths["/v1/jobs/{job_id}/attempts"]["post"]["responses"]["202"]["headers"]["Location"]
    for path, item in paths.items():
        for op in item.values():
            responses = op["responses"]
            if "503" in responses:
                assert responses["503"]["headers"]["Retry-After"]["required"] is True, path
            if "401" in responses:
                assert "WWW-Authenticate" in responses["401"]["headers"], path
    r = await client.post(
        "/v1/jobs", json={"contract": "echo@1", "input": {}}, headers=keys.job(key='"h"')
    )
    assert r.status_code == 201 and r.headers["Location"] == f"/v1/jobs/{r.json()['id']}"
    r = await client.post(
        "/v1/jobs", json={"contract": "echo@1", "input": {}}, headers=keys.job(key='"h"')
    )
    assert r.status_code == 200 and r.headers["Idempotent-Replayed"] == "true"


async def test_options_on_a_path_with_two_handlers_allows_both(
    client: httpx.AsyncClient,
) -> None:
    """Litestar's own OPTIONS answer would name only the first handler's method."""
    r = await client.options("/v1/jobs")
    assert r.status_code == 204
    assert r.headers["allow"] == "GET, OPTIONS, POST"
    r = await client.options("/healthz")
    assert r.headers["allow"] == "GET, HEAD, OPTIONS"
    r = await client.options("/v1/contracts")
    assert r.headers["allow"] == "GET, OPTIONS"


async def test_documented_success_codes_are_the_ones_answered(
    client: httpx.AsyncClient,
) -> None:
    paths = (await _doc(client))["paths"]
    assert {"201", "200", "409", "422"} <= set(paths["/v1/jobs"]["post"]["responses"])
    assert "201" not in paths["/v1/jobs/{job_id}/cancel"]["post"]["responses"]
    assert "200" in paths["/v1/jobs/{job_id}/cancel"]["post"]["responses"]
    assert "202" in paths["/v1/jobs/{job_id}/attempts"]["post"]["responses"]
    assert "201" not in paths["/v1/jobs/{job_id}/attempts"]["post"]["responses"]
    assert "200" in paths["/v1/admin/attempts/{attempt_id}/resolve"]["post"]["responses"]
    metrics = paths["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain; version=0.0.4"]


async def test_every_v1_route_needs_the_bearer_scheme_and_documents_its_problems(
    client: httpx.AsyncClient,
) -> None:
    doc = await _doc(client)
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key made by `onejob keys create`.",
    }
    for path, item in doc["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for op in item.values():
            assert op["security"] == [{"bearer": []}], path
            for status in ("401", "503"):
                content = op["responses"][status]["content"]
                assert list(content) == ["application/problem+json"], (path, status)
        if path.startswith("/v1/admin/"):
            assert all("403" in op["responses"] for op in item.values()), path
    create = doc["paths"]["/v1/jobs"]["post"]
    headers = {p["name"] for p in create["parameters"] if p["in"] == "header"}
    assert headers == {"Idempotency-Key", "Prefer"}


async def test_metrics_say_charset_once_and_head_healthz_answers(
    client: httpx.AsyncClient,
) -> None:
    r = await client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].count("charset") == 1
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    head = await client.head("/healthz")
    assert head.status_code == 200
    assert head.content == b""


async def test_the_document_declares_filters_enums_the_key_header_and_a_catalog_example(
    client: httpx.AsyncClient,
) -> None:
    doc = await _doc(client)
    paths, schemas = doc["paths"], doc["components"]["schemas"]
    (status,) = [p for p in paths["/v1/jobs"]["get"]["parameters"] if p["name"] == "status"]
    assert set(status["schema"]["enum"]) == {
        "queued",
        "running",
        "unknown",
        "succeeded",
        "failed",
        "cancelled",
    }
    (state,) = [p for p in paths["/v1/admin/attempts"]["get"]["parameters"] if p["name"] == "state"]
    assert "lost" in state["schema"]["enum"] and "queued" not in state["schema"]["enum"]
    assert schemas["JobStatus"]["enum"] == status["schema"]["enum"]
    assert set(schemas["AttemptState"]["enum"]) == set(state["schema"]["enum"])
    create = paths["/v1/jobs"]["post"]
    (key,) = [p for p in create["parameters"] if p["name"] == "Idempotency-Key"]
    assert key["required"] is True
    (example,) = create["requestBody"]["content"]["application/json"]["examples"].values()
    assert example["value"]["contract"] == "ticket-triage@1"
    assert example["value"]["input"]["ticket_id"] == "SUP-40100"


async def test_every_success_answer_names_its_struct_not_an_empty_schema(
    client: httpx.AsyncClient,
) -> None:
    doc = await _doc(client)
    for path, item in doc["paths"].items():
        for method, op in item.items():
            for status, answer in op["responses"].items():
                no_json = status == "204" or path == "/metrics" or method == "head"
                if not status.startswith("2") or no_json:
                    continue
                schema = answer["content"]["application/json"]["schema"]
                assert schema.get("$ref", "").startswith("#/components/schemas/"), (path, status)


async def test_every_id_in_a_path_and_the_cursor_say_what_the_gateway_makes(
    client: httpx.AsyncClient,
) -> None:
    """schemathesis sent ``cursor=0`` and ids with ``/`` in them: schema-valid, yet refused."""
    doc = await _doc(client)
    patterns: dict[str, set[str]] = {}
    for item in doc["paths"].values():
        for operation in item.values():
            for parameter in operation.get("parameters", ()):
                if parameter["in"] == "path":
                    patterns.setdefault(parameter["name"], set()).add(
                        parameter["schema"]["pattern"]
                    )
    assert patterns == {
        "job_id": {JOB_ID_PATTERN},
        "attempt_id": {ATTEMPT_ID_PATTERN},
        "webhook_id": {ID_PATTERNS["webhook_id"]},
        "delivery_id": {ID_PATTERNS["delivery_id"]},
    }
    listing = doc["paths"]["/v1/jobs"]["get"]["parameters"]
    cursor = next(p for p in listing if p["name"] == "cursor")
    assert cursor["schema"]["pattern"] == CURSOR_PATTERN


async def test_a_cursor_the_gateway_issued_matches_its_pattern_and_one_off_it_is_a_400(
    client: httpx.AsyncClient, keys: Any
) -> None:
    for key in ('"p1"', '"p2"'):
        r = await client.post(
            "/v1/jobs", json={"contract": "echo@1", "input": {}}, headers=keys.job(key=key)
        )
        assert r.status_code == 201, r.text
        assert re.fullmatch(JOB_ID_PATTERN, r.json()["id"])
        assert re.fullmatch(ATTEMPT_ID_PATTERN, r.json()["attempts"][0]["id"])
    page = (await client.get("/v1/jobs?limit=1", headers=keys.auth())).json()
    assert re.fullmatch(CURSOR_PATTERN, page["next_cursor"])
    for cursor in ("0", "am9iXw", page["next_cursor"] + "A", page["next_cursor"][:-1]):
        r = await client.get("/v1/jobs", params={"limit": 1, "cursor": cursor}, headers=keys.auth())
        assert r.status_code == 400, (cursor, r.text)


async def test_the_document_is_titled_for_its_api_and_types_limit_as_a_bounded_integer(
    client: httpx.AsyncClient,
) -> None:
    doc = await _doc(client)
    # The reference page heads with "title (version)": it read "onejob (1)".
    assert (doc["info"]["title"], doc["info"]["version"]) == ("onejob API", "v1")
    for path, most in (("/v1/jobs", 100), ("/v1/admin/jobs", 100), ("/v1/admin/attempts", 1000)):
        (limit,) = [p for p in doc["paths"][path]["get"]["parameters"] if p["name"] == "limit"]
        schema = limit["schema"]
        # It was a string matching a regex; the server still reads it as plain digits.
        default = 100 if most == 1000 else 20
        assert "pattern" not in schema and "oneOf" not in schema, schema
        shown = {k: schema.get(k) for k in ("type", "minimum", "maximum", "default")}
        assert shown == {"type": "integer", "minimum": 1, "maximum": most, "default": default}
