"""The direct route answers exactly ``POST /v1/jobs`` as Litestar would, and nothing else."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from litestar import Litestar, MediaType, Request, Response, get, post
from litestar.config.cors import CORSConfig
from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie
from litestar.di import NamedDependency, Provide
from litestar.handlers import BaseRouteHandler, HTTPRouteHandler
from litestar.types import Message

from gateway.http.direct import DirectRouteUnsafe, direct_create_route, registered_handler

#: These test the shortcut itself: on, whatever ONEJOB_SHORTCUTS says.
pytestmark = pytest.mark.shortcut

#: The answers a creation gives, and some it never gives (those go through Litestar).
ANSWERS: dict[str, Response[Any]] = {
    "created": Response({"id": "job_1", "n": 1.5}, status_code=201, headers={"Location": "/x"}),
    "replayed": Response(
        {"id": "job_1"}, status_code=200, headers={"Location": "/x", "Idempotent-Replayed": "true"}
    ),
    "problem": Response(
        {"type": "urn:t", "status": 409}, status_code=409, media_type="application/problem+json"
    ),
    "unicode": Response({"s": "é\u2028\U0001f600"}, status_code=201),
    "text": Response("plain", media_type=MediaType.TEXT),
    "cookie": Response({"a": 1}, cookies=[Cookie(key="c", value="v")]),
    "own content type": Response({"a": 1}, headers={"Content-Type": "application/json"}),
    "no content": Response(None, status_code=204),
}


@post("/v1/jobs", status_code=201)
async def create(request: Request[Any, Any, Any]) -> Response[Any]:
    if request.headers.get("x-fail"):
        raise ValueError("boom")
    if answer := request.headers.get("x-answer"):
        return ANSWERS[answer]
    body = await request.body()
    return Response({"got": body.decode()}, status_code=201, headers={"Location": "/v1/jobs/1"})


@get("/v1/jobs")
async def listing() -> Response[Any]:
    return Response({"jobs": []})


def refused(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    return Response({"refused": str(exc)}, status_code=418, media_type="application/problem+json")


def scope_for(
    app: Litestar,
    method: str = "POST",
    path: str = "/v1/jobs",
    headers: list[tuple[bytes, bytes]] | None = None,
    root_path: str = "",
) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": root_path,
        "query_string": b"",
        "headers": headers if headers is not None else [(b"host", b"gw.test")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "app": app,
        "litestar_app": app,
        "state": {},
    }


def call(app_: Any, scope: dict[str, Any], body: bytes = b'{"a":1}') -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(app_(scope, receive, send))
    return sent


class Inner:
    """Litestar's own handler stack, recording what reached it."""

    def __init__(self, app: Litestar) -> None:
        self.app = app
        self.seen: list[tuple[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.seen.append((scope["method"], scope["path"]))
        await self.app.asgi_handler(scope, receive, send)


def test_post_v1_jobs_is_answered_without_litestar_and_as_litestar_answers() -> None:
    app = Litestar(route_handlers=[create, listing], exception_handlers={Exception: refused})
    inner = Inner(app)
    route = direct_create_route(app, inner, refused)

    direct = call(route, scope_for(app))
    assert inner.seen == []
    through_litestar = call(app.asgi_handler, scope_for(app))
    assert direct == through_litestar
    assert direct[0]["status"] == 201
    assert (b"location", b"/v1/jobs/1") in direct[0]["headers"]
    assert direct[1]["body"] == b'{"got":"{\\"a\\":1}"}'


#: The answers the route writes itself, without the handler's ``to_response``.
WRITTEN_HERE = {"created", "replayed", "problem", "unicode"}


@pytest.mark.parametrize("answer", list(ANSWERS))
def test_each_kind_of_answer_is_sent_as_litestar_sends_it(
    answer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Litestar(route_handlers=[create], exception_handlers={Exception: refused})
    route = direct_create_route(app, Inner(app), refused)
    headers = [(b"host", b"gw.test"), (b"x-answer", answer.encode())]

    direct = call(route, scope_for(app, headers=headers))
    assert direct == call(app.asgi_handler, scope_for(app, headers=headers))
    if answer in WRITTEN_HERE:

        async def no_to_response(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("to_response was used")

        monkeypatch.setattr(HTTPRouteHandler, "to_response", no_to_response)
        assert call(route, scope_for(app, headers=headers)) == direct


def test_an_exception_is_the_error_handlers_answer() -> None:
    app = Litestar(route_handlers=[create], exception_handlers={Exception: refused})
    inner = Inner(app)
    route = direct_create_route(app, inner, refused)

    sent = call(route, scope_for(app, headers=[(b"host", b"gw.test"), (b"x-fail", b"1")]))
    assert inner.seen == []
    assert sent[0]["status"] == 418
    assert (b"content-type", b"application/problem+json") in sent[0]["headers"]
    assert sent[1]["body"] == b'{"refused":"boom"}'


@pytest.mark.parametrize(
    "scope_args",
    [
        pytest.param({"method": "GET"}, id="another method"),
        pytest.param({"path": "/v1/jobs/"}, id="trailing slash"),
        pytest.param({"path": "/v1/jobs/job_1"}, id="a longer path"),
        pytest.param({"path": "/v1/job"}, id="a shorter path"),
        pytest.param({"root_path": "/api"}, id="mounted under a root path"),
        pytest.param({"headers": [(b"host", b"bad host/")]}, id="a host the router refuses"),
    ],
)
def test_every_other_request_goes_to_litestar(scope_args: dict[str, Any]) -> None:
    app = Litestar(route_handlers=[create, listing], exception_handlers={Exception: refused})
    inner = Inner(app)
    route = direct_create_route(app, inner, refused)

    scope = scope_for(app, **scope_args)
    asked = (scope["method"], scope["path"])  # Litestar's router rewrites the path
    call(route, scope)
    assert inner.seen == [asked]


def test_a_request_without_a_host_header_is_answered_directly() -> None:
    app = Litestar(route_handlers=[create], exception_handlers={Exception: refused})
    inner = Inner(app)
    sent = call(direct_create_route(app, inner, refused), scope_for(app, headers=[]))
    assert inner.seen == []
    assert sent[0]["status"] == 201


def deny(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    raise PermissionError("no")


async def provide_one() -> int:
    return 1


@post("/v1/jobs", guards=[deny])
async def guarded(request: Request[Any, Any, Any]) -> Response[Any]:
    return Response({})


@post("/v1/jobs", response_headers={"X-Layer": "1"})
async def with_headers(request: Request[Any, Any, Any]) -> Response[Any]:
    return Response({})


@post("/v1/jobs", dependencies={"one": Provide(provide_one)})
async def with_dependency(
    request: Request[Any, Any, Any], one: NamedDependency[int]
) -> Response[Any]:
    return Response({"one": one})


@pytest.mark.parametrize(
    ("handler", "said"),
    [
        pytest.param(guarded, "guards", id="a guard"),
        pytest.param(with_headers, "response_headers", id="layered response headers"),
        pytest.param(with_dependency, "more than the request", id="a dependency"),
    ],
)
def test_a_handler_with_more_around_it_is_refused_at_startup(handler: Any, said: str) -> None:
    app = Litestar(route_handlers=[handler], exception_handlers={Exception: refused})
    with pytest.raises(DirectRouteUnsafe, match=said):
        direct_create_route(app, app.asgi_handler, refused)


def test_an_app_without_the_route_cannot_have_it() -> None:
    app = Litestar(route_handlers=[listing])
    with pytest.raises(LookupError):
        registered_handler(app, "/v1/jobs", "POST")


def test_the_gateway_answers_creation_past_litestars_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """With Litestar's route handling broken, POST /v1/jobs still answers (401: no key),
    while /v1/jobs/, which goes through it, does not."""
    from litestar.routes import HTTPRoute

    from gateway.app import create_app, settings_for_tests

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("Litestar's route was used")

    monkeypatch.setattr(HTTPRoute, "handle", broken)  # before the app binds it
    app = create_app(settings_for_tests())
    direct = call(app, scope_for(app, headers=[(b"host", b"gw.test")]), body=b"{}")
    assert direct[0]["status"] == 401
    through = call(app, scope_for(app, path="/v1/jobs/", headers=[(b"host", b"gw.test")]))
    assert through[0]["status"] == 500


def refused_elsewhere(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    return Response({}, status_code=400)


@pytest.mark.parametrize(
    ("app_args", "said"),
    [
        pytest.param({"allowed_hosts": ["gw.test"]}, "allowed hosts", id="allowed hosts"),
        pytest.param({"cors_config": CORSConfig()}, "a wrapper around the router", id="CORS"),
        pytest.param({"after_exception": [lambda exc, scope: None]}, "after-exception", id="hook"),
        pytest.param(
            {"exception_handlers": {ValueError: refused_elsewhere}},
            "exception handlers of its own",
            id="another exception handler",
        ),
    ],
)
def test_an_app_with_more_around_its_routes_is_refused(app_args: dict[str, Any], said: str) -> None:
    app = Litestar(
        route_handlers=[create], **{"exception_handlers": {Exception: refused}, **app_args}
    )
    with pytest.raises(DirectRouteUnsafe, match=said):
        direct_create_route(app, app.asgi_handler, refused)
