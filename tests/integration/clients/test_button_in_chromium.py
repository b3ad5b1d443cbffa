"""The seed's two buttons in Debian's Chromium, against a real gateway and simulator.

Each test clicks as a person would, breaks something between the page and the gateway,
and checks the outcome where it counts: one job, and one call to the provider (the
simulator's call log), whatever the page and the network did.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from faulty_forwarder import FaultyServer
from served_gateway import Stack

pytestmark = pytest.mark.slow

SETTLE = 20_000  # ms a page may take to show a change made by the gateway
PHONE = {"width": 390, "height": 844}


async def open_button(open_page: Any, server: FaultyServer) -> tuple[Any, Any]:
    page, watched = await open_page()
    await page.goto(f"{server.url}/")
    await page.locator("#intention-key").wait_for()
    return page, watched


async def status(page: Any) -> str:
    return str(await page.locator("#job-status").text_content())


async def until_status(page: Any, wanted: str) -> None:
    from playwright.async_api import expect

    await expect(page.locator("#job-status")).to_have_text(wanted, timeout=SETTLE)


def one_job_one_call(stack: Stack, before: set[str], job_id: str) -> None:
    """Assert the test made exactly ``job_id``, and the provider was called once for it."""
    assert stack.job_ids() - before == {job_id}
    calls = stack.sim_calls()
    assert [c["idempotency_key"] for c in calls] == [f"{job_id}/1"], calls


async def answered(server: FaultyServer, method: str, path: str, count: int) -> list[Any]:
    """Return the forwarder's record of ``method path`` once ``count`` were answered."""
    deadline = time.monotonic() + 10
    while True:
        seen = server.faults.requests(method, path)
        if len(seen) >= count and all(s.status is not None for s in seen):
            return seen
        assert time.monotonic() < deadline, seen
        await asyncio.sleep(0.05)


async def fits_width(page: Any) -> bool:
    return bool(
        await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    )


async def test_a_double_click_makes_one_job_and_one_provider_call(
    fresh: Stack, page_server: FaultyServer, open_page: Any, shoot: Any
) -> None:
    before = fresh.job_ids()
    page, watched = await open_button(open_page, page_server)
    key = await page.locator("#intention-key").text_content()

    await page.locator("#triage").dblclick()
    await until_status(page, "succeeded")

    # Both clicks sent the job, with the key made when the page was shown.
    assert watched.posts() == [f'"{key}"', f'"{key}"']
    answers = sorted(s.status for s in await answered(page_server, "POST", "/v1/jobs", 2))
    assert answers == [200, 201]
    job_id = str(await page.locator("#job-id").text_content())
    one_job_one_call(fresh, before, job_id)
    await page.get_by_text("Idempotent-Replayed").wait_for()
    await shoot(page, "double-click-succeeded")
    await page.set_viewport_size(PHONE)
    assert await fits_width(page)
    assert watched.errors == []


async def test_what_happened_tells_the_creation_before_a_replay_that_came_back_first(
    fresh: Stack, page_server: FaultyServer, open_page: Any
) -> None:
    from playwright.async_api import expect

    before = fresh.job_ids()
    page_server.faults.hold_seconds = 2.0
    page_server.faults.script("POST", "/v1/jobs", "hold")  # the first answer comes late
    page, watched = await open_button(open_page, page_server)

    await page.locator("#triage").click()
    deadline = time.monotonic() + 10
    while not fresh.job_ids() - before:
        assert time.monotonic() < deadline, "the job never reached the gateway"
        await asyncio.sleep(0.05)
    await page.locator("#triage").click()  # its replay overtakes the first click's 201
    await until_status(page, "succeeded")
    answers = await answered(page_server, "POST", "/v1/jobs", 2)
    assert [s.status for s in answers] == [201, 200]

    log = page.locator("#log li")
    await expect(log.filter(has_text="Sent again")).to_have_count(1)
    lines = [str(t) for t in await log.all_text_contents()]
    created = [n for n, line in enumerate(lines) if "Created job" in line]
    again = [n for n, line in enumerate(lines) if "Sent again" in line]
    assert len(created) == 1 and created[0] < again[0], lines
    assert "by an earlier send" in lines[created[0]], lines
    job_id = str(await page.locator("#job-id").text_content())
    one_job_one_call(fresh, before, job_id)
    assert watched.errors == []


async def test_a_response_lost_after_the_gateway_got_it_is_retried_into_the_same_job(
    fresh: Stack, page_server: FaultyServer, open_page: Any, shoot: Any
) -> None:
    before = fresh.job_ids()
    page, watched = await open_button(open_page, page_server)
    lost: list[int] = []

    async def lose_the_first_answer(route: Any) -> None:
        if route.request.method == "POST" and not lost:
            response = await route.fetch()  # the gateway makes the job...
            lost.append(response.status)
            await route.abort("connectionreset")  # ...and the page never hears of it
        else:
            await route.continue_()

    await page.route("**/v1/jobs", lose_the_first_answer)
    await page.locator("#triage").click()
    await until_status(page, "succeeded")

    assert lost == [201]
    keys = watched.posts()
    assert len(keys) == 2 and len(set(keys)) == 1  # the client's retry: the same key
    job_id = str(await page.locator("#job-id").text_content())
    one_job_one_call(fresh, before, job_id)
    await page.get_by_text("No answer from onejob (try 1)").wait_for()
    await page.get_by_text("Idempotent-Replayed").wait_for()
    await shoot(page, "lost-response-succeeded")
    assert watched.errors == []


async def test_a_reload_while_the_request_is_in_flight_resumes_the_same_job(
    fresh: Stack, page_server: FaultyServer, open_page: Any, shoot: Any
) -> None:
    before = fresh.job_ids()
    page_server.faults.hold_seconds = 4.0
    page_server.faults.script("POST", "/v1/jobs", "hold")
    page, watched = await open_button(open_page, page_server)
    key = await page.locator("#intention-key").text_content()

    await page.locator("#triage").click()
    # The gateway has the job; its answer is held on the way back. Reload now.
    deadline = time.monotonic() + 10
    while not fresh.job_ids() - before:
        assert time.monotonic() < deadline, "the job never reached the gateway"
        await asyncio.sleep(0.05)
    assert await status(page) == "sending"
    await page.reload()

    await until_status(page, "succeeded")
    assert await page.locator("#intention-key").text_content() == key
    await page.get_by_text("Page reloaded while sending").wait_for()
    assert watched.posts() == [f'"{key}"', f'"{key}"']
    job_id = str(await page.locator("#job-id").text_content())
    one_job_one_call(fresh, before, job_id)
    await shoot(page, "reload-succeeded")
    assert watched.errors == []


async def test_the_fallback_pressed_while_the_first_attempt_is_unknown_says_still_in_progress(
    fresh: Stack, page_server: FaultyServer, open_page: Any, shoot: Any
) -> None:
    from playwright.async_api import expect

    before = fresh.job_ids()
    fresh.sim_script("sim-openai", {"kind": "hang"})  # past the 3 s attempt deadline
    page, watched = await open_button(open_page, page_server)

    await page.locator("#triage").click()
    await until_status(page, "running")
    await until_status(page, "unknown")
    await expect(page.locator("#attempts li")).to_have_text(
        ["Attempt 1 · sim-openai · initial unknown"]
    )
    await page.locator("#fallback").click()
    message = page.locator("#message")
    await expect(message).to_contain_text("Still in progress: Attempt 1 (sim-openai) is unknown")
    await expect(message).to_contain_text("The fallback was not called")
    # An unknown attempt is not waited out: the page says who ends it.
    await expect(message).to_contain_text("waits for an operator to resolve it")
    await expect(message).not_to_contain_text("Please wait")
    await shoot(page, "fallback-while-unknown")

    job_id = str(await page.locator("#job-id").text_content())
    refused = await answered(page_server, "POST", f"/v1/jobs/{job_id}/attempts", 1)
    assert [s.status for s in refused] == [409]
    one_job_one_call(fresh, before, job_id)
    assert [c["provider"] for c in fresh.sim_calls()] == ["sim-openai"]
    assert await status(page) == "unknown"
    assert watched.errors == []


async def test_a_gateway_answering_503_for_a_while_is_waited_out_with_the_same_key(
    fresh: Stack, page_server: FaultyServer, open_page: Any, shoot: Any
) -> None:
    from playwright.async_api import expect

    before = fresh.job_ids()
    page, watched = await open_button(open_page, page_server)
    key = await page.locator("#intention-key").text_content()
    page_server.faults.unavailable_for(3.5)  # the database is away for 3.5 s

    await page.locator("#triage").click()
    await expect(page.locator("#message")).to_contain_text(
        "onejob answered 503. Trying again in", timeout=SETTLE
    )
    await shoot(page, "unavailable-retrying")
    await until_status(page, "succeeded")

    seen = page_server.faults.requests("POST", "/v1/jobs")
    assert [s.status for s in seen][-1] == 201
    assert {s.status for s in seen[:-1]} == {503} and len(seen) >= 3
    assert {s.key for s in seen} == {f'"{key}"'}
    assert watched.posts() == [f'"{key}"'] * len(seen)
    job_id = str(await page.locator("#job-id").text_content())
    one_job_one_call(fresh, before, job_id)
    assert watched.errors == []
