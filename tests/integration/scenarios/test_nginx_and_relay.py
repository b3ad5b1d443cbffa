"""The careless nginx really retries a POST on the next gateway when the first is slow."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest

from scenarios.harness import Harness, free_port
from scenarios.nginx import SlowRelay, careless_config, nginx_binary, start_nginx

#: Answers every POST with its own name, so the test sees which upstream answered.
NAMED_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        print("POST", self.path, flush=True)
        self.send_response(201); self.send_header("content-length", str(len(sys.argv[2])))
        self.end_headers(); self.wfile.write(sys.argv[2].encode())
    do_GET = do_POST
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

NGINX = nginx_binary()


async def start_named(harness: Harness, name: str) -> int:
    port = free_port()
    await harness.spawn(name, [sys.executable, "-c", NAMED_SERVER, str(port), name], port, "/")
    return port


async def test_slow_relay_forwards_at_once_but_answers_late(tmp_path: Path) -> None:
    async with Harness(tmp_path / "w", tmp_path / "logs") as harness:
        port = await start_named(harness, "a")
        relay = SlowRelay(port, delay=0.6)
        await relay.start()
        try:
            async with httpx.AsyncClient() as client:
                response = await client.post(f"http://127.0.0.1:{relay.port}/v1/jobs", json={})
            assert response.text == "a"
            assert response.elapsed.total_seconds() >= 0.6
            assert relay.responses[0].status_line.endswith("201 Created")
        finally:
            await relay.close()


def test_careless_config_retries_non_idempotent_requests(tmp_path: Path) -> None:
    conf = careless_config(tmp_path, 8080, [1001, 1002], 1.0)
    assert "proxy_next_upstream error timeout non_idempotent;" in conf
    assert "server 127.0.0.1:1001 max_fails=0;" in conf
    assert "server 127.0.0.1:1002 max_fails=0 backup;" in conf
    assert "proxy_read_timeout 1000ms;" in conf


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
async def test_nginx_retries_a_timed_out_post_on_the_second_upstream(tmp_path: Path) -> None:
    assert NGINX is not None
    async with Harness(tmp_path / "w", tmp_path / "logs") as harness:
        port_a = await start_named(harness, "a")
        port_b = await start_named(harness, "b")
        relay = SlowRelay(port_a, delay=2.0)
        await relay.start()
        try:
            nginx, access_log = await start_nginx(harness, [relay.port, port_b], 0.5, NGINX)
            async with httpx.AsyncClient() as client:
                response = await client.post(f"{nginx.base_url}/v1/jobs", json={"x": 1})
            assert response.text == "b"
            # nginx logs a request after it sent the answer: under load the line can lag
            # the response, and stopping nginx first would lose it.
            for _ in range(100):  # at most 5 s
                if "POST /v1/jobs" in access_log.read_text():
                    break
                await asyncio.sleep(0.05)
        finally:
            await relay.close()
        nginx_pid = nginx.proc.pid if nginx.proc else 0
    log = access_log.read_text()
    assert f"upstream=127.0.0.1:{relay.port}, 127.0.0.1:{port_b}" in log
    assert "upstream_status=504, 201" in log
    # Both gateways saw the POST: exactly the duplicate the gateway must absorb.
    assert "POST /v1/jobs" in (tmp_path / "logs" / "a.log").read_text()
    assert "POST /v1/jobs" in (tmp_path / "logs" / "b.log").read_text()
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(nginx_pid, 0)
