"""The webhook routes (issue 45), on SQLite and PostgreSQL: make, list, rotate, test,
deliveries, redeliver, delete; each owner sees only their own; bad input and refused
destinations are problem+json 4xx."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.app import settings_for_tests
from gateway.settings import Settings

HOOK = {"url": "http://127.0.0.1:9/hook", "events": ["job.succeeded", "job.failed"]}


@pytest.fixture
def settings(database_url: str) -> Settings:
    return settings_for_tests(database_url=database_url, webhooks={"allow_hosts": ["127.0.0.1"]})


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    return body


async def test_a_webhook_is_made_with_its_secret_shown_once_and_listed_without_it(
    client: httpx.AsyncClient, keys: Any
) -> None:
    made = await client.post("/v1/webhooks", json=HOOK, headers=keys.auth())
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["secret"].startswith("whsec_") and body["id"].startswith("wh")
    listed = (await client.get("/v1/webhooks", headers=keys.auth())).json()["webhooks"]
    assert [h["id"] for h in listed] == [body["id"]]
    assert "secret" not in listed[0] and listed[0]["events"] == HOOK["events"]
    assert listed[0]["all_owners"] is False
    assert (await client.get("/v1/webhooks", headers=keys.auth("bob"))).json()["webhooks"] == []
    admin = await client.post("/v1/webhooks", json=HOOK, headers=keys.auth("admin"))
    assert admin.status_code == 201
    [seen] = (await client.get("/v1/webhooks", headers=keys.auth("admin"))).json()["webhooks"]
    assert seen["all_owners"] is True


async def test_rotation_gives_a_new_secret_and_keeps_the_old_one_signing_for_a_while(
    client: httpx.AsyncClient, keys: Any
) -> None:
    made = (await client.post("/v1/webhooks", json=HOOK, headers=keys.auth())).json()
    path = f"/v1/webhooks/{made['id']}/rotate"
    problem(await client.post(path, headers=keys.auth("bob")), 404)
    rotated = await client.post(path, headers=keys.auth())
    assert rotated.status_code == 200
    assert (
        rotated.json()["secret"].startswith("whsec_") and rotated.json()["secret"] != made["secret"]
    )
    [shown] = (await client.get("/v1/webhooks", headers=keys.auth())).json()["webhooks"]
    assert shown["previous_secret_until"] is not None


async def test_a_test_event_is_a_delivery_that_can_be_redelivered_with_its_id(
    client: httpx.AsyncClient, keys: Any
) -> None:
    made = (await client.post("/v1/webhooks", json=HOOK, headers=keys.auth())).json()
    sent = await client.post(f"/v1/webhooks/{made['id']}/test", headers=keys.auth())
    assert sent.status_code == 202, sent.text
    delivery = sent.json()
    assert delivery["type"] == "webhook.test" and delivery["status"] == "pending"
    assert delivery["payload"]["type"] == "webhook.test"
    assert delivery["payload"]["timestamp"].endswith("Z")
    listed = await client.get(f"/v1/webhooks/{made['id']}/deliveries", headers=keys.auth())
    assert [d["id"] for d in listed.json()["deliveries"]] == [delivery["id"]]
    again = await client.post(
        f"/v1/webhooks/{made['id']}/deliveries/{delivery['id']}/redeliver", headers=keys.auth()
    )
    assert again.status_code == 202 and again.json()["id"] == delivery["id"]
    problem(
        await client.post(
            f"/v1/webhooks/{made['id']}/deliveries/msg_nope/redeliver", headers=keys.auth()
        ),
        404,
    )
    problem(
        await client.get(f"/v1/webhooks/{made['id']}/deliveries", headers=keys.auth("bob")), 404
    )
    problem(await client.post(f"/v1/webhooks/{made['id']}/test", headers=keys.auth("bob")), 404)


async def test_a_deleted_webhook_is_gone_for_its_owner_only(
    client: httpx.AsyncClient, keys: Any
) -> None:
    made = (await client.post("/v1/webhooks", json=HOOK, headers=keys.auth())).json()
    problem(await client.delete(f"/v1/webhooks/{made['id']}", headers=keys.auth("bob")), 404)
    gone = await client.delete(f"/v1/webhooks/{made['id']}", headers=keys.auth())
    assert gone.status_code == 204
    problem(await client.delete(f"/v1/webhooks/{made['id']}", headers=keys.auth()), 404)
    assert (await client.get("/v1/webhooks", headers=keys.auth())).json()["webhooks"] == []
    problem(await client.delete("/v1/webhooks/\u00e9t\u00e9", headers=keys.auth()), 404)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"url": "http://127.0.0.1:9/h", "events": ["job.exploded"]}, "unknown event"),
        ({"url": "http://127.0.0.1:9/h", "events": []}, "at least one"),
        ({"url": "http://127.0.0.1:9/h", "events": ["job.failed", "job.failed"]}, "twice"),
        ({"url": "ftp://127.0.0.1/h", "events": ["job.failed"]}, "http or https"),
        ({"url": "http:///h", "events": ["job.failed"]}, "no host"),
        ({"url": "http://u:p@127.0.0.1/h", "events": ["job.failed"]}, "credentials"),
        ({"url": "http://127.0.0.1:99999/h", "events": ["job.failed"]}, "cannot be read"),
        ({"url": "http://127.0.0.2:9/h", "events": ["job.failed"]}, "loopback"),  # not listed
        ({"url": "http://localhost:9/h", "events": ["job.failed"]}, "loopback"),
        ({"url": "http://[::1]:9/h", "events": ["job.failed"]}, "loopback"),
        ({"url": "http://10.1.2.3/h", "events": ["job.failed"]}, "private"),
        ({"url": "http://169.254.169.254/latest", "events": ["job.failed"]}, "private"),
        ({"url": "http://nowhere.invalid/h", "events": ["job.failed"]}, "does not resolve"),
        ({"url": "http://x" + "y" * 2000, "events": ["job.failed"]}, "longer"),
    ],
)
async def test_bad_webhooks_are_refused_with_a_problem(
    client: httpx.AsyncClient, keys: Any, body: dict[str, Any], says: str
) -> None:
    refused = problem(await client.post("/v1/webhooks", json=body, headers=keys.auth()), 422)
    assert says in refused["detail"], refused


@pytest.mark.parametrize(
    "raw",
    [b"{", b"[]", b'{"url": 1, "events": ["job.failed"]}', b'{"url": "http://127.0.0.1/", "x": 1}'],
)
async def test_malformed_bodies_are_4xx_problems(
    client: httpx.AsyncClient, keys: Any, raw: bytes
) -> None:
    answered = await client.post("/v1/webhooks", content=raw, headers=keys.auth())
    assert 400 <= answered.status_code < 500
    problem(answered, answered.status_code)


async def test_webhooks_need_a_key(client: httpx.AsyncClient) -> None:
    problem(await client.post("/v1/webhooks", json=HOOK), 401)


async def test_an_owner_may_have_a_hundred_webhooks(client: httpx.AsyncClient, keys: Any) -> None:
    for _ in range(100):
        made = await client.post("/v1/webhooks", json=HOOK, headers=keys.auth())
        assert made.status_code == 201, made.text
    refused = problem(await client.post("/v1/webhooks", json=HOOK, headers=keys.auth()), 422)
    assert "100 webhooks at most" in refused["detail"]
    assert (
        await client.post("/v1/webhooks", json=HOOK, headers=keys.auth("bob"))
    ).status_code == 201


async def test_deliveries_are_listed_a_page_at_a_time_as_jobs_are(
    client: httpx.AsyncClient, keys: Any
) -> None:
    made = (await client.post("/v1/webhooks", json=HOOK, headers=keys.auth())).json()
    other = (await client.post("/v1/webhooks", json=HOOK, headers=keys.auth())).json()
    path = f"/v1/webhooks/{made['id']}/deliveries"
    sent = [
        (await client.post(f"/v1/webhooks/{made['id']}/test", headers=keys.auth())).json()["id"]
        for _ in range(5)
    ]
    elsewhere = await client.post(f"/v1/webhooks/{other['id']}/test", headers=keys.auth())
    pages, cursor = [], None
    while True:
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        page = await client.get(path, params=params, headers=keys.auth())
        assert page.status_code == 200, page.text
        pages.append([d["id"] for d in page.json()["deliveries"]])
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert pages == [sent[4:2:-1], sent[2:0:-1], sent[:1]]
    whole = (await client.get(path, headers=keys.auth())).json()
    assert [d["id"] for d in whole["deliveries"]] == sent[::-1] and whole["next_cursor"] is None
    first = (await client.get(path, params={"limit": "1"}, headers=keys.auth())).json()
    # A cursor of another webhook's delivery, a made-up one, a bad limit: 400.
    theirs = f"/v1/webhooks/{other['id']}/deliveries"
    problem(
        await client.get(theirs, params={"cursor": first["next_cursor"]}, headers=keys.auth()), 400
    )
    problem(await client.get(path, params={"cursor": "bm9wZQ"}, headers=keys.auth()), 400)
    for limit in ("0", "101", "1e1", ""):
        problem(await client.get(path, params={"limit": limit}, headers=keys.auth()), 400)
    assert elsewhere.status_code == 202
