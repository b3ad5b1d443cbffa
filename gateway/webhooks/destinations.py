"""Where a webhook may be sent: http(s), to a host whose every address is public, unless
the host is listed in ``[webhooks] allow_hosts``.

The check runs on the addresses the name resolves to, not on the name: a public-looking
name that resolves to 127.0.0.1 or 10.0.0.5 is refused as the address itself would be.
It runs when a subscription is made and again before each delivery (a name's addresses
may change), and the delivery then goes to the address checked (``pinned``), so a name
that answers a public address to the check and a private one to the connection (DNS
rebinding) still reaches only the public one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import socket
from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit, urlunsplit

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


@dataclasses.dataclass(frozen=True, slots=True)
class Destination:
    """What the check of a URL found: why it is refused, or the address to connect to."""

    refusal: str | None = None
    #: The checked address the request must go to (a name is not resolved again, so a
    #: second answer cannot differ from the one checked); None: connect as the URL says
    #: (a host ``allow_hosts`` lists, or an address written in the URL).
    address: str | None = None


async def refused(url: str, allow_hosts: Collection[str]) -> str | None:
    """Say why ``url`` may not receive webhooks, or None when it may."""
    return (await check(url, allow_hosts)).refusal


async def check(url: str, allow_hosts: Collection[str]) -> Destination:
    """Check ``url`` after resolving its host; say why it is refused or where to connect."""
    problem = url_problem(url)
    if problem is not None:
        return Destination(refusal=problem)
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host in allow_hosts:
        return Destination()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT):
            loop = asyncio.get_running_loop()
            found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError, UnicodeError, ValueError):  # gaierror is an OSError
        return Destination(refusal=f"{host} does not resolve")
    addresses = [ipaddress.ip_address(str(sockaddr[0]).split("%")[0]) for *_, sockaddr in found]
    for address in addresses:
        mapped = getattr(address, "ipv4_mapped", None)
        if not (mapped or address).is_global:
            return Destination(
                refusal=f"{host if host == str(address) else f'{host} is {address},'}"
                " a private or loopback address"
                " (list the host in [webhooks] allow_hosts to allow it)"
            )
    if not addresses:
        return Destination(refusal=f"{host} does not resolve")
    literal = _is_address(host)
    return Destination(address=None if literal else str(addresses[0]))


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def pinned(url: str, address: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """Return ``url`` aimed at ``address``, with the ``Host`` header and the TLS server
    name (``sni_hostname``, which the certificate is also checked against) of its host."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    literal = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    name = (parts.hostname or "").encode("idna").decode("ascii")
    aimed = urlunsplit(parts._replace(netloc=literal + port))
    extensions: dict[str, Any] = {"sni_hostname": name} if parts.scheme == "https" else {}
    return aimed, {"host": name + port}, extensions
