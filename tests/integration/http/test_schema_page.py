"""``/schema`` and the favicon come from the package: no URL of another origin on the page,
every asset it names served, and a CSP that names no other origin."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from gateway.app import create_app, settings_for_tests

_EXTERNAL = re.compile(r"""(?:https?:)?//[^"'\s>]+""")
_ASSET = re.compile(r"""(?:src|href)="([^"]+)\"""")


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[AsyncTestClient]:  # type: ignore[type-arg]
    settings = settings_for_tests(database_url=f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    async with AsyncTestClient(create_app(settings, background=[])) as c:
        yield c


@pytest.mark.parametrize("path", ["/schema", "/schema/", "/schema/redoc"])
async def test_the_schema_page_names_no_url_of_another_origin(
    client: AsyncTestClient,
    path: str,  # type: ignore[type-arg]
) -> None:
    r = await client.get(path)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert _EXTERNAL.findall(r.text) == []
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert _EXTERNAL.findall(csp) == [] and "*" not in csp


async def test_every_asset_the_page_names_is_served_from_the_package(
    client: AsyncTestClient,  # type: ignore[type-arg]
) -> None:
    page = (await client.get("/schema")).text
    assets = _ASSET.findall(page)
    assert "/schema/static/redoc.standalone.js" in assets and "/favicon.svg" in assets
    for asset in assets:
        r = await client.get(asset)
        assert r.status_code == 200, asset
        assert r.content, asset
    bundle = (await client.get("/schema/static/redoc.standalone.js")).text
    assert "Redoc" in bundle and len(bundle) > 500_000
    assert "MIT" in (await client.get("/schema/static/REDOC-LICENSE.txt")).text
    assert (await client.get("/schema/static/missing.js")).status_code == 404


async def test_the_gateway_has_a_favicon(client: AsyncTestClient) -> None:  # type: ignore[type-arg]
    for path in ("/favicon.ico", "/favicon.svg"):
        r = await client.get(path)
        assert r.status_code == 200 and r.headers["content-type"] == "image/svg+xml"
        assert r.text.startswith("<svg")
    console = (await client.get("/console")).text
    assert 'href="/favicon.svg"' in console
