"""A cut on the veth is silent for PostgreSQL clients in the namespace, and heals at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url

from scenarios.harness import Harness, free_port
from scenarios.netcommands import run, sweep_stale
from scenarios.netpartition import DATABASE, PROVIDER, NetPartition, missing_prerequisite

pytestmark = pytest.mark.slow

PG_URL = os.environ.get(
    "ONEJOB_TEST_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
REQUIRE = os.environ.get("ONEJOB_REQUIRE_POSTGRES") == "1"
TIMEOUT = 2.0  # seconds, the client-side deadline of every probe during the cut
REPLY_TIMEOUT = 30.0  # seconds the agent may take to answer one command

#: Runs inside the namespace: holds asyncpg connections and answers one JSON line per command.
AGENT = r"""
import asyncio, json, socket, sys, time
import asyncpg

conns, flights, closed_at = {}, {}, {}

def tune(conn, user_timeout_ms, keepalive):
    sock = conn._transport.get_extra_info("socket")
    if user_timeout_ms:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, user_timeout_ms)
    if keepalive:
        idle, interval, count = keepalive
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)

async def step(cmd):
    op, name, timeout = cmd["op"], cmd.get("name", "main"), cmd.get("timeout", 2.0)
    if op == "connect":
        conn = await asyncpg.connect(cmd["dsn"], timeout=timeout)
        tune(conn, cmd.get("user_timeout_ms"), cmd.get("keepalive"))
        conn.add_termination_listener(lambda _c: closed_at.setdefault(name, time.monotonic()))
        conns[name] = conn
        return None
    if op == "send":
        flights[name] = asyncio.ensure_future(conns[name].fetchval("SELECT 1"))
        return None
    if op == "wait":
        done, _ = await asyncio.wait({flights[name]}, timeout=timeout)
        if not done:
            raise TimeoutError("still waiting")
        return flights.pop(name).result()
    if op == "closed":
        deadline = time.monotonic() + timeout
        while name not in closed_at and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return closed_at.get(name)
    raise ValueError(op)

async def main():
    loop = asyncio.get_running_loop()
    print(json.dumps({"ready": True}), flush=True)
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        cmd, started = json.loads(line), time.monotonic()
        try:
            reply = {"ok": True, "result": await step(cmd)}
        except BaseException as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        reply["elapsed"] = round(time.monotonic() - started, 3)
        print(json.dumps(reply), flush=True)

asyncio.run(main())
"""


def _require(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"{reason} (ONEJOB_REQUIRE_POSTGRES=1)")
    pytest.skip(reason)


async def _postgres_or_skip() -> None:
    dsn = make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        conn = await asyncpg.connect(dsn, timeout=5)
        await conn.close()
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        _require(f"PostgreSQL unreachable at {PG_URL}: {exc}")


class Agent:
    """Drive the agent inside the namespace, one command and one reply at a time."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def __call__(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), REPLY_TIMEOUT)
        assert line, "the agent died"
        reply: dict[str, Any] = json.loads(line)
        return reply


@pytest.fixture
def root_with_tools() -> None:
    why = missing_prerequisite()
    if why:
        _require(why)


@pytest.fixture
async def net(root_with_tools: None) -> AsyncIterator[NetPartition]:
    await _postgres_or_skip()
    partition = await NetPartition.open()
    try:
        yield partition
    finally:
        await partition.close()
    assert await partition.leftovers() == []


@pytest.fixture
async def agent(net: NetPartition, tmp_path: Path) -> AsyncIterator[Agent]:
    log = os.open(tmp_path / "agent.log", os.O_WRONLY | os.O_CREAT, 0o644)
    proc = await asyncio.create_subprocess_exec(
        *net.command([sys.executable, "-c", AGENT]),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=log,
        start_new_session=True,
    )
    os.close(log)
    try:
        assert proc.stdout is not None
        ready = await asyncio.wait_for(proc.stdout.readline(), REPLY_TIMEOUT)
        assert json.loads(ready) == {"ready": True}
        yield Agent(proc)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


def _inside_dsn(net: NetPartition) -> str:
    fwd = net.forwards[DATABASE]
    url = make_url(PG_URL).set(drivername="postgresql", host=fwd.host, port=fwd.port)
    return url.render_as_string(hide_password=False)


async def test_cut_is_silent_and_heal_lets_new_connections_in_at_once(
    net: NetPartition, agent: Agent, record_property: Any
) -> None:
    target = make_url(PG_URL)
    await net.forward(DATABASE, target.port or 5432, target.host or "127.0.0.1")
    dsn = _inside_dsn(net)
    assert (await agent("connect", dsn=dsn, timeout=5))["ok"]
    await agent("send")
    assert await agent("wait") == {"ok": True, "result": 1, "elapsed": pytest.approx(0, abs=0.5)}
    assert (await agent("connect", name="user-timeout", dsn=dsn, user_timeout_ms=2000))["ok"]
    assert (await agent("connect", name="keepalive", dsn=dsn, keepalive=[1, 1, 2]))["ok"]
    assert (await agent("connect", name="idle", dsn=dsn))["ok"]

    await net.cut(DATABASE)
    cut_at = time.monotonic()
    await agent("send")
    hung = await agent("wait", timeout=TIMEOUT)
    assert hung["ok"] is False and hung["error"] == "TimeoutError: still waiting"
    assert hung["elapsed"] == pytest.approx(TIMEOUT, abs=0.3)
    fresh = await agent("connect", name="during-cut", dsn=dsn, timeout=TIMEOUT)
    assert fresh["ok"] is False and fresh["error"].startswith("TimeoutError")
    assert fresh["elapsed"] == pytest.approx(TIMEOUT, abs=0.3)
    # TCP_USER_TIMEOUT turns unacknowledged data into an error; keepalive finds an idle peer dead.
    await agent("send", name="user-timeout")
    bounded = await agent("wait", name="user-timeout", timeout=5)
    assert bounded["ok"] is False and bounded["elapsed"] < 3.0, bounded
    closed = await agent("closed", name="keepalive", timeout=5)
    assert closed["result"] is not None, closed
    keepalive_dead_after = closed["result"] - cut_at  # CLOCK_MONOTONIC is the machine's
    await asyncio.sleep(max(0.0, 8.0 - (time.monotonic() - cut_at)))

    await net.heal()
    healed_at = time.monotonic()
    fresh = await agent("connect", name="after-heal", dsn=dsn, timeout=TIMEOUT)
    assert fresh["ok"] and fresh["elapsed"] < 1.0, fresh
    recovered = await agent("wait", timeout=20)
    assert recovered["ok"] and recovered["result"] == 1, recovered
    stuck_for = time.monotonic() - healed_at
    await agent("send", name="idle")
    assert (await agent("wait", name="idle"))["result"] == 1

    await net.add_latency(300, DATABASE)
    await agent("send", name="idle")
    slow = await agent("wait", name="idle")
    assert slow["result"] == 1 and 0.3 <= slow["elapsed"] < 1.0, slow
    await net.clear_latency()
    await agent("send", name="idle")
    assert (await agent("wait", name="idle"))["elapsed"] < 0.3

    record_property("new_connection_after_heal_s", fresh["elapsed"])
    record_property("unacked_query_recovered_after_heal_s", round(stuck_for, 3))
    record_property("user_timeout_error_after_s", bounded["elapsed"])
    record_property("keepalive_idle_dead_after_s", round(keepalive_dead_after, 3))
    print(
        f"new connection after heal {fresh['elapsed']} s; unacked query back {stuck_for:.3f} s "
        f"after heal (cut 8 s); TCP_USER_TIMEOUT 2 s error after {bounded['elapsed']} s; "
        f"keepalive 1+1x2 closed idle connection {keepalive_dead_after:.3f} s into the cut"
    )


#: Prints the seconds a TCP connect to each ``host:port`` argument took, or "timeout".
CONNECT_PROBE = r"""
import socket, sys, time
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    started = time.monotonic()
    try:
        socket.create_connection((host, int(port)), 1.5).close()
        print(round(time.monotonic() - started, 3))
    except TimeoutError:
        print("timeout")
"""

SERVER = """
import http.server, sys
http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), http.server.SimpleHTTPRequestHandler).serve_forever()
"""  # noqa: E501


IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("deaf", flush=True)
time.sleep(600)
"""


async def _connect_times(net: NetPartition, *addresses: str) -> list[str]:
    argv = net.command([sys.executable, "-c", CONNECT_PROBE, *addresses])
    probe = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(probe.communicate(), 10)
    return out.decode().split()


async def _timed(net: NetPartition, code: str) -> float:
    """Return the seconds ``code`` takes in a Python inside the namespace (start-up excluded)."""
    timed = f"import time; t = time.monotonic(); {code}; print(time.monotonic() - t)"
    argv = net.command([sys.executable, "-c", timed])
    probe = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(probe.communicate(), 10)
    return float(out)


async def test_cut_of_one_target_leaves_the_other_and_the_clients_path_open(
    net: NetPartition, tmp_path: Path
) -> None:
    async with Harness(tmp_path / "w", tmp_path / "logs") as harness:
        port = free_port()
        await harness.spawn(
            "sim", [sys.executable, "-c", SERVER, "127.0.0.1", str(port)], port, "/"
        )
        argv = [sys.executable, "-c", SERVER, "0.0.0.0", "8080"]
        inside = await net.spawn(harness, "inside", argv, 8080, "/")
        assert inside.base_url == f"http://{net.inside_address}:8080"
        provider = await net.forward(PROVIDER, port)
        database = await net.forward(DATABASE, 5432)
        assert provider.port == port and provider.host == net.host_address

        await net.cut(DATABASE)
        assert net.cut_targets == {DATABASE}
        cut_db, open_provider = await _connect_times(net, database.address, provider.address)
        assert cut_db == "timeout" and float(open_provider) < 1.0
        async with httpx.AsyncClient(timeout=2) as client:
            assert (await client.get(inside.base_url)).status_code == 200
        await net.heal()

        await net.add_latency(300, PROVIDER)
        assert net.latency == (300, frozenset({PROVIDER}))
        fetch = f"import urllib.request as u; u.urlopen('http://{provider.address}/', timeout=5)"
        slow = await _timed(net, fetch)
        await net.add_latency(300, DATABASE)
        fast = await _timed(net, fetch)
        assert slow >= 0.3 and fast < 0.3, (slow, fast)

        stray = await asyncio.create_subprocess_exec(*net.command(["sleep", "600"]))
        deaf = await asyncio.create_subprocess_exec(
            *net.command([sys.executable, "-c", IGNORES_SIGTERM]), stdout=asyncio.subprocess.PIPE
        )
        assert deaf.stdout is not None
        assert await asyncio.wait_for(deaf.stdout.readline(), 10) == b"deaf\n"
        assert {stray.pid, deaf.pid} <= set(await net.kill_inside(grace=0.5))
        assert await asyncio.wait_for(stray.wait(), 5) == -signal.SIGTERM
        assert await asyncio.wait_for(deaf.wait(), 5) == -signal.SIGKILL
        await net.close()
    assert provider.accepted >= 3


#: Builds a partition with a cut and a process inside, prints its tag, then waits to be killed.
ABANDONED = """
import asyncio, subprocess
from scenarios.netpartition import DATABASE, NetPartition

async def main():
    net = await NetPartition.open()
    await net.forward(DATABASE, 5432)
    await net.cut()
    subprocess.Popen(net.command(["sleep", "600"]), stdout=subprocess.DEVNULL)  # not our pipe
    print(net.tag, flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_a_run_killed_before_close_is_swept_by_the_next(root_with_tools: None) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", ABANDONED, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        tag = (await asyncio.wait_for(child.stdout.readline(), 30)).decode().strip()
        assert tag.startswith(f"onejob-{child.pid}-")
        inside: list[str] = []
        for _ in range(100):  # the sleep joins the namespace right after the tag is printed
            if inside := (await run("ip", "netns", "pids", tag)).split():
                break
            await asyncio.sleep(0.05)
        assert len(inside) == 1
    finally:
        child.kill()
        await child.wait()

    # Under pytest -n another test's NetPartition.open() may sweep it first: either way it goes.
    await sweep_stale()

    assert tag not in await run("ip", "netns", "list")
    assert tag not in await run("ip", "-o", "link", "show")
    assert tag not in await run("iptables-save")
    assert _gone(int(inside[0]))


def _gone(pid: int) -> bool:
    """Say whether ``pid`` exited (a zombie whose new parent has not reaped it yet counts)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
