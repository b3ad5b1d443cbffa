"""Bearer authentication: the API key is the principal (DESIGN R1)."""

from __future__ import annotations

from typing import Any

from litestar import Request

from gateway.domain.records import Principal
from gateway.errors import Forbidden, Unauthorized
from gateway.service import JobService

MAX_KEY_LENGTH = 512  # characters; longer bearer tokens are refused without a lookup


def bearer_token(authorization: str | None) -> str:
    """Return the token of an ``Authorization: Bearer <token>`` header; raise ``Unauthorized``."""
    if not authorization:
        raise Unauthorized("An Authorization: Bearer <key> header is required.")
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("Use the Bearer scheme: Authorization: Bearer <key>.")
    if len(token) > MAX_KEY_LENGTH or not token.isascii() or not token.isprintable():
        raise Unauthorized("The API key is not valid.")
    return token


def request_key(request: Request[Any, Any, Any]) -> str:
    """Return the request's API key as sent; raise ``Unauthorized`` for a malformed header.

    Nothing is looked up: the caller checks the key (``authenticate``, or the creating
    statement itself, ``JobService.create_job_for_key``).
    """
    headers = request.headers.getall("authorization", [])
    if len(headers) > 1:
        raise Unauthorized("Send one Authorization header.")
    return bearer_token(headers[0] if headers else None)


async def authenticate(request: Request[Any, Any, Any]) -> Principal:
    """Resolve the request's API key to a principal (a Litestar dependency)."""
    service: JobService = request.app.state.service
    return await service.require_key(request_key(request))


async def authenticate_admin(request: Request[Any, Any, Any]) -> Principal:
    """Resolve the key and require the admin scope, before anything of the request is read."""
    principal = await authenticate(request)
    if not principal.is_admin:
        raise Forbidden("This route needs an API key with the admin scope.")
    return principal
