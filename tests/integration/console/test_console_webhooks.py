"""The console's webhooks view (issue 45) in a real browser: an owner's subscriptions, a
subscription's deliveries with their last outcome, and one sent again on request."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from dispatch_harness import case_input
from playwright.async_api import Page, expect

from gateway.domain.webhooks import NewDelivery
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import open_store

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("chromium") or shutil.which("chromium-browser")),
        reason="chromium is not installed",
    ),
]

SETTLE_TIMEOUT = 15_000  # ms the delivery service may take to read the job's end


async def sign_in(page: Page, url: str, key: str) -> None:
    await page.goto(url)
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Recent jobs")).to_be_visible()


async def test_an_owner_sees_a_delivery_refused_for_its_destination_and_sends_it_again(
    stack: Any, sqlite_url: str, open_page: Any, shoot: Any
) -> None:
    # Made in the store: the API would refuse a loopback URL the settings do not allow, and
    # the delivery service refuses it at each try, which is what the page must show.
    store = await open_store(
        sqlite_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        hook = await store.create_webhook(
            "alice", "http://127.0.0.1:9/hook", ["job.succeeded"], all_owners=False
        )
    finally:
        await store.close()
    job_id = (await stack.api().create(case_input(11), wait=10)).json()["id"]

    page, watched = await open_page()
    await sign_in(page, stack.url, stack.key)
    await (
        page.get_by_role("navigation", name="Console sections")
        .get_by_role("link", name="Webhooks")
        .click()
    )
    row = page.locator(f"#webhooks-table tr[data-webhook='{hook.id}']")
    await expect(row).to_contain_text("http://127.0.0.1:9/hook")
    await expect(row).to_contain_text("active")
    await row.get_by_role("link", name=hook.id).click()
    await expect(page.get_by_role("heading", name=f"Webhook {hook.id}")).to_be_visible()
    delivery = page.locator("#deliveries-table tbody tr").first
    await expect(delivery).to_contain_text("refused", timeout=SETTLE_TIMEOUT)
    await expect(delivery).to_contain_text(job_id)
    await expect(delivery).to_contain_text("pending")
    await shoot(page, "webhook-deliveries-1280")
    await delivery.get_by_role("button").click()
    await expect(page.get_by_role("status")).to_contain_text("will be sent again now")
    assert watched.errors == [], watched.errors
    assert not [u for u in watched.urls if stack.key in u]


async def test_a_webhooks_deliveries_are_shown_a_page_at_a_time(
    stack: Any, sqlite_url: str, open_page: Any
) -> None:
    store = await open_store(
        sqlite_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        hook = await store.create_webhook(
            "alice", "http://127.0.0.1:9/paged", ["job.failed"], all_owners=False
        )
        made = [
            await store.add_delivery(hook.id, NewDelivery(None, "webhook.test", None, {"n": n}))
            for n in range(21)
        ]
    finally:
        await store.close()

    page, watched = await open_page()
    await sign_in(page, stack.url, stack.key)
    await page.goto(f"{stack.url}#/webhooks/{hook.id}")
    rows = page.locator("#deliveries-table tbody tr")
    await expect(rows).to_have_count(20)
    await expect(rows.first).to_have_attribute("data-delivery", made[-1].id)
    await expect(page.get_by_role("button", name="← Newer")).to_be_disabled()
    await page.get_by_role("button", name="Older →").click()
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-delivery", made[0].id)
    await expect(page.get_by_text("Page 2")).to_be_visible()
    await expect(page.get_by_role("button", name="Older →")).to_be_disabled()
    await page.get_by_role("button", name="← Newer").click()
    await expect(rows).to_have_count(20)
    assert watched.errors == [], watched.errors
