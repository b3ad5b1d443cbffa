"""Serve ``/schema`` (the OpenAPI document drawn by Redoc) and the favicon from the package.

Litestar's own schema pages load their scripts, fonts and favicon from a CDN, so offline
they are blank. This page loads only what the wheel ships, in ``gateway/schema_static/``:
Redoc's standalone bundle (``redoc.standalone.js``, redoc 2.5.4 from the npm registry, MIT,
its licences beside it), ``schema.js`` that points it at ``/schema/openapi.json``, and the
gateway's favicon. The page's Content-Security-Policy names no other origin, so a browser
could not fetch from one even if the bundle asked: the page is the same offline.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, Router, get
from litestar.openapi.plugins import OpenAPIRenderPlugin
from litestar.params import FromPath

from gateway.http.packaged_files import PackagedFiles

STATIC_DIR = "schema_static"  # beside this package, shipped as package data
ASSETS = "/schema/static"
#: Redoc styles its elements inline (styled-components) and runs its search in a worker
#: made from a blob: URL; everything else is this origin's, and no other origin at all.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        "worker-src 'self' blob:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
MEDIA_TYPES = {".js": "text/javascript", ".svg": "image/svg+xml", ".txt": "text/plain"}
FAVICON = "favicon.svg"
PAGE = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>onejob API</title>
<link rel="icon" type="image/svg+xml" href="/{FAVICON}">
<script src="{ASSETS}/redoc.standalone.js" defer></script>
<script src="{ASSETS}/schema.js" defer></script>
</head>
<body>
<div id="redoc"><p>Loading the API reference
(<a href="/schema/openapi.json">openapi.json</a>)…</p></div>
</body>
</html>
"""


FILES = PackagedFiles(STATIC_DIR, MEDIA_TYPES, HEADERS, "schema page file")


def _asset(name: str) -> Response[bytes]:
    return FILES.response(name)


class OfflineRedoc(OpenAPIRenderPlugin):
    """Render ``/schema`` with the vendored Redoc: no URL of another origin on the page."""

    def __init__(self) -> None:
        super().__init__(path=["/", "/redoc"], favicon="", style="")

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        """Return the page (the document itself is fetched from ``/schema/openapi.json``)."""
        return PAGE.encode()

    def receive_router(self, router: Router) -> None:
        """Serve the page's assets beside it, under ``/schema/static/``."""
        router.register(schema_asset)


@get("/static/{name:str}", include_in_schema=False)
async def schema_asset(name: FromPath[str]) -> Response[bytes]:
    """Serve Redoc's bundle, its licences, ``schema.js`` or the favicon."""
    return _asset(name)


@get(["/favicon.svg", "/favicon.ico"], include_in_schema=False)
async def favicon() -> Response[bytes]:
    """Serve the gateway's favicon (an SVG, at the name browsers ask for too)."""
    response = _asset(FAVICON)
    response.headers["Cache-Control"] = "public, max-age=86400"
    return response


def schema_router() -> Router:
    """Build the ``/schema`` router: every answer under it carries the page's CSP."""
    return Router(
        path="/schema", route_handlers=[], include_in_schema=False, response_headers=HEADERS
    )
