"""What the OpenAPI document says beyond the handlers' signatures: bodies, problems, auth.

Handlers read their bodies themselves (after authentication, under the JSON rules of
``body.parse_json``), so Litestar does not see a ``data`` parameter. Litestar documents
the ``data`` of any dependency a handler has, and resolves at run time only the
dependencies a handler asks for: ``body_doc(Struct)`` is such a dependency, never asked
for, that puts the struct's schema into the document as the request body.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
from litestar._openapi.schema_generation.plugins.struct import StructSchemaPlugin
from litestar.di import Provide
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import (
    Components,
    Example,
    Operation,
    Parameter,
    Reference,
    RequestBody,
    Schema,
    SecurityScheme,
)
from litestar.typing import FieldDefinition

from contracts.catalog import CATALOG_ROOT

if TYPE_CHECKING:
    from litestar._openapi.schema_generation import SchemaCreator

PROBLEM_JSON = "application/problem+json"
BEARER = "bearer"
#: Every ``/v1`` route needs ``Authorization: Bearer <key>``.
SECURITY: list[dict[str, list[str]]] = [{BEARER: []}]
SECURITY_COMPONENTS = Components(
    security_schemes={
        BEARER: SecurityScheme(
            type="http", scheme="bearer", description="An API key made by `onejob keys create`."
        )
    }
)


class Problem(msgspec.Struct):
    """An RFC 9457 problem document (members beyond these depend on ``type``)."""

    type: str
    title: str
    status: int
    detail: str


_WHY: dict[int, str] = {
    400: "Malformed request: JSON, Idempotency-Key, query parameter, cursor, encoded slash",
    401: "No valid API key (``WWW-Authenticate: Bearer``)",
    403: "The key lacks the admin scope",
    404: "No such job or attempt for this caller",
    409: "A conflict: key reused, attempt in progress, job closed, attempt not unknown",
    413: "The body is larger than the gateway accepts",
    422: "Well-formed but not acceptable: unknown field, wrong type, contract, provider, input",
    503: "The database is unreachable (``Retry-After``); retrying as sent is safe",
}


def problems(*statuses: int) -> dict[int, ResponseSpec]:
    """Document the problem+json answers a route can give (401 and 503 always)."""
    return {
        status: ResponseSpec(
            data_container=Problem,
            media_type=PROBLEM_JSON,
            description=_WHY[status],
            generate_examples=False,
        )
        for status in sorted({401, 503, *statuses})
    }


def answer(struct: type[msgspec.Struct], description: str) -> ResponseSpec:
    """Document a JSON success answer of shape ``struct`` (the handler builds the same JSON)."""
    return ResponseSpec(data_container=struct, description=description, generate_examples=False)


def body_doc(struct: type[msgspec.Struct]) -> Mapping[str, Provide]:
    """Return a dependency that documents ``struct`` as the request body (never resolved)."""

    def documented(data: Any) -> None:  # pragma: no cover - OpenAPI only, never called
        return None

    documented.__annotations__ = {"data": struct, "return": None}
    return {"request_body_schema": Provide(documented, sync_to_thread=False)}


#: The catalog case the create request's example is made of.
EXAMPLE_CONTRACT, EXAMPLE_VERSION = "ticket-triage", 1


def create_job_examples() -> dict[str, Example | Reference]:
    """Return the create request example: the first case of the ticket-triage contract."""
    with (CATALOG_ROOT / EXAMPLE_CONTRACT / "cases.jsonl").open(encoding="utf-8") as cases:
        case = json.loads(cases.readline())
    example = Example(
        summary=f"{EXAMPLE_CONTRACT} case {case['id']}",
        value={"contract": f"{EXAMPLE_CONTRACT}@{EXAMPLE_VERSION}", "input": case["input"]},
    )
    return {case["id"]: example}


@dataclass
class CreateJobOperation(Operation):
    """``POST /v1/jobs`` as documented: the ``Idempotency-Key`` required, a catalog example.

    The handler reads the header itself, after authentication (a missing key is a 400
    only for a known caller), so Litestar must not enforce it; the document still says
    it is required.
    """

    def __post_init__(self) -> None:
        for parameter in self.parameters or ():
            if isinstance(parameter, Parameter) and parameter.name == IDEMPOTENCY_KEY:
                parameter.required = True
        if isinstance(self.request_body, RequestBody):
            json_body = self.request_body.content.get("application/json")
            if json_body is not None:
                json_body.examples = create_job_examples()


IDEMPOTENCY_KEY = "Idempotency-Key"
#: What ``idempotency.parse_idempotency_key`` accepts: a token, or an sf-string of 1-255.
IDEMPOTENCY_KEY_PATTERN = (
    r"^(?:[!#$%&'*+.^_`|~0-9A-Za-z:/-]{1,255}"
    r'|"(?:[ !#-\[\]-~]|\\["\\]){1,255}")$'
)


class StrictStructSchemaPlugin(StructSchemaPlugin):
    """Say ``additionalProperties: false`` for structs that refuse unknown fields.

    Litestar's own struct plugin leaves it out, so a schema-valid body with an extra
    member would be refused by a route the document says accepts it.
    """

    def is_plugin_supported_field(self, field_definition: FieldDefinition) -> bool:
        """Take the structs with ``forbid_unknown_fields``; leave the rest to Litestar."""
        type_ = field_definition.type_
        return (
            isinstance(type_, type)
            and issubclass(type_, msgspec.Struct)
            and type_.__struct_config__.forbid_unknown_fields
        )

    def to_openapi_schema(
        self, field_definition: FieldDefinition, schema_creator: SchemaCreator
    ) -> Schema:
        """Build Litestar's schema of the struct, closed to other members."""
        schema = super().to_openapi_schema(field_definition, schema_creator)
        schema.additional_properties = False
        return schema
