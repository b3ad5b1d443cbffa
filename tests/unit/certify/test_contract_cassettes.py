"""Cassette scrubbing and request matching, without sockets."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from certify.cassettes import (
    CURRENT_TAPE,
    CassetteLibrary,
    CassetteMismatch,
    CassetteMissing,
    RecordingTransport,
    Tape,
    first_difference,
    write_cassette,
)

SECRET = "sk-test-9f8e7d6c5b4a"


async def record_one(tmp_path: Path, request: httpx.Request) -> Path:
    def upstream(req: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            json={"echo": SECRET, "ok": True},
            headers={"x-request-id": "req_1", "set-cookie": "s=1"},
        )

    tape = Tape("prov", "c@1", "case-1")
    CURRENT_TAPE.set(tape)
    transport = RecordingTransport(httpx.MockTransport(upstream), secrets=[SECRET])
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.send(request)
    assert response.json()["echo"] == SECRET  # the caller still sees the real answer
    return write_cassette(tmp_path, tape, {"recorded_from": "test"})


async def test_recording_drops_auth_headers_key_params_and_secret_values(tmp_path: Path) -> None:
    request = httpx.Request(
        "POST",
        f"http://h/v1beta/models/m:generateContent?key={SECRET}&alt=json",
        headers={
            "authorization": f"Bearer {SECRET}",
            "x-api-key": SECRET,
            "x-goog-api-key": SECRET,
        },
        json={"prompt": f"my key is {SECRET}"},
    )
    path = await record_one(tmp_path, request)
    text = path.read_text()
    assert SECRET not in text
    assert "authorization" not in text.lower() and "x-api-key" not in text
    doc = json.loads(text)
    exchange = doc["interactions"][0]
    assert exchange["request"]["path"] == "/v1beta/models/m:generateContent?alt=json"
    assert exchange["request"]["body"] == {"prompt": "my key is <redacted>"}
    assert "set-cookie" not in exchange["response"]["headers"]


async def test_replay_serves_the_recording_only_for_the_same_request(tmp_path: Path) -> None:
    request = httpx.Request("POST", "http://a/p/x/v1/chat", json={"n": 1})
    await record_one(tmp_path, request)
    library = CassetteLibrary(tmp_path)
    CURRENT_TAPE.set(Tape("prov", "c@1", "case-1"))
    async with library.client() as client:
        ok = await client.post("http://elsewhere:9/p/x/v1/chat", json={"n": 1})
        assert ok.json() == {"echo": "<redacted>", "ok": True}
        with pytest.raises(CassetteMismatch, match=r"body does not match the recording at /n"):
            await client.post("http://a/p/x/v1/chat", json={"n": 2})
        with pytest.raises(CassetteMismatch, match="does not match the recorded POST"):
            await client.post("http://a/p/y/v1/chat", json={"n": 1})


async def test_replay_without_a_cassette_fails_loudly(tmp_path: Path) -> None:
    CURRENT_TAPE.set(Tape("prov", "c@1", "never-recorded"))
    async with CassetteLibrary(tmp_path).client() as client:
        with pytest.raises(CassetteMissing, match="no cassette for prov/c@1/never-recorded"):
            await client.post("http://a/x", json={})


def test_first_difference_names_the_path() -> None:
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == (
        "/a/1/b: recorded 2, sent 3"
    )
    assert first_difference({"a": 1}, {"a": 1, "z": 0}) == "/z: sent but not recorded"
    assert first_difference([1], [1, 2]) == "(body): 1 item(s) recorded, 2 sent"
    assert first_difference({"a": 1}, {"a": 1}) is None
