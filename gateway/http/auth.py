"""Bearer authentication: the API key is the principal (DESIGN R1)."""

from __future__ import annotations

from typing import Any

from litestar import Request

from gateway.domain.records import Principal
from gateway.errors import Forbidden, Unauthorized

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


async def authenticate(request: Request[Any, Any, Any]) -> Principal:
    """Resolve the request's API key to a principal (a Litestar dependency)."""
    headers = request.headers.getall("authorization", [])
    if len(headers) > 1:
        raise Unauthorized("Send one Authorization header.")
    token = bearer_token(headers[0] if headers else None)
    principal = await request.app.state.service.authenticate(token)
    if principal is None:
        raise Unauthorized("The API key is not valid or was revoked.")
    return principal  # type: ignore[no-any-return]


async def authenticate_admin(request: Request[Any, Any, Any]) -> Principal:
    """Resolve the key and require the admin scope, before anything of the request is read."""
    principal = await authenticate(request)
    if not principal.is_admin:
        raise Forbidden("This route needs an API key with the admin scope.")
    return principal
