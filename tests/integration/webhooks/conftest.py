"""Fixtures for the webhook tests: a loopback receiver that answers as a test scripts it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import NewJob

CONTRACT = "ticket-triage@1"


@dataclasses.dataclass
class Received:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes


@dataclasses.dataclass
class Receiver:
    """What was received, and the statuses to answer (then 204 once they run out)."""

    url: str = ""
    answers: list[int] = dataclasses.field(default_factory=list)
    got: list[Received] = dataclasses.field(default_factory=list)
    arrived: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.got.append(Received(scope["path"], headers, body))
        self.arrived.set()
        status = self.answers.pop(0) if self.answers else 204
        extra = [(b"location", b"/elsewhere")] if 300 <= status < 400 else []
        await send({"type": "http.response.start", "status": status, "headers": extra})
        await send({"type": "http.response.body", "body": b""})

    async def until(self, count: int, timeout: float = 30.0) -> Received:
        """Wait until ``count`` requests came; return the last (``timeout``: a bound on the
        wait, not a check of how long delivery takes)."""
        async with asyncio.timeout(timeout):
            while len(self.got) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.got[count - 1]


@contextlib.asynccontextmanager
async def serve_receiver(
    scheme: str = "http", certfile: str | None = None
) -> AsyncIterator[Receiver]:
    """Serve a receiver on a loopback port with uvicorn in this event loop (TLS with
    ``certfile``: a key and its chain in one PEM file)."""
    app = Receiver()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_config=None,
        access_log=False,
        ssl_certfile=certfile,
        ssl_keyfile=certfile,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("uvicorn stopped while starting")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        app.url = f"{scheme}://127.0.0.1:{port}/hook"
        yield app
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await task


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A receiver on a loopback port."""
    async with serve_receiver() as app:
        yield app


@pytest.fixture
def tls_receiver() -> Any:
    """Return ``serve_receiver`` (for a TLS receiver)."""
    return serve_receiver


def new_job(owner: str = "alice", key: str = "k1") -> NewJob:
    """Build what the service layer would hand the store."""
    input = {"text": "printer on fire"}
    return NewJob(
        owner_id=owner,
        idempotency_key=key,
        fingerprint=fingerprint(CONTRACT, input, None),
        contract=CONTRACT,
        provider="sim-openai",
        requested_provider=None,
        input=input,
    )


@pytest.fixture
def make_job() -> Any:
    return new_job
