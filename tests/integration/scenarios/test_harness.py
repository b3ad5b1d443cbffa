"""The harness starts real child processes, waits for them, and leaves no orphans."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx
import pytest

from scenarios.harness import Harness, HarnessError, free_port

#: A tiny HTTP server that answers 200 on every path once ``delay`` seconds have passed.
SERVER = """
import http.server, sys, time
time.sleep(float(sys.argv[2]))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): print("request", self.path, flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def alive(pid: int) -> bool:
    """Say whether a process with ``pid`` exists (and is not a zombie we reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def start_server(harness: Harness, name: str, delay: float = 0.0) -> tuple[int, int]:
    port = free_port()
    proc = await harness.spawn(
        name, [sys.executable, "-c", SERVER, str(port), str(delay)], port, "/ready"
    )
    assert proc.proc is not None
    return port, proc.proc.pid


async def test_spawned_process_is_ready_and_logs_to_its_file(tmp_path: Path) -> None:
    async with Harness(tmp_path / "w", tmp_path / "logs") as harness:
        port, _ = await start_server(harness, "srv", delay=0.3)
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"http://127.0.0.1:{port}/x")).text == "ok"
    log = (tmp_path / "logs" / "srv.log").read_text()
    assert "request /ready" in log and "request /x" in log


async def test_close_kills_every_process_so_none_is_orphaned(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "w", tmp_path / "logs")
    pids = [(await start_server(harness, f"srv{i}"))[1] for i in range(2)]
    await harness.close()
    assert not any(alive(pid) for pid in pids)


async def test_a_process_that_exits_early_is_an_error_with_its_log(tmp_path: Path) -> None:
    async with Harness(tmp_path / "w", tmp_path / "logs") as harness:
        argv = [sys.executable, "-c", "import sys; print('boom: no config'); sys.exit(3)"]
        with pytest.raises(HarnessError, match=r"(?s)exited with 3 .*boom: no config"):
            await harness.spawn("bad", argv, free_port(), "/")


async def test_a_process_that_never_answers_times_out(tmp_path: Path) -> None:
    async with Harness(tmp_path / "w", tmp_path / "logs", ready_timeout=0.5) as harness:
        argv = [sys.executable, "-c", "import time; time.sleep(30)"]
        with pytest.raises(HarnessError, match="did not answer"):
            await asyncio.wait_for(harness.spawn("mute", argv, free_port(), "/"), 10)
        pid = harness.processes[0].proc.pid  # type: ignore[union-attr]
    assert not alive(pid)


async def test_crash_then_restart_serves_again_on_the_same_port(tmp_path: Path) -> None:
    async with Harness(tmp_path / "w", tmp_path / "logs") as harness:
        port, pid = await start_server(harness, "srv")
        proc = harness.processes[0]
        await proc.crash()
        assert not alive(pid) and not proc.running
        await harness.restart(proc)
        assert proc.running and proc.port == port
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"http://127.0.0.1:{port}/again")).status_code == 200
    assert "SIGKILL by the scenario" in (tmp_path / "logs" / "srv.log").read_text()


async def test_run_cli_returns_exit_code_and_output(tmp_path: Path) -> None:
    script = tmp_path / "fake-onejob"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nprint('key-' + sys.argv[3])\n"
        "sys.exit(0 if sys.argv[1] == 'keys' else 4)\n"
    )
    script.chmod(0o755)
    async with Harness(tmp_path / "w", tmp_path / "logs", [str(script)]) as harness:
        assert await harness.create_key("sqlite:///x", "alice") == "key-alice"
        code, out, _ = await harness.run_cli("other", "a", "b")
        assert code == 4 and out.strip() == "key-b"
    assert "onejob other a b -> 4" in (tmp_path / "logs" / "cli.log").read_text()
