"""What the OpenAPI document says beyond the handlers' signatures: bodies, problems, auth.

Handlers read their bodies themselves (after authentication, under the JSON rules of
``strict_json.parse_json``), so Litestar does not see a ``data`` parameter. Litestar documents
the ``data`` of any dependency a handler has, and resolves at run time only the
dependencies a handler asks for: ``body_doc(Struct)`` is such a dependency, never asked
for, that puts the struct's schema into the document as the request body.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
from litestar._openapi.schema_generation.plugins.struct import StructSchemaPlugin
from litestar.di import Provide
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import (
    Components,
    Example,
    OpenAPI,
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Parameter,
    Reference,
    RequestBody,
    Schema,
    SecurityScheme,
)
from litestar.typing import FieldDefinition

from contracts.loader import CATALOG_ROOT
from gateway.domain.ports import ContractSpec

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


def body_doc(struct: Any) -> Mapping[str, Provide]:
    """Document ``struct`` (or a tagged union of structs) as the request body.

    The dependency returned is never resolved.
    """

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
    """``POST /v1/jobs`` as documented: its two headers, and a catalog example.

    The handler reads ``Idempotency-Key`` and ``Prefer`` itself (the key after
    authentication: a missing key is a 400 only for a known caller), so they are not
    parameters of its signature, which would have Litestar parse every header of every
    creation into a mapping nobody reads (3 % of a creation's CPU); the document still
    says the key is required.
    """

    def __post_init__(self) -> None:
        self.parameters = [*create_job_headers(), *(self.parameters or ())]
        if isinstance(self.request_body, RequestBody):
            json_body = self.request_body.content.get("application/json")
            if json_body is not None:
                json_body.examples = create_job_examples()


#: ``Prefer`` as documented on every route that reads it (``POST /v1/jobs``, ``GET`` a job).
PREFER_DESCRIPTION = "wait=N (N <= 60): answer once the job settles."


def create_job_headers() -> list[Parameter]:
    """The headers ``POST /v1/jobs`` reads: ``Idempotency-Key`` (required) and ``Prefer``."""
    key = 'Required: an RFC 8941 sf-string ("abc") or token, 1-255 printable ASCII.'
    return [
        Parameter(
            name=IDEMPOTENCY_KEY,
            param_in="header",
            required=True,
            description=key,
            schema=Schema(type=OpenAPIType.STRING, pattern=IDEMPOTENCY_KEY_PATTERN),
        ),
        Parameter(
            name="Prefer",
            param_in="header",
            required=False,
            description=PREFER_DESCRIPTION,
            schema=Schema(type=OpenAPIType.STRING),
        ),
    ]


IDEMPOTENCY_KEY = "Idempotency-Key"
#: What ``idempotency.parse_idempotency_key`` accepts: a token, or an sf-string of 1-255.
IDEMPOTENCY_KEY_PATTERN = (
    r"^(?:[!#$%&'*+.^_`|~0-9A-Za-z:/-]{1,255}"
    r'|"(?:[ !#-\[\]-~]|\\["\\]){1,255}")$'
)


#: Crockford's base32, as ``gateway.domain.clock.ulid_text`` writes a ULID.
_ULID = "[0-9A-HJKMNP-TV-Z]{26}"
#: The ids this gateway makes (``UlidIds``): a job's and an attempt's. A path with any
#: other id is 404 (no such job), so the document says which ids can exist.
JOB_ID_PATTERN = f"^job_{_ULID}$"
ATTEMPT_ID_PATTERN = f"^att_{_ULID}$"
#: The path parameters that carry those ids, on every route.
ID_PATTERNS = {
    "job_id": JOB_ID_PATTERN,
    "attempt_id": ATTEMPT_ID_PATTERN,
    "webhook_id": f"^wh_{_ULID}$",
    "delivery_id": f"^msg_{_ULID}$",
}

#: One 3-byte group of an id's text, each byte one of U+0030-U+005F (digits, upper-case
#: letters and ``:;<=>?@[\]^_``, a superset of Crockford's base32), base64url-encoded: the
#: first byte is the first character and the top of the second, the second the rest of it
#: and the top of the third; the third character's lowest bits and the fourth are the third
#: byte, which is U+0030-U+003F (``00``, then 48-63) or U+0040-U+005F (``01``, then 0-31).
_CURSOR_TAIL = "(?:[AEIMQUYcgkosw048][w-z0-9_-]|[BFJNRVZdhlptx159][A-Za-f])"
_CURSOR_GROUP = f"[M-X][DEFTUVjklz01]{_CURSOR_TAIL}"
#: A paging cursor as ``encode_cursor`` makes it: a job id (``job_`` and 26 characters)
#: in unpadded base64url, 40 characters. ``job`` is ``am9i``; ``_`` and the id's first two
#: characters are ``X``, the top of the first and a tail; then eight groups. Every text it
#: matches decodes to ``job_`` and 26 printable characters, which ``decode_cursor`` takes;
#: only a cursor naming one of the caller's jobs is then accepted (400 otherwise).
CURSOR_PATTERN = f"^am9iX[z01]{_CURSOR_TAIL}(?:{_CURSOR_GROUP}){{8}}$"


def _declare_ids(openapi: OpenAPI) -> None:
    """Give every ``job_id`` and ``attempt_id`` path parameter the pattern of its ids."""
    for item in (openapi.paths or {}).values():
        for method in ("get", "post", "head", "put", "delete", "patch"):
            operation = getattr(item, method, None)
            for parameter in getattr(operation, "parameters", None) or ():
                pattern = ID_PATTERNS.get(getattr(parameter, "name", ""))
                if pattern is None or getattr(parameter, "param_in", None) != "path":
                    continue
                if isinstance(parameter.schema, Schema):
                    parameter.schema.pattern = pattern


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


#: Response headers the handlers send, by (path, method, status): name -> (required, doc).
_SENT_HEADERS: dict[tuple[str, str, str], dict[str, tuple[bool, str]]] = {
    ("/v1/jobs", "post", "201"): {
        "Location": (True, "The job's URL."),
        "Preference-Applied": (False, "wait=N, when the request asked ``Prefer: wait=N``."),
    },
    ("/v1/jobs", "post", "200"): {
        "Location": (True, "The job's URL."),
        "Idempotent-Replayed": (True, "``true``: this key had already made this job."),
        "Preference-Applied": (False, "wait=N, when the request asked ``Prefer: wait=N``."),
    },
    ("/v1/jobs/{job_id}", "get", "200"): {
        "Preference-Applied": (False, "wait=N, when the request asked ``Prefer: wait=N``."),
    },
    ("/v1/jobs/{job_id}/attempts", "post", "202"): {
        "Location": (True, "The job's URL."),
    },
}
#: Headers every answer of a status carries, on whatever route.
_STATUS_HEADERS: dict[str, dict[str, tuple[bool, str]]] = {
    "401": {"WWW-Authenticate": (True, 'Bearer realm="onejob"')},
    "503": {"Retry-After": (True, "Seconds to wait before retrying, as sent.")},
}


def _declare_headers(openapi: OpenAPI) -> None:
    """Say which headers each answer carries (Litestar's ``ResponseSpec`` has no headers)."""
    for path, item in (openapi.paths or {}).items():
        for method in ("get", "post", "head", "put", "delete", "patch"):
            operation = getattr(item, method, None)
            if operation is None:
                continue
            for status, response in (operation.responses or {}).items():
                if not isinstance(response, OpenAPIResponse):
                    continue
                wanted = {
                    **_STATUS_HEADERS.get(status, {}),
                    **_SENT_HEADERS.get((path, method, status), {}),
                }
                if wanted:
                    response.headers = {
                        **(response.headers or {}),
                        **{
                            name: OpenAPIHeader(
                                schema=Schema(type=OpenAPIType.STRING),
                                required=required,
                                description=doc,
                            )
                            for name, (required, doc) in wanted.items()
                        },
                    }


#: The largest integer the JSON rules accept (``strict_json.parse_json``): 2^53 - 1.
SAFE_INTEGER = 2**53 - 1


#: The route that also answers as an event stream (``gateway.http.event_stream``).
EVENT_STREAM_PATH = "/v1/jobs/{job_id}/events"
EVENT_STREAM_DOC = (
    "With `Accept: text/event-stream`: Server-Sent Events. Each audit event as "
    "`event: <kind>` with its `id` and the event as JSON `data`; the job as "
    "`GET /v1/jobs/{id}` shows it as `event: job` whenever it changed; a comment as a "
    "keep-alive after 15 s of silence. The stream ends when the job is succeeded, failed "
    "or cancelled, or after 300 s; reconnect with `Last-Event-ID` to resume after the "
    "last event seen."
)


def _declare_event_stream(openapi: OpenAPI) -> None:
    """Say that the events route also answers ``text/event-stream``, and with which headers."""
    item = (openapi.paths or {}).get(EVENT_STREAM_PATH)
    operation = getattr(item, "get", None)
    if operation is None:
        return
    ok = (operation.responses or {}).get("200")
    if isinstance(ok, OpenAPIResponse):
        ok.content = {
            **(ok.content or {}),
            "text/event-stream": OpenAPIMediaType(
                schema=Schema(type=OpenAPIType.STRING, description=EVENT_STREAM_DOC)
            ),
        }
    operation.parameters = [
        *(operation.parameters or []),
        Parameter(
            name="Accept",
            param_in="header",
            required=False,
            description="`text/event-stream` to follow the job as it changes.",
            schema=Schema(type=OpenAPIType.STRING),
        ),
        Parameter(
            name="Last-Event-ID",
            param_in="header",
            required=False,
            description="The id of the last event received: only later events are sent, "
            "as a stream or as JSON (empty: from the start).",
            schema=Schema(type=OpenAPIType.STRING, pattern="^[0-9]{0,18}$"),
        ),
    ]


def _under_json_rules(schema: Any) -> Any:
    """Bound every unbounded ``integer`` of a contract's schema as the JSON rules do.

    An integer beyond 2^53 is refused whatever the contract says, so the document says it.
    (``number`` stays as it is: a float beyond 2^53 is accepted, and JSON Schema cannot
    tell ``1e20`` from ``100000000000000000000``.)
    """
    if isinstance(schema, list):
        return [_under_json_rules(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _under_json_rules(v) for k, v in schema.items()}
    if out.get("type") == "integer":
        out.setdefault("minimum", -SAFE_INTEGER)
        out.setdefault("maximum", SAFE_INTEGER)
    return out


def _create_body_variant(
    name: str, contract: ContractSpec, providers: list[str], routed: bool
) -> dict[str, Any]:
    """The create body for one contract: its name, its own input schema, a known provider."""
    input_schema = _under_json_rules(
        {k: v for k, v in contract.input_schema.items() if k != "$schema"}
    )
    provider: dict[str, Any] = {"type": "string", "enum": providers}
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["contract", "input"] if routed else ["contract", "input", "provider"],
        "properties": {
            "contract": {"const": name, "description": contract.description},
            "input": input_schema,
            "provider": {"oneOf": [provider, {"type": "null"}]} if routed else provider,
        },
    }


#: The struct schemas Litestar names after the request bodies.
CreateJobBody_NAME, AttemptBody_NAME = "CreateJobBody", "AttemptBody"


def _raw_schema(schema: dict[str, Any]) -> Any:
    """Return a plain JSON Schema where Litestar's ``Schema`` goes.

    ``to_schema`` copies plain dicts as they are, so a contract's own input schema is
    served unchanged instead of being re-modelled field by field.
    """
    return schema


def describe_deployment(
    openapi: OpenAPI,
    contracts: Mapping[str, ContractSpec],
    providers: Iterable[str],
    routed: Callable[[str], bool],
) -> None:
    """Make the served document say what this deployment accepts, not only its shapes.

    Which contracts exist, what input each takes and which providers are configured are
    this deployment's configuration, so a document the same for every deployment would
    call bodies valid that the gateway refuses (422). Called once the catalog is loaded:
    ``CreateJobBody`` becomes one closed variant per contract (its ``input`` schema, a
    configured ``provider``, required where the contract has no route) and a manual
    attempt's ``provider`` one of the configured names. Response headers and the ids'
    patterns are declared too.
    """
    names = sorted(providers)
    schemas = openapi.components.schemas
    variants = []
    for name in sorted(contracts):
        variant = f"CreateJob.{name.replace('@', '.')}"
        schemas[variant] = _raw_schema(
            _create_body_variant(name, contracts[name], names, routed(name))
        )
        variants.append({"$ref": f"#/components/schemas/{variant}"})
    create = schemas.get(CreateJobBody_NAME)
    if isinstance(create, Schema) and variants:
        schemas[CreateJobBody_NAME] = _raw_schema(
            {"description": create.description, "oneOf": variants}
        )
    attempt = schemas.get(AttemptBody_NAME)
    if isinstance(attempt, Schema) and attempt.properties:
        attempt.properties["provider"] = _raw_schema({"type": "string", "enum": names})
    _declare_headers(openapi)
    _declare_event_stream(openapi)
    _declare_ids(openapi)
