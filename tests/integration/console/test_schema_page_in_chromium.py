"""``/schema`` renders in Chromium with every other origin cut off: the API reference is
drawn from the package's Redoc and the gateway's own OpenAPI document."""

from __future__ import annotations

import shutil
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.async_api import Route, expect

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("chromium") or shutil.which("chromium-browser")),
        reason="chromium is not installed",
    ),
]


async def test_the_schema_page_renders_offline_with_nothing_from_another_origin(
    stack: Any, open_page: Any, shoot: Any
) -> None:
    page, watched = await open_page()
    elsewhere: list[str] = []

    async def offline(route: Route) -> None:
        # Loopback only: anything else is refused, as on a machine without a network.
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            await route.continue_()
        else:
            elsewhere.append(route.request.url)
            await route.abort("internetdisconnected")

    await page.context.route("**/*", offline)
    await page.goto(f"{stack.gw.base_url}/schema")
    await expect(page.get_by_role("heading", name="onejob", exact=False).first).to_be_visible(
        timeout=20_000
    )
    await expect(page.get_by_text("/v1/jobs/{job_id}/attempts").first).to_be_attached()
    await expect(page.locator("#redoc").get_by_text("Loading the API reference")).to_have_count(0)
    shot = await shoot(page, "schema-1280-full")
    await page.screenshot(path=str(shot.with_name("schema-1280.png")))  # the first screen
    assert elsewhere == [], elsewhere
    # The one URL of another origin in the vendored bundle (kept byte for byte as published)
    # is its "powered by" logo: the page's CSP refuses it before any request, and Redoc
    # drops the image on that error. Nothing else is refused and no script fails.
    refused = [e for e in watched.errors if REDOC_LOGO not in e]
    assert refused == [], refused
    assert all("Content Security Policy" in e for e in watched.errors), watched.errors
    assert any(u.endswith("/schema/openapi.json") for u in watched.urls)
    assert await page.locator(f"img[src='{REDOC_LOGO}']").count() == 0


REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
