"""Run the simulator on a real loopback socket: in-process for tests, or as a process."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import uvicorn

from providers.registry import plugin_for
from providers.simulator.app import SimulatorApp, create_sim_app
from providers.simulator.asgi import DropConnection

STARTUP_TIMEOUT = 10.0  # seconds to wait for the socket to listen
SHUTDOWN_GRACE = 1.0  # seconds open requests get before they are cancelled


#: What ``serve`` prints on stdout once it listens (a parent process waits for it).
LISTENING = "onejob simulator listening on "


def port_refusal(host: str, port: int) -> str | None:
    """Return why ``host:port`` cannot be listened on now (taken, not ours), or None.

    Bound as uvicorn binds (``SO_REUSEADDR``), so a port another process listens on is
    refused while one in ``TIME_WAIT`` is not. Port 0 (any free port) is never refused.
    """
    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


class _HideDeliberateDrops(logging.Filter):
    """Keep the connections the simulator drops on purpose out of the error log."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, DropConnection)


_FILTER = _HideDeliberateDrops()


def _quiet_deliberate_drops() -> None:
    logger = logging.getLogger("uvicorn.error")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)


class _Server(uvicorn.Server):
    """A uvicorn server that leaves process signal handlers to its owner."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Install nothing: ``serve`` handles SIGINT/SIGTERM, tests need none."""
        yield


IDLE_CONNECTION_S = 75  # seconds an idle client connection stays open


@dataclasses.dataclass(slots=True)
class RunningSimulator:
    """A simulator serving on a loopback socket."""

    app: SimulatorApp
    host: str
    port: int

    @property
    def base_url(self) -> str:
        """Return ``http://host:port`` (add ``/p/{provider}`` and the API path)."""
        return f"http://{self.host}:{self.port}"

    def provider_url(self, provider: str, protocol: str) -> str:
        """Return the ``base_url`` a ``ProviderConfig`` of ``protocol`` should use."""
        root = f"{self.base_url}/p/{provider}"
        return f"{root}{plugin_for(protocol).base_path}"

    def calls(self, provider: str | None = None) -> list[dict[str, Any]]:
        """Return the call log (as ``GET /_sim/calls`` would)."""
        return [c.as_json() for c in self.app.calls if provider in (None, c.provider)]


def _config(app: SimulatorApp, host: str, port: int, log_level: str) -> uvicorn.Config:
    # uvicorn's default config replaces the handlers of its loggers (they are shared with
    # a gateway in the same process): keep the host's logging once it has configured some.
    configured = bool(logging.getLogger().handlers)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None if configured else uvicorn.config.LOGGING_CONFIG,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=int(SHUTDOWN_GRACE) or 1,
        # Keep idle connections longer than a client keeps them (httpx: 5 s; the gateway's
        # pool: 30 s), as providers do: uvicorn's 5 s default closed a socket at the moment
        # an httpx client reused it, and that call failed with ReadError.
        timeout_keep_alive=IDLE_CONNECTION_S,
    )


async def _started(server: uvicorn.Server, task: asyncio.Task[None]) -> None:
    """Return once ``server`` listens; raise if it stopped instead."""
    # uvicorn exposes only a flag, so poll it.
    while not server.started:
        if task.done():
            task.result()  # raise the startup error, if any
            raise RuntimeError("the simulator stopped while starting")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def run_simulator(
    port: int = 0,
    host: str = "127.0.0.1",
    profiles: dict[str, str] | None = None,
    default_profile: str = "faithful",
    catalog: Any = None,
    log_level: str = "warning",
    monotonic: Callable[[], float] = time.monotonic,
) -> AsyncIterator[RunningSimulator]:
    """Serve a simulator on ``host:port`` (0: any free port) for the duration of the block.

    ``catalog`` maps ``NAME@V`` to objects with ``simulate``/``simulate_sloppy``, or is a
    function returning such a mapping (called once, at startup); without one, every
    contract is unknown. ``contracts.loader.load_catalog`` loads the bundled catalog.
    ``monotonic`` is the clock the rate limits and outages run on (a test's, to hold time).
    """
    _quiet_deliberate_drops()
    app = create_sim_app(profiles, default_profile, catalog, monotonic)
    server = _Server(_config(app, host, port, log_level))
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT):
            await _started(server, task)
        bound = server.servers[0].sockets[0].getsockname()[1]
        yield RunningSimulator(app=app, host=host, port=bound)
    finally:
        app.close()
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


def serve(
    host: str,
    port: int,
    profiles: dict[str, str],
    default_profile: str,
    log_level: str = "info",
    catalog: Any = None,
) -> None:
    """Serve a simulator in the foreground until interrupted (``catalog``: as ``run_simulator``)."""
    _quiet_deliberate_drops()
    app = create_sim_app(profiles, default_profile, catalog)
    server = _Server(_config(app, host, port, log_level))

    def stop() -> None:
        app.close()  # release held requests so shutdown is prompt
        server.should_exit = True

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        task = asyncio.create_task(server.serve())
        await _started(server, task)
        bound = server.servers[0].sockets[0].getsockname()[1]
        print(f"{LISTENING}http://{host}:{bound}", flush=True)
        await task

    asyncio.run(main())
