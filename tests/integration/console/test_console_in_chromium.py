"""The operator console in a real browser against a real gateway, dispatcher and simulator.

Each test signs in through the page as a person would, and checks what the page shows and
what it sends: the key only in the Authorization header, never in a URL or a cookie; no
script error and no Content-Security-Policy refusal on any page.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from dispatch_harness import case_input
from playwright.async_api import Page, expect

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("chromium") or shutil.which("chromium-browser")),
        reason="chromium is not installed",
    ),
]

PHONE = {"width": 390, "height": 844}
SETTLE_TIMEOUT = 15_000  # ms a page may take to show a change made by the dispatcher


async def sign_in(page: Page, url: str, key: str) -> None:
    """Open the console and sign in with ``key`` through the form."""
    await page.goto(url)
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Recent jobs")).to_be_visible()


async def fits_width(page: Page) -> bool:
    """Say whether the page has no horizontal scrollbar (nothing wider than the viewport)."""
    return bool(
        await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    )


def assert_key_kept_out(watched: Any, key: str) -> None:
    assert watched.urls, "the page made no request"
    assert not [u for u in watched.urls if key in u], "the key appeared in a URL"
    assert watched.errors == [], watched.errors


async def test_an_admin_signs_in_and_watches_a_job_succeed_on_its_timeline(
    stack: Any, open_page: Any, shoot: Any
) -> None:
    page, watched = await open_page()
    await sign_in(page, stack.url, stack.admin_key)
    assert stack.admin_key not in page.url
    assert await page.context.cookies() == []
    stored = await page.evaluate("sessionStorage.getItem('onejob.console.key')")
    assert stored == stack.admin_key
    await expect(page.get_by_role("link", name="Unknown attempts")).to_be_visible()

    await stack.sim.script("sim-openai", {"kind": "delay", "seconds": 2.5})
    created = await stack.api(admin=True).create(case_input(0))
    job_id = created.json()["id"]
    await page.get_by_role("button", name="Refresh").click()
    row = page.locator(f"#jobs-table tr[data-job='{job_id}']")
    await row.get_by_role("link", name=job_id).click()
    await expect(page.get_by_role("heading", name=f"Job {job_id}")).to_be_visible()
    await expect(page.locator("#job-status")).to_have_text("running", timeout=SETTLE_TIMEOUT)
    await shoot(page, "job-running-1280")
    await expect(page.locator("#job-status")).to_have_text("succeeded", timeout=SETTLE_TIMEOUT)

    lane = page.locator("svg.timeline g.lane-attempt")
    await expect(lane).to_have_count(1)
    await expect(lane.locator("g.mark-sent")).to_have_count(1)
    await expect(lane.locator("g.mark-won")).to_have_count(1)
    await expect(lane.locator("text.end-label")).to_have_text("won")
    await expect(page.locator("#events-table tr[data-kind='attempt_succeeded']")).to_have_count(1)
    result = (await stack.api(admin=True).job(job_id)).json()["result"]
    await expect(page.locator("pre.json").first).to_contain_text(result["summary"])
    await expect(page.locator("#replays")).to_contain_text("None")

    # The same request again is a replay: the job page says so.
    again = await stack.api(admin=True).gw.client.post(
        "/v1/jobs",
        json={"contract": "ticket-triage@1", "input": case_input(0)},
        headers={
            **stack.api(admin=True).admin,
            "Idempotency-Key": created.json()["idempotency_key"],
        },
    )
    assert again.status_code == 200
    await page.reload()
    await expect(page.locator("#replays li")).to_have_count(1)
    await expect(page.locator("#replays")).to_contain_text("replayed")
    await shoot(page, "job-succeeded-1280")
    assert_key_kept_out(watched, stack.admin_key)


async def test_an_unknown_attempt_is_resolved_by_keyboard_and_its_job_fails_over(
    stack: Any, open_page: Any, shoot: Any
) -> None:
    owner = stack.api()
    await stack.sim.script("sim-openai", {"kind": "hang"})
    job_id = (await owner.create(case_input(1))).json()["id"]
    await owner.until(job_id, lambda j: j["status"] == "unknown", timeout=PRIMARY_WAIT)

    page, watched = await open_page()
    await page.goto(stack.url)
    # Keyboard only from here: the key field has focus when the page opens.
    await expect(page.get_by_label("API key")).to_be_focused()
    await page.keyboard.type(stack.admin_key)
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name="Recent jobs")).to_be_focused()
    await tab_to(page, "Unknown attempts")
    assert await focus_is_visible(page)
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name="Unknown attempts")).to_be_visible()
    row = page.locator("#unknown-table tbody tr")
    await expect(row).to_have_count(1)
    for text in ("alice", job_id, "ticket-triage@1", "sim-openai", "gw-test"):
        await expect(row).to_contain_text(text)
    await shoot(page, "unknown-1280")

    await tab_to(page, f"Resolve attempt 1 of {job_id}")
    assert await focus_is_visible(page)
    await page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog")
    await expect(dialog).to_be_visible()
    await expect(dialog.get_by_label("failed")).to_be_focused()
    await page.keyboard.press("Space")  # choose "failed"
    await page.keyboard.press("Tab")  # the result box is hidden for "failed": to the note
    await expect(dialog.get_by_label("Note")).to_be_focused()
    await page.keyboard.type("provider dashboard shows no request")
    await tab_to(page, "Review")
    await page.keyboard.press("Enter")
    confirm = dialog.get_by_role("button", name="Confirm: resolve as failed")
    await expect(confirm).to_be_focused()
    await expect(dialog).to_contain_text("provider dashboard shows no request")
    await shoot(page, "resolve-confirm-1280")
    await page.keyboard.press("Enter")

    await expect(dialog).to_have_count(0)
    await expect(page.locator("#no-unknown")).to_be_visible()
    await expect(page.locator("#resolve-outcome")).to_contain_text("as failed")
    await page.locator("#resolve-outcome").get_by_role("link", name=job_id).click()
    await expect(page.locator("#job-status")).to_have_text("succeeded", timeout=SETTLE_TIMEOUT)
    lanes = page.locator("svg.timeline g.lane-attempt")
    await expect(lanes).to_have_count(2)
    await expect(lanes.nth(0).locator("g.mark-timed_out")).to_have_count(1)
    await expect(lanes.nth(0).locator("text.end-label")).to_have_text("failed")
    await expect(lanes.nth(1)).to_have_attribute("data-lane", "attempt 2 · sim-anthropic")
    await expect(lanes.nth(1).locator("text.end-label")).to_have_text("won")
    await expect(page.locator("#events-table tr[data-kind='attempt_resolved']")).to_contain_text(
        "provider dashboard shows no request"
    )
    await shoot(page, "job-after-resolve-1280")
    job = (await owner.job(job_id)).json()
    assert [a["state"] for a in job["attempts"]] == ["failed", "succeeded"]
    assert_key_kept_out(watched, stack.admin_key)


async def test_a_succeeded_resolution_is_checked_by_the_server_and_the_list_follows_others(
    stack: Any, open_page: Any
) -> None:
    owner = stack.api()
    valid = (await owner.create(case_input(2), wait=10)).json()["result"]
    await stack.sim.script("sim-openai", {"kind": "hang"}, count=2)
    first = (await owner.create(case_input(3))).json()["id"]
    second = (await owner.create(case_input(4))).json()["id"]
    for job_id in (first, second):
        await owner.until(job_id, lambda j: j["status"] == "unknown", timeout=PRIMARY_WAIT)

    page, watched = await open_page()
    await sign_in(page, stack.url, stack.admin_key)
    await page.get_by_role("link", name="Unknown attempts").click()
    rows = page.locator("#unknown-table tbody tr")
    await expect(rows).to_have_count(2)
    await page.get_by_label("Filter by owner, job, contract or provider").fill(second)
    await expect(rows).to_have_count(1)
    await expect(page.locator("#unknown-count")).to_contain_text("1 of 2")
    await page.get_by_label("Filter by owner, job, contract or provider").fill("")

    # Someone else resolves the first one through the API: the list follows by itself.
    [elsewhere] = [
        a
        for a in (
            await stack.api(admin=True).gw.client.get(
                "/v1/admin/attempts?state=unknown", headers=owner.admin
            )
        ).json()["attempts"]
        if a["job_id"] == first
    ]
    r = await owner.gw.client.post(
        f"/v1/admin/attempts/{elsewhere['id']}/resolve",
        json={"outcome": "cancelled", "note": "duplicate"},
        headers=owner.admin,
    )
    assert r.status_code == 200, r.text
    await expect(rows).to_have_count(1, timeout=SETTLE_TIMEOUT)
    await expect(rows).to_contain_text(second)

    await rows.get_by_role("button", name=f"Resolve attempt 1 of {second}").click()
    dialog = page.get_by_role("dialog")
    await dialog.get_by_label("succeeded").check()
    wrong = {**valid, "priority": "whenever"}
    await dialog.get_by_label("Result (JSON)").fill(json_text(wrong))
    await dialog.get_by_label("Note").fill("provider support confirmed the answer")
    await dialog.get_by_role("button", name="Review").click()
    await dialog.get_by_role("button", name="Confirm: resolve as succeeded").click()
    await expect(dialog.locator("#resolve-error")).to_contain_text("422")
    await expect(dialog.locator("#resolve-error")).to_contain_text("whenever")
    assert (await owner.job(second)).json()["status"] == "unknown"

    await dialog.get_by_label("Result (JSON)").fill(json_text(valid))
    await dialog.get_by_role("button", name="Review").click()
    await dialog.get_by_role("button", name="Confirm: resolve as succeeded").click()
    await expect(dialog).to_have_count(0)
    await expect(page.locator("#no-unknown")).to_be_visible()
    job = (await owner.job(second)).json()
    assert (job["status"], job["result"]) == ("succeeded", valid)
    assert watched.errors == [], watched.errors


async def test_a_key_without_the_admin_scope_sees_no_admin_view(
    stack: Any, open_page: Any, shoot: Any
) -> None:
    await stack.sim.script("sim-openai", {"kind": "hang"})
    job_id = (await stack.api().create(case_input(5))).json()["id"]
    await stack.api().until(job_id, lambda j: j["status"] == "unknown", timeout=PRIMARY_WAIT)

    page, watched = await open_page()
    await sign_in(page, stack.url, stack.key)
    nav = page.get_by_role("navigation", name="Console sections")
    await expect(nav.get_by_role("link")).to_have_text(["Recent jobs", "Failover matrix"])
    await expect(page.locator("#who")).to_contain_text("alice")
    await page.goto(f"{stack.url}#/unknown")
    await expect(page.get_by_role("heading", name="Unknown attempts")).to_be_visible()
    await expect(page.get_by_role("status")).to_contain_text(
        "needs an API key with the admin scope"
    )
    await expect(page.locator("#unknown-table")).to_have_count(0)
    await shoot(page, "non-admin-1280")
    # Its own job page works, on the owner's routes.
    await page.goto(f"{stack.url}#/jobs/{job_id}")
    await expect(page.locator("#job-status")).to_have_text("unknown")
    assert not [u for u in watched.urls if "/v1/admin/" in u], "a non-admin page asked admin routes"
    assert_key_kept_out(watched, stack.key)


async def test_the_failover_matrix_shows_verdicts_dates_and_the_certificate_behind_them(
    stack: Any, open_page: Any, shoot: Any
) -> None:
    page, watched = await open_page()
    await sign_in(page, stack.url, stack.admin_key)
    await page.get_by_role("link", name="Failover matrix").click()
    section = page.locator("section[data-contract='ticket-triage@1']")
    row = section.locator("tr[data-fallback='sim-anthropic']")
    await expect(row).to_have_attribute("data-allowed", "true")
    await expect(row.locator(".reason")).to_have_text("certified")
    await expect(row).to_contain_text("expires")
    await expect(section).to_contain_text("Contract fingerprint")
    await shoot(page, "matrix-1280")
    await row.get_by_role("link", name="sim-anthropic report").click()
    await expect(
        page.get_by_role("heading", name="Certificate: sim-anthropic on ticket-triage@1")
    ).to_be_visible()
    await expect(page.locator("dl.facts")).to_contain_text("current")
    await expect(page.locator("dl.facts")).to_contain_text("sim-claude")
    assert watched.errors == [], watched.errors


async def test_recent_jobs_page_by_cursor_and_filter_by_status(stack: Any, open_page: Any) -> None:
    owner = stack.api()
    for provider in ("sim-openai", "sim-anthropic"):  # the certified fallback fails too
        await stack.sim.script(provider, {"kind": "status", "code": 400})
    failed = (await owner.create(case_input(0), wait=10)).json()
    assert failed["status"] == "failed"
    for n in range(21):
        assert (await owner.create(case_input(n + 1))).status_code == 201

    page, watched = await open_page()
    await sign_in(page, stack.url, stack.key)
    rows = page.locator("#jobs-table tbody tr")
    await expect(rows).to_have_count(20)
    newer, older = page.locator("#newer-page"), page.locator("#older-page")
    await expect(newer).to_be_disabled()
    await older.click()
    await expect(rows).to_have_count(2)
    await expect(page.locator(f"#jobs-table tr[data-job='{failed['id']}']")).to_be_visible()
    await expect(older).to_be_disabled()
    await expect(page.get_by_text("Page 2")).to_be_visible()
    await newer.click()
    await expect(rows).to_have_count(20)

    await page.get_by_label("Status").select_option("failed")
    await expect(rows).to_have_count(1)
    await expect(rows).to_have_attribute("data-job", failed["id"])
    await expect(page.get_by_text("Page 1")).to_be_visible()
    await page.get_by_label("Status").select_option("cancelled")
    await expect(page.get_by_text("No jobs here.")).to_be_visible()
    assert watched.errors == [], watched.errors


async def test_every_view_fits_a_390_pixel_wide_screen(
    stack: Any, open_page: Any, shoot: Any
) -> None:
    owner = stack.api()
    done = (await owner.create(case_input(6), wait=10)).json()["id"]
    await stack.sim.script("sim-openai", {"kind": "hang"})
    stuck = (await owner.create(case_input(7))).json()["id"]
    await owner.until(stuck, lambda j: j["status"] == "unknown", timeout=PRIMARY_WAIT)

    page, watched = await open_page(PHONE)
    await sign_in(page, stack.url, stack.admin_key)
    await shoot(page, "jobs-390")
    views = {
        "unknown-390": ("#/unknown", "#unknown-table"),
        "job-390": (f"#/jobs/{done}", "svg.timeline"),
        "matrix-390": ("#/matrix", "table.matrix"),
    }
    for name, (hash_, ready) in views.items():
        await page.goto(f"{stack.url}{hash_}")
        await expect(page.locator(ready).first).to_be_visible()
        assert await fits_width(page), f"{name} is wider than 390 px"
        await shoot(page, name)
    # The timeline is drawn for the screen's width: its text stays at its real size.
    await page.goto(f"{stack.url}#/jobs/{done}")
    label = page.locator("svg.timeline g.lane-attempt text").first
    box = await label.bounding_box()
    assert box is not None and box["height"] >= 11, box
    await page.goto(f"{stack.url}#/unknown")
    await page.get_by_role("button", name=f"Resolve attempt 1 of {stuck}").click()
    await expect(page.get_by_role("dialog")).to_be_visible()
    assert await fits_width(page)
    await shoot(page, "resolve-390")
    assert watched.errors == [], watched.errors


PRIMARY_WAIT = 15.0  # seconds to wait for a hung attempt to turn unknown (deadline + reaper)


async def tab_to(page: Page, name: str, limit: int = 40) -> None:
    """Press Tab until the focused element's accessible name (or text) is ``name``."""
    for _ in range(limit):
        await page.keyboard.press("Tab")
        focused = await page.evaluate(
            "(() => { const e = document.activeElement;"
            " return e ? (e.getAttribute('aria-label') || e.textContent || '').trim() : ''; })()"
        )
        if focused == name:
            return
    raise AssertionError(f"never reached {name!r} by Tab")


async def focus_is_visible(page: Page) -> bool:
    """Say whether the focused element draws a focus outline."""
    style = await page.evaluate(
        "(() => { const s = getComputedStyle(document.activeElement);"
        " return [s.outlineStyle, s.outlineWidth]; })()"
    )
    return bool(style[0] != "none" and style[1] not in ("0px", ""))


def json_text(value: Any) -> str:
    return json.dumps(value, indent=2)
