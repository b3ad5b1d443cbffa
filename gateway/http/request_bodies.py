"""The typed request bodies: what each route accepts, unknown fields refused.

The body is first read under the JSON rules of ``strict_json.parse_json`` (no duplicate keys,
NaN, U+0000, deep nesting), then converted strictly to one of these structs, so a wrong
type or an unknown field is a 422 listing what is wrong. The same structs give the
OpenAPI document its request schemas.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from litestar import Request

from gateway.errors import InvalidInput
from gateway.http.strict_json import read_json

T = TypeVar("T", bound=msgspec.Struct)


class CreateJobBody(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/jobs``: the contract, its input, and optionally the primary provider."""

    #: A contract of the catalog, e.g. ``ticket-triage@1``.
    contract: str
    #: The contract's input, valid for its input schema.
    input: Any
    #: The primary provider; omitted or null: the contract route's primary.
    provider: str | None = None
    #: Seconds the job may take (at most the route's ``job_deadline_s``, its default):
    #: nothing is sent for it after that. Not part of the request's fingerprint: a retry
    #: that sends another value (or none) replays the same job, deadline and all.
    deadline_s: float | None = None


class AttemptBody(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/jobs/{id}/attempts``: the provider of the manual attempt."""

    provider: str


class ResolveSucceeded(
    msgspec.Struct, tag="succeeded", tag_field="outcome", forbid_unknown_fields=True
):
    """The unknown attempt did produce a result (found in the provider's dashboard)."""

    #: The result, valid for the contract's output schema.
    result: Any
    note: str = ""


class ResolveFailed(msgspec.Struct, tag="failed", tag_field="outcome", forbid_unknown_fields=True):
    """The unknown attempt did not run, or failed: the job may fail over (R6)."""

    note: str = ""


class ResolveCancelled(
    msgspec.Struct, tag="cancelled", tag_field="outcome", forbid_unknown_fields=True
):
    """The unknown attempt is given up; the job is not retried."""

    note: str = ""


#: ``POST /v1/admin/attempts/{id}/resolve``: what became of an unknown attempt, told apart
#: by ``outcome``; ``result`` belongs to ``succeeded`` alone, so the document says so too.
ResolveBody = ResolveSucceeded | ResolveFailed | ResolveCancelled


def typed(value: Any, type_: Any) -> Any:
    """Convert a parsed JSON value to ``type_`` (a struct or a tagged union of structs).

    Raise ``InvalidInput`` saying what is wrong.
    """
    if not isinstance(value, dict):
        raise InvalidInput("The body must be a JSON object.")
    try:
        return msgspec.convert(value, type_, strict=True)
    except msgspec.ValidationError as exc:
        raise InvalidInput(errors=[str(exc)]) from None


async def read_body(request: Request[Any, Any, Any], type_: type[T]) -> T:
    """Read the request body under the JSON rules and convert it to ``type_``."""
    body: T = typed(await read_json(request), type_)
    return body


async def read_resolution(request: Request[Any, Any, Any]) -> ResolveBody:
    """Read a resolve body: one of the three outcomes, each with only its own members."""
    body: ResolveBody = typed(await read_json(request), ResolveBody)
    return body
