"""Run the gateway's HTTP server: one process, or ``workers`` processes on one socket.

Python runs one core per process, so a host serves with several worker processes
(``onejob serve --workers N``; on PostgreSQL sized to the CPUs by default) on one database:
each has its own dispatcher, and the database decides every race between them as between
hosts. The parent migrates once, starts the bundled simulator once (its own process),
gives the workers a shared metrics directory, binds the socket, and supervises the
workers (uvicorn's supervisor: it restarts a worker that dies).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import glob
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from typing import Any

from gateway.database_url import redacted
from gateway.http.edge import edge_protocol
from gateway.metrics import MULTIPROC_DIR_ENV
from gateway.settings import Settings

log = logging.getLogger("onejob.server")

SETTINGS_ENV = "ONEJOB_WORKER_SETTINGS"  # the parent's settings as JSON, for the workers
SIMULATOR_READY_TIMEOUT = 30.0  # seconds
#: The youngest generation's allocation threshold once the app has started (CPython's
#: default is 700). A sync job allocates thousands of objects, nearly all freed by
#: reference counting; at 700 the collector ran several times per job and found little.
GC_GEN0_THRESHOLD = 2_000


def run_event_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop where it is installed (the server's hot loop), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Return the uvicorn options every gateway process uses."""
    return {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,  # gateway.logging writes JSON lines
        "access_log": False,  # our middleware writes one access line per request
        "lifespan": "on",
        # httptools (llhttp) refuses CL+TE; EdgeProtocol adds header deadline and limits.
        "http": edge_protocol(settings.shortcuts.write_batching),
    }


async def serve(settings: Settings) -> None:
    """Migrate, then serve in this process (with the simulator when configured)."""
    import uvicorn

    from gateway.app import create_app
    from gateway.store import upgrade_database
    from gateway.store.replication import check_synchronous_standby

    await upgrade_database(settings.database_url)
    await check_synchronous_standby(settings.database_url, settings.database)
    async with _simulator_in_process(settings):
        app = create_app(settings)
        app.on_startup.append(tune_gc_after_startup)
        config = uvicorn.Config(app, **uvicorn_options(settings))
        _log_serving(settings)
        await uvicorn.Server(config).serve()


def serve_workers(settings: Settings, *, simulator_argv: Sequence[str]) -> None:
    """Migrate once, start the simulator once, then run ``settings.workers`` processes.

    ``simulator_argv`` runs ``onejob sim serve`` (the command line's), when the settings
    enable the bundled simulator.
    """
    import uvicorn

    from gateway.store import upgrade_database
    from gateway.store.replication import check_synchronous_standby

    asyncio.run(upgrade_database(settings.database_url))
    asyncio.run(check_synchronous_standby(settings.database_url, settings.database))
    os.environ[SETTINGS_ENV] = settings.model_dump_json()
    with _simulator_process(settings, simulator_argv), _shared_metrics_dir():
        _log_serving(settings)
        uvicorn.run(
            "gateway.server:worker_app",
            factory=True,
            workers=settings.workers,
            loop="auto",
            **uvicorn_options(settings),
        )


def worker_app() -> Any:
    """Build one worker's app from the parent's settings (uvicorn calls this per worker)."""
    from gateway.app import create_app
    from gateway.logging import configure_logging

    settings = Settings.model_validate_json(os.environ[SETTINGS_ENV])
    # Each process holds its own leases: a worker id names one process. ``workers``
    # stays the server's count: the workers share the database's connection budget.
    settings = settings.model_copy(update={"instance_id": f"{settings.instance_id}-{os.getpid()}"})
    configure_logging(settings.log_level)
    app = create_app(settings)
    app.on_startup.append(tune_gc_after_startup)
    return app


def tune_gc_after_startup() -> None:
    """Freeze what startup built and let the young generation grow before a collection.

    Run once the app has started (its last startup hook): the contracts, compiled
    validators, routes and pools live as long as the process, so ``gc.freeze`` moves
    them out of every later collection's scan. A serving process only, never a test's
    app: frozen objects are never freed.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def _log_serving(settings: Settings) -> None:
    from gateway.bootstrap import warn_of_missing_api_keys

    warn_of_missing_api_keys(settings)
    log.info(
        "serving onejob",
        extra={
            "url": f"http://{settings.host}:{settings.port}",
            "database": redacted(settings.database_url),
            "workers": settings.workers,
        },
    )


@contextlib.asynccontextmanager
async def _simulator_in_process(settings: Settings) -> AsyncIterator[None]:
    if not settings.simulator.enabled:
        yield
        return
    from contracts.loader import load_catalog
    from providers.simulator.server import run_simulator

    sim_cfg = settings.simulator
    async with run_simulator(port=sim_cfg.port, host=sim_cfg.host, catalog=load_catalog) as sim:
        log.info("bundled simulator listening", extra={"url": sim.base_url})
        yield


@contextlib.contextmanager
def _shared_metrics_dir() -> Iterator[None]:
    """Give the workers one fresh directory to add up their metrics in (gateway.metrics).

    A directory the operator names in ``PROMETHEUS_MULTIPROC_DIR`` is used and kept, but
    emptied of the last run's files first (prometheus_client would add them in, and count
    a reused PID's in-flight attempts). Ours is a new one, removed at the end.
    """
    named = os.environ.get(MULTIPROC_DIR_ENV)
    if named:
        os.makedirs(named, exist_ok=True)
        for stale in glob.glob(os.path.join(named, "*.db")):
            os.remove(stale)
        yield
        return
    path = tempfile.mkdtemp(prefix="onejob-metrics-")
    os.environ[MULTIPROC_DIR_ENV] = path  # inherited by the spawned workers
    try:
        yield
    finally:
        os.environ.pop(MULTIPROC_DIR_ENV, None)
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _simulator_process(settings: Settings, simulator_argv: Sequence[str]) -> Iterator[None]:
    """Run the bundled simulator as one process beside the workers (not one per worker)."""
    if not settings.simulator.enabled:
        yield
        return
    sim = settings.simulator
    command = [*simulator_argv, "--host", sim.host, "--port", str(sim.port)]
    proc = subprocess.Popen([*command, "--log-level", "warning"])
    try:
        _wait_for_port(sim.host, sim.port, proc)
        log.info("bundled simulator listening", extra={"url": f"http://{sim.host}:{sim.port}"})
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for_port(host: str, port: int, proc: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + SIMULATOR_READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the bundled simulator exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        time.sleep(0.05)
    raise SystemExit(f"the bundled simulator did not listen on {host}:{port}")
