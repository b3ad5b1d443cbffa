"""Where a webhook may be sent: http(s), to a host whose every address is public, unless
the host is listed in ``[webhooks] allow_hosts``.

The check runs on the addresses the name resolves to, not on the name: a public-looking
name that resolves to 127.0.0.1 or 10.0.0.5 is refused as the address itself would be.
It runs when a subscription is made and again before each delivery (a name's addresses
may change).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Collection
from urllib.parse import urlsplit

MAX_URL = 2000  # characters
RESOLVE_TIMEOUT = 5.0  # seconds a name may take to resolve


def url_problem(url: str) -> str | None:
    """Say what is wrong with ``url`` as a webhook's destination on its face, or None."""
    if len(url) > MAX_URL:
        return f"the url is longer than {MAX_URL} characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "the url cannot be read"
    if parts.scheme not in ("http", "https"):
        return "the url must be http or https"
    if not parts.hostname:
        return "the url has no host"
    if parts.username is not None or parts.password is not None:
        return "the url may not carry credentials"
    return None


async def refused(url: str, allow_hosts: Collection[str]) -> str | None:
    """Say why ``url`` may not receive webhooks, or None when it may."""
    problem = url_problem(url)
    if problem is not None:
        return problem
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host in allow_hosts:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT):
            loop = asyncio.get_running_loop()
            found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError, UnicodeError, ValueError):  # gaierror is an OSError
        return f"{host} does not resolve"
    for *_, sockaddr in found:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        mapped = getattr(address, "ipv4_mapped", None)
        if not (mapped or address).is_global:
            return (
                f"{host} is {address}, a private or loopback address"
                " (list the host in [webhooks] allow_hosts to allow it)"
            )
    return None
