"""Fixtures for the clients' tests: a real ``onejob serve`` (SQLite, bundled simulator) per
module, the button page's server with faults on demand, and Debian's Chromium.

The gateway is a process started from its CLI (served_gateway.py), as a user runs it; the
page is served from its own origin by examples/button/serve.py, which forwards ``/v1`` to
the gateway and adds the API key: onejob sends no CORS headers, and a browser should not
hold the key anyway.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dataclasses
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from faulty_forwarder import FaultyServer, serving
from served_gateway import Stack, served_stack

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Chromium flags: headless, no sandbox (root in a container), nothing fetched from the net.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
SCREENSHOTS = Path(__file__).resolve().parents[3] / "reports/out/button"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One served gateway + simulator for the module's tests (they run one at a time)."""
    with served_stack(tmp_path_factory.mktemp("gateway")) as running:
        yield running


@pytest.fixture
def fresh(stack: Stack) -> Stack:
    """The module's stack with the simulator's scripts and call log cleared."""
    stack.sim_reset()
    return stack


@pytest.fixture
def proxy(fresh: Stack) -> Iterator[FaultyServer]:
    """A forwarder to the gateway that passes the caller's API key through, with faults."""
    with serving(fresh.gateway, None) as server:
        yield server


@pytest.fixture
def page_server(fresh: Stack) -> Iterator[FaultyServer]:
    """The button page's server (with faults), adding alice's key to what it forwards."""
    with serving(fresh.gateway, fresh.key) as server:
        yield server


@dataclasses.dataclass
class Watched:
    """What a page did that a test checks: script errors and the requests it sent."""

    errors: list[str] = dataclasses.field(default_factory=list)
    requests: list[tuple[str, str, str | None]] = dataclasses.field(default_factory=list)

    def posts(self, path: str = "/v1/jobs") -> list[str | None]:
        """Return the Idempotency-Key of every POST the page sent to ``path``."""
        return [key for method, url, key in self.requests if method == "POST" and url == path]


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """Debian's Chromium through Playwright (``executable_path``: no browser download)."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed")
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
def open_page(browser: Any) -> Callable[..., Any]:
    """Return ``open_page(viewport)``: a fresh page (its own sessionStorage) and a watch."""

    async def open_(viewport: dict[str, int] | None = None) -> tuple[Any, Watched]:
        context = await browser.new_context(viewport=viewport or {"width": 1280, "height": 900})
        page = await context.new_page()
        watched = Watched()

        def on_console(msg: Any) -> None:
            # A network error the client retries is logged as "Failed to load resource";
            # anything else is a script error.
            if msg.type == "error" and not msg.text.startswith("Failed to load resource"):
                watched.errors.append(msg.text)

        def on_request(request: Any) -> None:
            path = "/" + request.url.split("/", 3)[3] if request.url.count("/") >= 3 else ""
            watched.requests.append((request.method, path, request.headers.get("idempotency-key")))

        page.on("console", on_console)
        page.on("pageerror", lambda exc: watched.errors.append(f"page error: {exc}"))
        page.on("request", on_request)
        return page, watched

    return open_


@pytest.fixture
def shoot() -> Callable[..., Any]:
    """Return ``shoot(page, name)``: full-page screenshots at 1280 and 390 px wide."""

    async def shoot_(page: Any, name: str) -> list[Path]:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        size = page.viewport_size
        paths = []
        for width in (1280, 390):
            await page.set_viewport_size({"width": width, "height": 900})
            path = SCREENSHOTS / f"{name}-{width}.png"
            await page.screenshot(path=str(path), full_page=True)
            paths.append(path)
        await page.set_viewport_size(size)
        return paths

    return shoot_
