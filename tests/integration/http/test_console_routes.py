"""What the operator console needs of the gateway: its files under a strict CSP, ``/v1/me``,
admin reads of any owner's job, and unknown attempts named with their owner and contract."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import httpx

from gateway.http.console import static_files
from gateway.store import SqlJobStore

ECHO = "echo@1"
LEASE = {"lease_ttl": 30.0, "deadline_s": {}, "default_deadline_s": 30.0}


class _Inline(HTMLParser):
    """Collect what a strict CSP would refuse: inline scripts, styles, handlers."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag == "script":
            self._in_script = True
            if not names.get("src"):
                self.refused.append("inline <script>")
            else:
                self.scripts.append(names["src"] or "")
        if tag == "style":
            self.refused.append("<style>")
        self.refused.extend(f"{name} on <{tag}>" for name in names if name == "style")
        self.refused.extend(f"{name} on <{tag}>" for name in names if name.startswith("on"))

    def handle_endtag(self, tag: str) -> None:
        self._in_script = tag != "script" and self._in_script

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.refused.append("script text")


async def test_the_console_page_and_its_modules_are_served_under_a_strict_csp(
    client: httpx.AsyncClient,
) -> None:
    page = await client.get("/console")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["form-action"] == "'none'"
    assert "unsafe" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "set-cookie" not in page.headers

    parser = _Inline()
    parser.feed(page.text)
    assert parser.refused == []
    assert parser.scripts == ["/console/static/app.js"]
    for name in static_files():
        r = await client.get(f"/console/static/{name}")
        assert r.status_code == 200, name
        assert r.headers["content-security-policy"] == policy
        assert r.headers["x-content-type-options"] == "nosniff"


async def test_the_console_scripts_never_parse_api_data_as_html() -> None:
    # Every value from the API becomes a text node (dom.js); none of these may appear.
    sinks = re.compile(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function"
    )
    scripts = {n: b.decode() for n, b in static_files().items() if n.endswith(".js")}
    assert {"app.js", "api.js", "dom.js", "jobs.js", "job.js", "unknown.js"} <= set(scripts)
    assert {n: sinks.findall(text) for n, text in scripts.items() if sinks.search(text)} == {}
    # The key is stored per tab and sent as a header only.
    assert "localStorage" not in "".join(scripts.values())
    assert "document.cookie" not in "".join(scripts.values())


async def test_a_console_path_that_is_not_one_of_its_files_is_not_found(
    client: httpx.AsyncClient,
) -> None:
    for path in (
        "/console/static/nope.js",
        "/console/static/..%2F..%2Fsettings.py",
        "/console/static/console.py",
        "/console/static/__init__.py",
    ):
        r = await client.get(path)
        # An encoded slash is refused before routing (400); the others are not files.
        assert r.status_code == (400 if "%2F" in path else 404), path
        assert r.headers["content-type"] == "application/problem+json"


async def test_me_says_whose_key_it_is_and_which_scopes_it_has(
    client: httpx.AsyncClient, keys: Any
) -> None:
    alice = await client.get("/v1/me", headers=keys.auth("alice"))
    assert alice.json() == {"owner": "alice", "scopes": ["jobs"]}
    admin = await client.get("/v1/me", headers=keys.auth("admin"))
    assert admin.json() == {"owner": "ops", "scopes": ["admin", "jobs"]}
    anonymous = await client.get("/v1/me")
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    wrong = await client.get("/v1/me", headers={"Authorization": "Bearer not-a-key"})
    assert wrong.status_code == 401


async def test_an_admin_reads_any_owners_job_and_its_events_and_an_owner_may_not(
    client: httpx.AsyncClient, keys: Any
) -> None:
    r = await client.post(
        "/v1/jobs", json={"contract": ECHO, "input": {"n": 1}}, headers=keys.job("alice")
    )
    job_id = r.json()["id"]
    assert (await client.get(f"/v1/jobs/{job_id}", headers=keys.auth("admin"))).status_code == 404

    job = await client.get(f"/v1/admin/jobs/{job_id}", headers=keys.auth("admin"))
    assert job.status_code == 200
    assert (job.json()["id"], job.json()["owner"]) == (job_id, "alice")
    events = await client.get(f"/v1/admin/jobs/{job_id}/events", headers=keys.auth("admin"))
    assert [e["kind"] for e in events.json()["events"]][:2] == ["job_created", "attempt_created"]

    for path in (f"/v1/admin/jobs/{job_id}", f"/v1/admin/jobs/{job_id}/events"):
        refused = await client.get(path, headers=keys.auth("alice"))
        assert refused.status_code == 403, path
        assert "attempts" not in refused.text
    missing = await client.get("/v1/admin/jobs/job_nope", headers=keys.auth("admin"))
    assert missing.status_code == 404


async def test_unknown_attempts_are_listed_with_their_jobs_owner_and_contract(
    client: httpx.AsyncClient, keys: Any, store: SqlJobStore
) -> None:
    for who, key in (("alice", '"a-1"'), ("bob", '"b-1"')):
        r = await client.post(
            "/v1/jobs", json={"contract": ECHO, "input": {"who": who}}, headers=keys.job(who, key)
        )
        assert r.status_code == 201
        claimed = await store.claim_next_attempt("w1", **LEASE)
        assert claimed is not None
        await store.mark_unknown(claimed.attempt.id, {"reason": "timeout"})

    listed = await client.get("/v1/admin/attempts?state=unknown", headers=keys.auth("admin"))
    rows = listed.json()["attempts"]
    assert sorted((a["owner"], a["contract"]) for a in rows) == [("alice", ECHO), ("bob", ECHO)]
    assert all(a["lease_owner"] == "w1" and a["deadline_at"] for a in rows)

    resolved = await client.post(
        f"/v1/admin/attempts/{rows[0]['id']}/resolve",
        json={"outcome": "cancelled", "note": "n"},
        headers=keys.auth("admin"),
    )
    assert resolved.json()["attempt"]["owner"] == rows[0]["owner"]


async def test_the_root_leads_to_the_console(client: httpx.AsyncClient) -> None:
    """``serve`` prints the gateway's address; that address was a bare 404 (issue 47, 7)."""
    root = await client.get("/")
    assert root.status_code == 302 and root.headers["location"] == "/console"
    assert (await client.get("/", follow_redirects=True)).status_code == 200
