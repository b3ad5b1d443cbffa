"""Serve the operator console: one page and its static ES modules, under a strict CSP.

The console is a client of the ``/v1`` API like any other. It holds the API key in the
tab's ``sessionStorage`` and sends it as ``Authorization: Bearer``; it never sets a cookie
and never puts the key in a URL. So these routes need no key themselves: they hand out
the same files to everyone, and every piece of data the page shows comes from ``/v1``
under the key. (That is also why the console needs no CSRF protection: docs/console.md.)
"""

from __future__ import annotations

from litestar import Response, Router, get
from litestar.params import FromPath
from litestar.response import Redirect

from gateway.http.packaged_files import PackagedFiles

#: No inline script or style, nothing from another origin, no framing, no form posts,
#: no plugins: the page's own modules and stylesheet, and fetch() to this origin only.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-cache",
}
MEDIA_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
}
STATIC_DIR = "console_static"  # beside this package, shipped as package data


FILES = PackagedFiles(STATIC_DIR, MEDIA_TYPES, SECURITY_HEADERS, "console file")


def static_files() -> dict[str, bytes]:
    """Return the console's files by name, read once from the package on first use."""
    return FILES.files()


def _file(name: str) -> Response[bytes]:
    return FILES.response(name)


@get("/", include_in_schema=False)
async def console_page() -> Response[bytes]:
    """Serve the console's one page."""
    return _file("index.html")


@get("/static/{name:str}", include_in_schema=False)
async def console_static(name: FromPath[str]) -> Response[bytes]:
    """Serve one of the console's modules or its stylesheet."""
    return _file(name)


def console_router() -> Router:
    """Build the ``/console`` routes (no key needed: the files are the same for everyone)."""
    return Router(path="/console", route_handlers=[console_page, console_static])


@get("/", include_in_schema=False)
async def home() -> Redirect:
    """``/`` (the address ``serve`` prints) leads to the console, not to a 404."""
    return Redirect("/console", status_code=302)
