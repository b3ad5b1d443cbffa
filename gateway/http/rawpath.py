"""Route on the path as sent: an encoded slash never becomes a path separator.

ASGI servers hand Litestar the percent-decoded ``path``, so ``/v1%2Fadmin%2Fattempts``
would reach ``/v1/admin/attempts`` while a proxy rule on ``/v1/admin/`` sees no such
prefix. No route of this API has a slash inside a segment, so a request whose
``raw_path`` encodes one (``%2F``, or ``%5C`` that some servers treat as ``/``) is refused
with 400 before routing.
"""

from __future__ import annotations

import json
import re

from litestar.enums import ScopeType
from litestar.types import ASGIApp, HTTPResponseStartEvent, Receive, Scope, Send

_ENCODED_SEPARATOR = re.compile(rb"%(2f|5c)", re.IGNORECASE)
_PROBLEM = {
    "type": "urn:onejob:bad-request",
    "title": "Bad request",
    "status": 400,
    "detail": "The path encodes a slash (%2F or %5C); no route has one inside a segment.",
}


def raw_path_guard(app: ASGIApp) -> ASGIApp:
    """Wrap ``app``: refuse HTTP requests whose raw path encodes a separator."""
    body = json.dumps(_PROBLEM).encode()

    async def guard(scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == ScopeType.HTTP else None
        if isinstance(raw, bytes) and _ENCODED_SEPARATOR.search(raw.partition(b"?")[0]):
            start: HTTPResponseStartEvent = {
                "type": "http.response.start",
                "status": 400,
                "headers": [
                    (b"content-type", b"application/problem+json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
            await send(start)
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await app(scope, receive, send)

    return guard
