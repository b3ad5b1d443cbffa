"""The operator console in a real browser against a real gateway, dispatcher and simulator.

Each test signs in through the page as a person would, and checks what the page shows and
what it sends: the key only in the Authorization header, never in a URL or a cookie; no
script error and no Content-Security-Policy refusal on any page.
"""

from __future__ import annotations

import datetime as dt
import json
import re
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
    await expect(nav.get_by_role("link")).to_have_text(
        ["Recent jobs", "Failover matrix", "Webhooks"]
    )
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
    # The stack's certificates are valid for a day: every one is due for re-certification.
    await expect(row).to_have_attribute("data-recertify-due", "true")
    await expect(row.locator(".badge.due")).to_have_text("re-certify due")
    await expect(page.locator(".attention .due-summary")).to_contain_text(
        "sim-anthropic on ticket-triage@1 expires in"
    )
    await expect(page.locator(".attention .suspended-summary")).to_have_count(0)
    await shoot(page, "matrix-1280")
    await row.get_by_role("link", name="sim-anthropic report").click()
    await expect(
        page.get_by_role("heading", name="Certificate: sim-anthropic on ticket-triage@1")
    ).to_be_visible()
    await expect(page.locator("dl.facts")).to_contain_text("current")
    await expect(page.locator("dl.facts")).to_contain_text("sim-claude")
    assert watched.errors == [], watched.errors


@pytest.mark.parametrize("width", [1280, 390])
async def test_the_matrix_shows_a_suspended_pair_its_shadow_checks_and_what_expires_soon(
    attention_stack: Any, open_page: Any, shoot: Any, width: int
) -> None:
    stack = attention_stack
    page, watched = await open_page({"width": width, "height": 800 if width > 720 else 844})
    await sign_in(page, stack.url, stack.key)  # the matrix is served to any key
    await page.get_by_role("link", name="Failover matrix").click()

    # What needs attention comes first: the suspended pair, then the certificates to renew,
    # the expired one before the one expiring soon.
    summary = page.locator("section.attention")
    await expect(summary.get_by_role("heading", name="Needs attention")).to_be_visible()
    await expect(summary.locator(".suspended-summary")).to_contain_text(
        "1 pair suspended by shadow checks: sim-openai → sim-anthropic on ticket-triage@1"
        " (45% disagree, since"
    )
    due = summary.locator(".due-summary")
    await expect(due).to_contain_text("2 certificates to re-certify")
    await expect(due.get_by_role("link")).to_have_text(
        ["sim-openai on reply-draft@1", "sim-anthropic on invoice-extraction@1"]
    )
    await expect(due).to_contain_text("sim-openai on reply-draft@1 expired 1 day ago")
    await expect(due).to_contain_text("sim-anthropic on invoice-extraction@1 expires in 3 days")

    # The suspended pair: marked suspended, not only refused, with the shadow checks' numbers.
    triage = page.locator(
        "section[data-contract='ticket-triage@1'] tr[data-fallback='sim-anthropic']"
    )
    await expect(triage).to_have_attribute("data-suspended", "true")
    await expect(triage).to_have_attribute("data-allowed", "false")
    await expect(triage).to_have_class("suspended")
    failover = triage.locator("td[data-label='Failover'] .badge")
    await expect(failover).to_have_text(["refused", "suspended"])
    await expect(triage.locator(".reason")).to_have_text("suspended")
    why = triage.locator("dl.suspension")
    await expect(why.locator("dd.rate")).to_have_text("45% of shadow checks, threshold 20%")
    await expect(why).to_contain_text("9 of 20 disagreed (judged from 20)")
    await expect(why.locator("dd.fields")).to_have_text("category (9)")
    await expect(why).to_contain_text("3h")  # since: three hours ago
    await expect(why).to_contain_text("sim-anthropic's certificate of run cert-fallback")
    shadow = triage.locator("td[data-label='Shadow checks']")
    await expect(shadow).to_contain_text("45% disagree (9 of 20 checks; threshold 20%)")
    await expect(shadow).to_contain_text("on category (9)")
    await expect(shadow).to_contain_text("sampling 25% of jobs")
    await expect(triage.locator("td[data-label='Expires'] .expiry")).to_have_text(
        "expires in 28 days"
    )
    await expect(triage.locator(".badge.due, .badge.expired")).to_have_count(0)
    # Latency and cost: the fallback's figures against the primary's and the budget.
    usage = triage.locator("td[data-label='Latency & cost']")
    await expect(usage.locator("[data-figure='latency_p95_ms']")).to_have_text(
        "p95 1.2 s (primary 400 ms; budget 20 s)"
    )
    await expect(usage.locator("[data-figure='output_tokens_per_case']")).to_have_text(
        "75 output tokens/case (primary 62; budget 300)"
    )
    await expect(usage.locator("[data-figure='cost_per_case_usd']")).to_have_text(
        "$0.0004/case (primary $0.0001; no cost budget)"
    )
    await expect(usage).to_contain_text("fallback's 25 calls at certification")
    await expect(usage.locator(".over, .badge.over")).to_have_count(0)
    await expect(triage).to_have_attribute("data-over-budget", "false")

    # Allowed, but its fallback's certificate is due: the pair and the certificate say so.
    invoice = page.locator(
        "section[data-contract='invoice-extraction@1'] tr[data-fallback='sim-anthropic']"
    )
    await expect(invoice).to_have_attribute("data-allowed", "true")
    await expect(invoice).to_have_attribute("data-suspended", "false")
    await expect(invoice).to_have_attribute("data-recertify-due", "true")
    expires = invoice.locator("td[data-label='Expires']")
    await expect(expires.locator(".expiry")).to_have_text("expires in 3 days")
    await expect(expires.locator(".badge")).to_have_text("re-certify due")
    fallback_cert = invoice.locator("td[data-label='Fallback certificate']")
    await expect(fallback_cert.locator(".soon")).to_contain_text("expires")
    await expect(fallback_cert).to_contain_text("cert-soon")
    await expect(invoice.locator("td[data-label='Shadow checks']")).to_contain_text(
        "20% disagree (1 of 5 checks; threshold 20%)"
    )
    await expect(invoice.locator("td[data-label='Shadow checks']")).to_contain_text(
        "too few to judge (needs 20)"
    )
    await expect(invoice.locator("td[data-label='Latency & cost']")).to_have_text(
        "not recorded (certificates written before budgets)"
    )

    # The primary's certificate expired, and the fallback's failed its latency budget; not
    # hedgeable: no shadow checks.
    reply = page.locator("section[data-contract='reply-draft@1'] tr[data-fallback='sim-anthropic']")
    await expect(reply.locator(".reason")).to_have_text("failed")
    await expect(reply.locator("td[data-label='Why']")).to_contain_text("budget layer")
    await expect(reply).to_have_attribute("data-over-budget", "true")
    over = reply.locator("td[data-label='Latency & cost'] .figure.over")
    await expect(over).to_have_text(["p95 41 s over budget (primary 6.5 s; budget 30 s)"])
    await expect(over.locator(".badge.over")).to_have_text("over budget")
    await expect(reply.locator("[data-figure='output_tokens_per_case']")).to_have_text(
        "410 output tokens/case (primary 240; budget 600)"
    )
    await expect(reply.locator("[data-figure='cost_per_case_usd']")).to_have_text(
        "cost unknown: no price given (primary $0.0009; no cost budget)"
    )
    await expect(reply.locator("td[data-label='Expires'] .expiry")).to_have_text(
        "expired 1 day ago"
    )
    await expect(reply.locator("td[data-label='Expires'] .badge")).to_have_text("expired")
    await expect(reply.locator("td[data-label='Shadow checks']")).to_contain_text("not run")

    await assert_fits(page, f"matrix-attention-{width}")
    await shoot(page, f"matrix-attention-{width}")
    await shoot(page, f"matrix-attention-top-{width}", summary)
    await shoot(page, f"matrix-suspended-{width}", triage)
    await shoot(page, f"matrix-over-budget-{width}", reply)
    await page.goto(f"{stack.url}#/certificate/ticket-triage@1/sim-anthropic")
    await expect(page.locator(".suspension-notice")).to_contain_text(
        "Failover from sim-openai to sim-anthropic is suspended since"
    )
    await expect(page.locator(".suspension-notice")).to_contain_text(
        "disagreed in 9 of 20 (45%, threshold 20%) on category (9)"
    )
    await assert_fits(page, f"certificate-suspended-{width}")
    await shoot(page, f"certificate-suspended-{width}")
    await page.goto(f"{stack.url}#/certificate/invoice-extraction@1/sim-anthropic")
    await expect(page.locator(".suspension-notice")).to_have_count(0)
    await expect(page.locator("dl.facts")).to_contain_text("expires in 3 days")
    await expect(page.locator("dl.facts")).to_contain_text("cert-soon")
    await expect(page.locator("dl.facts dd.usage")).to_have_text(
        "not recorded (written before budgets)"
    )
    await assert_fits(page, f"certificate-soon-{width}")
    await page.goto(f"{stack.url}#/certificate/reply-draft@1/sim-anthropic")
    await expect(page.locator("dl.facts dd.usage")).to_have_text(
        "p50 12 s, p95 41 s (budget 30 s) over budget; 410 output tokens/case (budget 600); "
        "cost unknown: no price given (25 calls)"
        "failed its budget: latency_p95_ms is over the budget of 30000"
    )
    await assert_fits(page, f"certificate-over-budget-{width}")
    await shoot(page, f"certificate-over-budget-{width}")
    assert_key_kept_out(watched, stack.key)


@pytest.mark.parametrize("width", [1280, 390])
async def test_the_matrix_shows_an_open_circuit_first_and_a_pause_as_it_comes(
    capacity_stack: Any, open_page: Any, shoot: Any, width: int
) -> None:
    stack = capacity_stack
    owner = stack.api()
    # Three 500s in a row open sim-openai's circuit (no certified fallback: each job fails).
    await stack.sim.script("sim-openai", {"kind": "status", "code": 500}, count=3)
    for n in range(3):
        failed = (await owner.create(case_input(n), wait=10)).json()
        assert failed["status"] == "failed", failed
    openai = await provider(owner, "sim-openai")
    assert openai["circuit"] == "open" and openai["consecutive_failures"] == 3, openai
    pairs = len((await owner.gw.client.get("/v1/certifications", headers=owner.auth)).json()[
        "certifications"
    ])  # fmt: skip

    page, watched = await open_page({"width": width, "height": 800 if width > 720 else 844})
    await sign_in(page, stack.url, stack.key)
    await page.get_by_role("link", name="Failover matrix").click()
    summary = page.locator("section.attention")
    await expect(summary.locator(".circuit-summary")).to_contain_text(
        f"1 provider with an open circuit: sim-openai until {clock(openai['circuit_until'])}"
        " (3 failures in a row)"
    )
    await expect(summary.locator(".circuit-summary")).to_contain_text(
        "Nothing is sent to it until then"
    )
    row = page.locator("section[data-contract='ticket-triage@1'] tr[data-fallback='sim-anthropic']")
    circuit = row.locator(".capacity[data-provider='sim-openai']")
    await expect(circuit.locator(".badge")).to_have_text(
        [f"circuit open until {clock(openai['circuit_until'])}"]
    )
    await expect(circuit).to_contain_text("3 failures in a row")
    # Every pair whose primary it is says so; sim-anthropic's circuit is closed and it has
    # not paused: nothing is said of it.
    await expect(page.locator(".capacity[data-circuit='open']")).to_have_count(pairs)
    await expect(page.locator(".capacity[data-provider='sim-anthropic']")).to_have_count(0)

    # sim-anthropic asks for two minutes: a job on it waits, and the open page follows.
    await stack.sim.script("sim-anthropic", {"kind": "status", "code": 429, "retry_after": 120})
    paused = await owner.gw.client.post(
        "/v1/jobs",
        json={"contract": "ticket-triage@1", "input": case_input(3), "provider": "sim-anthropic"},
        headers={**owner.auth, "Idempotency-Key": "paused-1"},
    )
    await owner.until(paused.json()["id"], lambda j: j["waiting"] is not None)
    anthropic = await provider(owner, "sim-anthropic")
    assert anthropic["pause_reason"] == "rate_limited", anthropic
    pause = row.locator(".capacity[data-provider='sim-anthropic']")
    await expect(pause.locator(".badge")).to_have_text(
        [f"paused until {clock(anthropic['paused_until'])} (rate limited)"],
        timeout=SETTLE_TIMEOUT,
    )
    await expect(pause.locator(".capacity-facts")).to_have_text(
        "1 waiting", timeout=SETTLE_TIMEOUT
    )  # counted each second; nothing else queued for it, so no "0 queued"
    # A pause is no open circuit: the summary still names sim-openai alone.
    await expect(summary.locator(".circuit-summary")).to_contain_text("1 provider with")
    await expect(summary).not_to_contain_text("sim-anthropic")

    await assert_fits(page, f"matrix-capacity-{width}")
    await shoot(page, f"matrix-capacity-{width}")
    await shoot(page, f"matrix-capacity-top-{width}", summary)
    await shoot(page, f"matrix-capacity-row-{width}", row)
    assert_key_kept_out(watched, stack.key)


@pytest.mark.parametrize("width", [1280, 390])
async def test_a_job_waiting_for_capacity_says_why_and_until_when_and_a_deadline_reads_plainly(
    capacity_stack: Any, open_page: Any, shoot: Any, width: int
) -> None:
    stack = capacity_stack
    owner = stack.api()
    # Longer than the test runs: the job is still waiting when the pages are checked.
    await stack.sim.script("sim-openai", {"kind": "status", "code": 429, "retry_after": 60})
    created = (await owner.create(case_input(0))).json()
    job = await owner.until(created["id"], lambda j: j["waiting"] is not None)
    assert job["status"] == "queued" and job["waiting"]["reason"] == "rate_limited", job
    until = clock(job["waiting"]["until"])
    # sim-anthropic asks for a minute, and this job has 5 s: it fails on its deadline at once.
    await stack.sim.script("sim-anthropic", {"kind": "status", "code": 429, "retry_after": 60})
    late = (
        await owner.gw.client.post(
            "/v1/jobs",
            json={
                "contract": "ticket-triage@1",
                "input": case_input(1),
                "provider": "sim-anthropic",
                "deadline_s": 5,
            },
            headers={**owner.auth, "Idempotency-Key": "late-1", "Prefer": "wait=10"},
        )
    ).json()
    assert late["status"] == "failed" and late["error"]["reason"] == "job_deadline", late

    page, watched = await open_page({"width": width, "height": 800 if width > 720 else 844})
    await sign_in(page, stack.url, stack.key)
    status = page.locator(f"#jobs-table tr[data-job='{job['id']}'] td[data-label='Status']")
    await expect(status).to_have_text(
        f"queued · waiting for sim-openai until {until} (rate limited)"
    )
    await expect(
        page.locator(f"#jobs-table tr[data-job='{late['id']}'] td[data-label='Status']")
    ).to_have_text("failed")
    await assert_fits(page, f"jobs-waiting-{width}")
    await shoot(page, f"jobs-waiting-{width}")

    await page.goto(f"{stack.url}#/jobs/{job['id']}")
    await expect(page.locator("#job-status")).to_have_text("queued")
    waiting = page.locator("#job-waiting")
    await expect(waiting.locator(".badge")).to_have_text("waiting")
    await expect(waiting.locator(".why")).to_have_text("rate limited by sim-openai")
    await expect(waiting).to_contain_text(f"attempt 1 is not sent again before {until} (1 wait)")
    await expect(page.locator("#job-deadline")).to_contain_text(stamp(job["deadline_at"]))
    await expect(page.locator("#job-refresh")).to_contain_text(
        f"status queued, waiting for sim-openai until {until}, in "
    )
    attempt = page.locator("#attempts-table tr[data-state='waiting']")
    await expect(attempt.locator("td[data-label='State']")).to_have_text(f"waiting until {until}")
    await expect(attempt.locator("td[data-label='Waits']")).to_have_text("1")
    await expect(attempt.locator("td[data-label='Error'] .error-words")).to_have_text(
        "429 rate limited by sim-openai, asked to wait 60 s."
    )
    lane = page.locator("svg.timeline g.lane-attempt")
    await expect(lane.locator("g.mark-waiting")).to_have_count(1)
    await expect(lane.locator("text.end-label")).to_have_text("waiting")
    await expect(lane.locator("g.mark-waiting title")).to_contain_text(
        f"waiting: rate limited by sim-openai until {until}"
    )
    await expect(
        page.locator("#events-table tr[data-kind='attempt_waiting'] .event-words")
    ).to_have_text(f"rate limited by sim-openai (429): not sent again before {until}; wait 1, "
                   "asked for 60 s")  # fmt: skip
    await expect(page.locator("#job-region")).to_contain_text("the job waits for capacity")
    await assert_fits(page, f"job-waiting-{width}")
    await shoot(page, f"job-waiting-{width}")

    await page.goto(f"{stack.url}#/jobs/{late['id']}")
    await expect(page.locator("#job-status")).to_have_text("failed")
    await expect(page.locator("#job-waiting")).to_have_count(0)
    deadline = clock(late["deadline_at"])
    await expect(page.locator("#job-error-words")).to_have_text(
        f"The job's deadline ({deadline}) came first: sim-anthropic cannot take the call for"
        " 60.0s, past the job's deadline."
    )
    await expect(page.locator("#events-table tr[data-kind='job_failed']")).to_contain_text(
        f"The job's deadline ({deadline}) came first"
    )
    failed = page.locator("#attempts-table tr[data-state='failed']")
    await expect(failed.locator(".error-words")).to_contain_text("The job's deadline")
    await expect(page.locator("svg.timeline g.lane-attempt g.mark-failed title")).to_contain_text(
        "attempt_failed (job deadline)"
    )
    await assert_fits(page, f"job-deadline-{width}")
    await shoot(page, f"job-deadline-{width}")
    assert_key_kept_out(watched, stack.key)


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


@pytest.mark.parametrize("width", [1280, 390])
async def test_every_view_fits_the_screen_with_every_control_on_it(
    stack: Any, open_page: Any, shoot: Any, width: int
) -> None:
    owner = stack.api()
    done = (await owner.create(case_input(6), wait=10)).json()["id"]
    await stack.sim.script("sim-openai", {"kind": "hang"})
    stuck = (await owner.create(case_input(7))).json()["id"]
    await owner.until(stuck, lambda j: j["status"] == "unknown", timeout=PRIMARY_WAIT)

    page, watched = await open_page({"width": width, "height": 800 if width > 720 else 844})
    await sign_in(page, stack.url, stack.admin_key)
    await page.locator("#owner-filter").fill("alice")
    await page.locator("#owner-filter").dispatch_event("change")
    await expect(page.locator("#jobs-table tbody tr")).to_have_count(2)
    await page.locator("#find-owner").fill("alice")
    await page.locator("#find-key").fill(str((await owner.job(done)).json()["idempotency_key"]))
    await page.get_by_role("button", name="Find by key").click()
    await expect(page.locator("#find-table tbody tr")).to_have_count(1)
    await assert_fits(page, f"jobs-{width}")
    await shoot(page, f"jobs-{width}")
    views = {
        "unknown": ("#/unknown", "#unknown-table"),
        "job": (f"#/jobs/{done}", "svg.timeline"),
        "matrix": ("#/matrix", "table.matrix"),
        "certificate": ("#/certificate/ticket-triage@1/sim-anthropic", "dl.facts"),
    }
    for name, (hash_, ready) in views.items():
        await page.goto(f"{stack.url}{hash_}")
        await expect(page.locator(ready).first).to_be_visible()
        await assert_fits(page, f"{name}-{width}")
        await shoot(page, f"{name}-{width}")
    await page.goto(f"{stack.url}#/unknown")
    resolve = page.get_by_role("button", name=f"Resolve attempt 1 of {stuck}")
    await expect(resolve).to_be_visible()
    box = await resolve.bounding_box()
    assert box is not None and 0 <= box["x"] and box["x"] + box["width"] <= width, box
    await resolve.click()
    await expect(page.get_by_role("dialog")).to_be_visible()
    await assert_fits(page, f"resolve-{width}")
    await shoot(page, f"resolve-{width}")
    # The timeline is drawn for the screen's width: its text stays at its real size.
    await page.keyboard.press("Escape")
    await page.goto(f"{stack.url}#/jobs/{done}")
    label = page.locator("svg.timeline g.lane-attempt text").first
    box = await label.bounding_box()
    assert box is not None and box["height"] >= 11, box
    assert watched.errors == [], watched.errors


async def test_a_fast_jobs_timeline_is_drawn_in_milliseconds_with_its_marks_apart(
    stack: Any, open_page: Any, shoot: Any
) -> None:
    owner = stack.api()
    job = (await owner.create(case_input(8), wait=10)).json()
    assert job["status"] == "succeeded"
    events = (await owner.gw.client.get(f"/v1/jobs/{job['id']}/events", headers=owner.auth)).json()
    ats = [e["at"] for e in events["events"]]
    took = (dt.datetime.fromisoformat(ats[-1]) - dt.datetime.fromisoformat(ats[0])).total_seconds()
    assert 0 < took < 0.5, f"the simulator took {took}s: not a fast job"

    page, watched = await open_page()
    await sign_in(page, stack.url, stack.key)
    await page.goto(f"{stack.url}#/jobs/{job['id']}")
    await expect(page.locator("#job-status")).to_have_text("succeeded")
    ticks = await page.locator("svg.timeline text.tick").all_text_contents()
    assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks
    assert all(t.endswith("ms") for t in ticks), ticks
    lane = page.locator("svg.timeline g.lane-attempt")
    sent = await lane.locator("g.mark-sent").bounding_box()
    won = await lane.locator("g.mark-won").bounding_box()
    assert sent is not None and won is not None
    assert won["x"] - sent["x"] > 100, (sent, won)  # the bar spans the plot, not one tick
    await shoot(page, "job-fast-1280")
    assert watched.errors == [], watched.errors


async def test_an_admin_finds_another_owners_job_by_id_and_by_idempotency_key(
    stack: Any, open_page: Any, shoot: Any
) -> None:
    owner = stack.api()
    job = (await owner.create(case_input(9), wait=10)).json()
    page, watched = await open_page()
    await sign_in(page, stack.url, stack.admin_key)
    # An admin opens on every owner's jobs, alice's among them.
    await expect(page.get_by_role("heading", name="Every owner's jobs")).to_be_visible()
    await expect(page.locator(f"#jobs-table tr[data-job='{job['id']}']")).to_be_visible()

    await page.locator("#find-owner").fill("alice")
    await page.locator("#find-key").fill(job["idempotency_key"])
    await page.get_by_role("button", name="Find by key").click()
    row = page.locator(f"#find-table tr[data-job='{job['id']}']")
    await expect(row).to_contain_text(job["idempotency_key"])
    await expect(row).to_contain_text("alice")
    await page.locator("#find-key").fill("never-used")
    await page.get_by_role("button", name="Find by key").click()
    await expect(page.locator("#find-result")).to_contain_text("No job of alice")

    await page.locator("#owner-filter").fill("alice")
    await page.locator("#owner-filter").press("Enter")
    await page.locator("#owner-filter").blur()
    await expect(page.locator(f"#jobs-table tr[data-job='{job['id']}']")).to_contain_text(
        job["idempotency_key"]
    )
    await shoot(page, "find-1280")

    await page.get_by_label("Job id").fill(job["id"])
    await page.get_by_role("button", name="Open job").click()
    await expect(page.get_by_role("heading", name=f"Job {job['id']}")).to_be_visible()
    await expect(page.locator("#job-status")).to_have_text("succeeded")
    assert watched.errors == [], watched.errors


@pytest.mark.parametrize("width", [1280, 390])
async def test_an_admin_opens_on_every_owners_jobs_and_may_narrow_them_to_one(
    stack: Any, open_page: Any, shoot: Any, width: int
) -> None:
    alices = (await stack.api().create(case_input(11), wait=10)).json()
    ops = (await stack.api(admin=True).create(case_input(12), wait=10)).json()
    page, watched = await open_page({"width": width, "height": 800 if width > 720 else 844})
    await sign_in(page, stack.url, stack.admin_key)

    await expect(page.get_by_role("heading", name="Every owner's jobs")).to_be_visible()
    rows = page.locator("#jobs-table tbody tr")
    await expect(rows).to_have_count(2)
    await expect(rows.nth(0)).to_have_attribute("data-job", ops["id"])  # newest first
    await expect(rows.nth(0)).to_contain_text("ops")
    await expect(rows.nth(1)).to_have_attribute("data-job", alices["id"])
    await expect(rows.nth(1)).to_contain_text("alice")
    await expect(page.get_by_text("No jobs here.")).to_have_count(0)
    await assert_fits(page, f"every-owner-{width}")
    await shoot(page, f"every-owner-{width}")

    await page.locator("#owner-filter").fill("alice")
    await page.locator("#owner-filter").dispatch_event("change")
    await expect(page.get_by_role("heading", name="alice's jobs")).to_be_visible()
    await expect(rows).to_have_count(1)
    await expect(rows).to_have_attribute("data-job", alices["id"])
    await page.locator("#owner-filter").fill("")
    await page.locator("#owner-filter").dispatch_event("change")
    await expect(page.get_by_role("heading", name="Every owner's jobs")).to_be_visible()
    await expect(rows).to_have_count(2)
    assert [u for u in watched.urls if "/v1/admin/jobs?" in u], watched.urls
    assert watched.errors == [], watched.errors


#: Ids, the date and the clock of each time and the providers' names of a pair, with how many
#: lines each takes.
UNBROKEN = """Array.from(document.querySelectorAll(
    '#view .mono.id, #view .stamp > span, #view .pair-names .name'))
  .filter((e) => e.offsetParent !== null)
  .map((e) => [e.textContent, e.getClientRects().length,
               e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight)])"""


@pytest.mark.parametrize("width", [1280, 390])
async def test_a_job_page_is_titled_for_its_job_and_ids_times_and_names_stay_whole(
    stack: Any, open_page: Any, shoot: Any, width: int
) -> None:
    job = (await stack.api().create(case_input(13), wait=10)).json()
    assert job["status"] == "succeeded"
    page, watched = await open_page({"width": width, "height": 800 if width > 720 else 844})
    await sign_in(page, stack.url, stack.admin_key)
    await expect(page).to_have_title("Recent jobs · onejob console")
    await expect(page.locator(f"#jobs-table tr[data-job='{job['id']}']")).to_be_visible()
    await assert_whole(page, f"jobs-{width}")

    await page.goto(f"{stack.url}#/jobs/{job['id']}")
    await expect(page.locator("#job-status")).to_have_text("succeeded")
    await expect(page).to_have_title(f"Job {job['id']} · onejob console")
    await assert_whole(page, f"job-{width}")
    await assert_fits(page, f"job-{width}")
    # The timeline is as wide as its frame (it stopped at 960 px in a 1224 px frame).
    frame, drawn = await page.evaluate(
        """[document.querySelector('.timeline-wrap').clientWidth,
            document.querySelector('svg.timeline').getBoundingClientRect().width]"""
    )
    assert abs(frame - drawn) <= 4, (frame, drawn)
    await shoot(page, f"job-titled-{width}")

    await page.goto(f"{stack.url}#/certificate/ticket-triage@1/sim-anthropic")
    await expect(page.locator("dl.facts").first).to_be_visible()
    await expect(page).to_have_title(
        "Certificate: sim-anthropic on ticket-triage@1 · onejob console"
    )
    await assert_whole(page, f"certificate-{width}")
    await page.goto(f"{stack.url}#/matrix")
    await expect(page.locator("table.matrix").first).to_be_visible()
    await expect(page).to_have_title("Failover matrix · onejob console")
    await assert_whole(page, f"matrix-{width}")
    await assert_fits(page, f"matrix-{width}")
    assert watched.errors == [], watched.errors


async def assert_whole(page: Page, name: str) -> None:
    """Fail on an id or a time drawn over more than one line."""
    found = await page.evaluate(UNBROKEN)
    assert found, f"{name}: no id or time on the page"
    broken = [(text, lines) for text, lines, height in found if lines != 1 or height > 1.5]
    assert broken == [], f"{name}: {broken}"


async def test_an_owner_looks_up_its_own_keys_only(stack: Any, open_page: Any) -> None:
    owner = stack.api()
    job = (await owner.create(case_input(10))).json()
    page, watched = await open_page()
    await sign_in(page, stack.url, stack.key)
    await expect(page.locator("#owner-filter")).to_have_count(0)
    await expect(page.locator("#find-owner")).to_have_attribute("readonly", "")
    await expect(page.locator("#find-owner")).to_have_value("alice")
    await page.locator("#find-key").fill(job["idempotency_key"])
    await page.get_by_role("button", name="Find by key").click()
    await expect(page.locator(f"#find-table tr[data-job='{job['id']}']")).to_be_visible()
    await expect(page.locator("#jobs-table")).to_contain_text(job["idempotency_key"])
    assert not [u for u in watched.urls if "/v1/admin/" in u]
    assert watched.errors == [], watched.errors


#: Everything that makes a view not fit: a page wider than the screen, a control (link,
#: button, field) reaching past its edge, a table scrolling inside its frame on a wide
#: screen, a header cut by its cell. Returns one line per problem.
LAYOUT_PROBLEMS = """() => {
  const width = window.innerWidth;
  const wide = width > 720;
  const problems = [];
  const page = document.documentElement.scrollWidth;
  if (page > width + 1) problems.push(`the page is ${page}px wide`);
  const controls = "a[href], button, input, select, textarea";
  for (const el of document.querySelectorAll(controls)) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue; // not rendered
    if (el.closest("thead") && !wide) continue; // the cards' headers are visually hidden
    if (r.left < -1 || r.right > width + 1) {
      const name = (el.getAttribute("aria-label") || el.textContent || el.id || el.tagName);
      const span = `${Math.round(r.left)}-${Math.round(r.right)}`;
      problems.push(`${name.trim().slice(0, 50)} spans ${span}`);
    }
  }
  for (const frame of document.querySelectorAll(".table-wrap, .timeline-wrap")) {
    if (wide && frame.scrollWidth > frame.clientWidth + 1) {
      const id = frame.querySelector("table, svg")?.id || frame.className;
      problems.push(`${id} scrolls inside its frame: ${frame.scrollWidth} > ${frame.clientWidth}`);
    }
  }
  if (wide) {
    for (const th of document.querySelectorAll("th")) {
      if (th.scrollWidth > th.clientWidth + 1) problems.push(`header cut: ${th.textContent}`);
    }
  }
  return problems;
}"""


async def assert_fits(page: Page, name: str) -> None:
    """Fail with every way the view does not fit the screen."""
    problems = await page.evaluate(LAYOUT_PROBLEMS)
    assert problems == [], f"{name}: {problems}"


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


async def provider(api: Any, name: str) -> dict[str, Any]:
    """One provider's capacity as ``GET /v1/providers`` shows it."""
    answer = await api.gw.client.get("/v1/providers", headers=api.auth)
    assert answer.status_code == 200, answer.text
    [found] = [p for p in answer.json()["providers"] if p["name"] == name]
    return dict(found)


def clock(value: str) -> str:
    """A time as the console's ``clock()`` writes it: "12:00:05Z", dated when not today."""
    at = dt.datetime.fromisoformat(value).astimezone(dt.UTC)
    time = at.strftime("%H:%M:%SZ")
    return time if at.date() == dt.datetime.now(dt.UTC).date() else f"{at.date()} {time}"


def stamp(value: str) -> str:
    """A time as the console's ``when()`` writes it: "2026-12-07 12:00:05Z"."""
    return re.sub(r"\.\d+Z$", "Z", value.replace("T", " "))


def json_text(value: Any) -> str:
    return json.dumps(value, indent=2)


async def test_a_job_page_shows_the_trace_its_job_was_created_in(
    stack: Any, open_page: Any
) -> None:
    api = stack.api()
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    traceparent = f"00-{trace_id}-00f067aa0ba902b7-01"
    sent = {**api.auth, "Idempotency-Key": "traced-page", "traceparent": traceparent}
    body = {"contract": "ticket-triage@1", "input": case_input(14)}
    job = (await api.gw.client.post("/v1/jobs", json=body, headers=sent)).json()
    assert job["trace"]["trace_id"] == trace_id
    page, _ = await open_page()
    await sign_in(page, stack.url, stack.admin_key)
    await page.goto(f"{stack.url}#/jobs/{job['id']}")
    await expect(page.locator("#job-trace")).to_have_text(trace_id)
    await expect(page.locator("#job-trace")).to_have_attribute("title", traceparent)
