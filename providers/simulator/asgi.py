"""The raw ASGI the simulator is written against: its types, a request's body, an answer.

The simulator uses no web framework on purpose: the scripted misbehaviours (truncated
bodies, connections dropped after the headers, requests held until the client gives up)
happen below the level a framework lets a handler reach. What every route shares is here:
reading the body (``read_body``), sending a ``WireResponse`` whole or event by event
(``send_response``), and ``DropConnection``, which makes the server close the connection
mid-response.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from providers.base import RequestRefused
from providers.sim_wire import WireResponse

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 8 * 1024 * 1024  # bytes accepted in one request body


class DropConnection(Exception):
    """Raised inside the app to make the server close the connection mid-response."""


def header(scope: Scope, name: bytes) -> str | None:
    """Return the request header ``name`` (lower case), or None."""
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def json_object(body: bytes) -> dict[str, Any]:
    """Parse a request body that must be a JSON object (empty: ``{}``)."""
    try:
        data = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestRefused(f"the request body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise RequestRefused("the request body must be a JSON object")
    return data


def plain_json(status: int, payload: Any) -> WireResponse:
    """Return a JSON answer of the simulator's own (not in any API's envelope)."""
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return WireResponse(status, headers, body)


async def read_body(receive: Receive) -> bytes:
    """Read the whole request body; drop the connection past ``MAX_BODY``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise DropConnection("request body too large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def send_response(send: Send, response: WireResponse) -> None:
    """Send ``response``: a complete body, or a stream one event per body message."""
    await send(
        {"type": "http.response.start", "status": response.status, "headers": response.headers}
    )
    if not response.chunks:
        await send({"type": "http.response.body", "body": response.body})
        return
    for chunk in response.chunks:  # a stream: one event per body message, as SSE servers do
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
