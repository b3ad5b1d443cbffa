"""``POST /v1/jobs`` straight to its handler, past Litestar's router and handler layers.

Creation is the gateway's hottest request: with unique keys at 16 connections, py-spy put
about a fifth of a creation's CPU in the app stack outside ``routes.create_job`` - the
router's trie and host check, ``HTTPRoute.handle``, the kwargs model, an exit stack, the
response handler's resolution and ``ASGIResponse`` - for a handler that takes only the
request. This route answers exactly ``POST /v1/jobs`` (the path as sent, no
``root_path``) by calling the same registered handler with a Litestar ``Request``. A
plain JSON answer (every answer a creation gives) it sends itself, as the two messages
Litestar would send; any other goes through the handler's own ``to_response``. An
exception becomes the app's problem+json through ``handle_exception``, as Litestar's
exception middleware would make it. Every other request, and this path with any other
method (405, ``OPTIONS``), goes to Litestar.

The Litestar route stays registered: the OpenAPI document, ``OPTIONS``, 405s and the
tests' ``route_reverse`` still see it. What Litestar would run around the handler and
this route does not - guards, before- and after-request hooks, an after-response hook,
route middleware, a DTO, caching, a background task, response headers or cookies declared
on a layer - is refused at startup (``DirectRouteUnsafe``) rather than silently skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from litestar import Litestar, Request, Response
from litestar.enums import MediaType, ScopeType
from litestar.handlers import HTTPRouteHandler
from litestar.routes import HTTPRoute
from litestar.serialization import get_serializer
from litestar.types import (
    ASGIApp,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    HTTPScope,
    Receive,
    Scope,
    Send,
    Serializer,
)

#: The answers ``_json_messages`` spells; any other goes through the handler's ``to_response``.
_JSON_TYPES = frozenset({MediaType.JSON.value, "application/problem+json"})
#: Headers ``_json_messages`` sets itself: an answer that brings its own goes through Litestar.
_SET_HERE = frozenset({"content-type", "content-length"})

#: The one request answered here.
PATH = "/v1/jobs"
METHOD = "POST"

ErrorHandler = Callable[[Request[Any, Any, Any], Exception], Response[Any]]


class DirectRouteUnsafe(RuntimeError):
    """The handler has something around it that the direct route would skip."""


def registered_handler(app: Litestar, path: str, method: str) -> HTTPRouteHandler:
    """Return the handler the app registered for ``method path`` (its layers resolved)."""
    for route in app.routes:
        if isinstance(route, HTTPRoute) and route.path == path:
            for handler in route.route_handlers:  # Litestar allows one per method and path
                if method in handler.http_methods:
                    return handler
    raise LookupError(f"no {method} {path} route")


def _check_bare(app: Litestar, handler: HTTPRouteHandler, on_error: Any) -> None:
    """Refuse a handler, or an app, that adds anything this route would not run.

    Call it before anything replaces ``app.asgi_handler``: Litestar's own is its exception
    middleware around the router, and anything else there (CORS, OpenTelemetry) would
    be skipped here.
    """
    extras = {
        "guards": handler.resolve_guards(),
        "before_request": handler.resolve_before_request(),
        "after_response": handler.resolve_after_response(),
        "middleware": handler.resolve_middleware(),
        "return_dto": handler.resolve_return_dto(),
        "response_headers": handler.resolve_response_headers(),
        "response_cookies": handler.resolve_response_cookies(),
        "cache": handler.cache,
        "after_request": [x.after_request for x in handler.ownership_layers if x.after_request],
        "background": handler.background,
        "layered parameters": handler.resolve_layered_parameters(),
        "a synchronous function": handler.has_sync_callable,
        "a media type other than JSON": (handler.media_type or MediaType.JSON) != MediaType.JSON,
        "exception handlers of its own": handler.resolve_exception_handlers()
        != {Exception: on_error},
        # Added by Litestar per route, or around its router: this route runs neither.
        "allowed hosts": app.allowed_hosts,
        "CSRF": app.csrf_config,
        "compression": app.compression_config,
        "after-exception hooks": app.after_exception,
        "a wrapper around the router (CORS, OpenTelemetry)": getattr(app.asgi_handler, "app", None)
        is not app.asgi_router,
    }
    present = sorted(name for name, value in extras.items() if value)
    if present:
        raise DirectRouteUnsafe(f"{handler} has {', '.join(present)}; route it through Litestar")
    if set(handler.parsed_fn_signature.parameters) != {"request"}:
        raise DirectRouteUnsafe(f"{handler} takes more than the request")


def direct_create_route(app: Litestar, inner: ASGIApp, on_error: ErrorHandler) -> ASGIApp:
    """Wrap ``inner`` (Litestar's handler stack): answer ``POST /v1/jobs`` directly.

    ``on_error`` is the app's exception handler (``responses.handle_exception``).
    """
    # Litestar's private host check (the router's own, not a copy of it), imported here so
    # that the app still starts with the shortcut off if a Litestar upgrade moves it.
    from litestar._asgi.utils import is_valid_host

    handler = registered_handler(app, PATH, METHOD)
    _check_bare(app, handler, on_error)
    fn = handler.fn
    request_class = handler.resolve_request_class()
    type_encoders = handler.resolve_type_encoders()
    serializer = get_serializer(type_encoders)
    route_scope = {"route_handler": handler, "path_template": PATH}

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or not _answered_here(scope, is_valid_host):
            await inner(scope, receive, send)
            return
        scope.update(route_scope)  # type: ignore[typeddict-item]
        scope["path_params"] = {}
        request: Request[Any, Any, Any] = request_class(scope=scope, receive=receive, send=send)
        messages: tuple[HTTPResponseStartEvent, HTTPResponseBodyEvent] | None = None
        try:
            response = await fn(request)
            if _plain_json(response):
                messages = _json_messages(response, serializer)
            else:
                answer = await handler.to_response(app=app, data=response, request=request)
        except Exception as exc:  # as Litestar's exception middleware: the app's problem
            error = on_error(request, exc)
            await error.to_asgi_response(app=None, request=request, type_encoders=type_encoders)(
                scope, receive, send
            )
            return
        if messages is None:
            await answer(scope, receive, send)
            return
        start, body = messages
        await send(start)  # an error from here on: the answer has started (as in Litestar)
        await send(body)

    return route


def _plain_json(response: Any) -> bool:
    """Say whether ``response`` is a plain JSON answer ``_json_messages`` spells as Litestar does:
    a ``Response`` with a body, no cookie, no background task, no type encoders of its
    own, no Content-Type or Content-Length of its own."""
    if type(response) is not Response or response.background is not None or response.cookies:
        return False
    status = response.status_code
    return (
        status is not None
        and status >= 200
        and status not in (204, 304)
        and response.encoding == "utf-8"
        and not response.response_type_encoders
        and (response.media_type or MediaType.JSON) in _JSON_TYPES
        and not any(name.lower() in _SET_HERE for name in response.headers)
    )


def _json_messages(
    response: Response[Any], serializer: Serializer
) -> tuple[HTTPResponseStartEvent, HTTPResponseBodyEvent]:
    """Return the two messages Litestar's ``ASGIResponse`` would send for ``response``.

    Its headers in their order, lower-cased, then Content-Type and Content-Length; the
    body rendered by the response itself with the handler's serializer. The unit tests
    compare the messages with Litestar's for each answer a creation gives.
    """
    media = response.media_type or MediaType.JSON
    media_type = media.value if isinstance(media, MediaType) else media
    body = response.render(response.content, media_type, serializer)
    headers = [
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()
    ]
    headers.append((b"content-type", media_type.encode("latin-1")))
    headers.append((b"content-length", str(len(body)).encode("latin-1")))
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": response.status_code or 200,  # as ASGIResponse; _plain_json saw one
        "headers": headers,
    }
    return start, {"type": "http.response.body", "body": body, "more_body": False}


def _answered_here(scope: HTTPScope, is_valid_host: Callable[[bytes], bool]) -> bool:
    """Say whether this is ``POST /v1/jobs`` as sent, at the root, with a valid host.

    A Host header Litestar's router would refuse (``is_valid_host`` says which) goes to
    Litestar, which refuses it.
    """
    if scope["path"] != PATH or scope["method"] != METHOD or scope.get("root_path"):
        return False
    for name, value in scope["headers"]:
        if name == b"host":
            return is_valid_host(value)
    return True
