"""Where a delivery goes (issue 45): a URL is checked after resolving its host, and the
request then goes to the address checked, never resolved again (DNS rebinding), with the
name kept for ``Host`` and for TLS (the certificate is checked against the name)."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import trustme

from gateway.webhooks.destinations import Destination, check, pinned


@pytest.mark.parametrize(
    ("url", "allowed", "found"),
    [
        ("http://127.0.0.1:9/h", ("127.0.0.1",), Destination()),
        ("http://localhost:9/h", ("localhost",), Destination()),
        ("http://8.8.8.8/h", (), Destination()),  # an address in the URL: nothing to pin
    ],
)
async def test_an_allowed_host_or_a_public_address_goes_as_written(
    url: str, allowed: tuple[str, ...], found: Destination
) -> None:
    assert await check(url, allowed) == found


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/h", "http://localhost:9/h", "http://[::ffff:10.0.0.1]/h"]
)
async def test_a_private_or_loopback_destination_is_refused_after_resolution(url: str) -> None:
    found = await check(url, ())
    assert found.refusal is not None and "private or loopback" in found.refusal


async def test_a_name_is_pinned_to_the_public_address_it_resolved_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def public(host: str, port: int, **_: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]

    import asyncio

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", public)
    assert await check("https://hooks.example.com/h", ()) == Destination(address="93.184.216.34")


def test_a_pinned_url_names_the_address_and_keeps_the_name_for_host_and_tls() -> None:
    assert pinned("https://hook.example:8443/p?q=1", "93.184.216.34") == (
        "https://93.184.216.34:8443/p?q=1",
        {"host": "hook.example:8443"},
        {"sni_hostname": "hook.example"},
    )
    assert pinned("http://hook.example/p", "2606:2800:220:1::1") == (
        "http://[2606:2800:220:1::1]/p",
        {"host": "hook.example"},
        {},
    )


async def test_a_pinned_request_reaches_the_address_with_the_name_as_host(receiver: Any) -> None:
    port = urlsplit(receiver.url).port
    url, host, extensions = pinned(f"http://hook.invalid:{port}/hook", "127.0.0.1")
    async with httpx.AsyncClient() as client:
        answer = await client.post(url, content=b"{}", headers=host, extensions=extensions)
    assert answer.status_code == 204
    assert receiver.got[0].headers["host"] == f"hook.invalid:{port}"


async def test_a_pinned_https_request_checks_the_certificate_against_the_name(
    tls_receiver: Any, tmp_path: Path
) -> None:
    ca = trustme.CA()
    pem = tmp_path / "hook.pem"
    ca.issue_cert("hook.invalid").private_key_and_cert_chain_pem.write_to_path(str(pem))
    trust = ssl.create_default_context()
    ca.configure_trust(trust)
    async with tls_receiver("https", str(pem)) as receiver:
        port = urlsplit(receiver.url).port
        url, host, extensions = pinned(f"https://hook.invalid:{port}/hook", "127.0.0.1")
        async with httpx.AsyncClient(verify=trust) as client:
            answer = await client.post(url, content=b"{}", headers=host, extensions=extensions)
            assert answer.status_code == 204
        # A new connection (the pool would reuse the first): the address is not the name.
        async with httpx.AsyncClient(verify=trust) as client:
            with pytest.raises(httpx.ConnectError):
                await client.post(f"https://127.0.0.1:{port}/hook", content=b"{}")
    assert len(receiver.got) == 1
