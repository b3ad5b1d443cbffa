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
import signal
import subprocess
import tempfile
import threading
import time
import types
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from typing import Any

import uvicorn

from gateway.database_url import redacted
from gateway.http.edge import edge_protocol
from gateway.metrics import MULTIPROC_DIR_ENV
from gateway.notify import ChangeHub
from gateway.settings import Settings

log = logging.getLogger("onejob.server")

SETTINGS_ENV = "ONEJOB_WORKER_SETTINGS"  # the parent's settings as JSON, for the workers
SIMULATOR_READY_TIMEOUT = 30.0  # seconds
#: The youngest generation's allocation threshold once the app has started (CPython's
#: default is 700). A sync job allocates thousands of objects, nearly all freed by
#: reference counting; at 700 the collector ran several times per job and found little.
GC_GEN0_THRESHOLD = 2_000
SIMULATOR_STOP_TIMEOUT = 10.0  # seconds the simulator process gets to stop before a kill
#: What to do when the bundled simulator cannot listen.
SIM_PORT_FIX = (
    "set ONEJOB_SIM_PORT (or [simulator] port in the config file) to a free port, "
    "or stop what listens there"
)


class CannotListen(RuntimeError):
    """A port ``serve`` needs is taken: its message names the setting to change."""


class SimulatorNotStarted(CannotListen):
    """The bundled simulator could not listen (its port is taken, most often)."""


def check_ports(settings: Settings) -> None:
    """Raise ``CannotListen`` when the gateway's port or its simulator's is taken (checked
    before migrating, and again as the simulator starts)."""
    from providers.simulator.server import port_refusal

    if refusal := port_refusal(settings.host, settings.port):
        raise CannotListen(
            f"cannot listen on {settings.host}:{settings.port} ({refusal}): choose another "
            "--port (or ONEJOB_PORT), or stop what listens there"
        )
    if settings.simulator.enabled:
        check_simulator_port(settings.simulator.host, settings.simulator.port)


class GatewayServer(uvicorn.Server):
    """uvicorn's server, which ends waits and streams when told to stop, and does not
    raise the signal that stopped it once it has.

    uvicorn waits for every request in flight before the app's shutdown: a ``Prefer:
    wait`` (60 s) or an event stream (300 s) would hold it, so the stop closes ``hub``
    (they answer at once). And it raises a captured SIGINT again after its graceful
    shutdown, to end the process the default way; here that ``KeyboardInterrupt`` would
    cut short what stops after the server (the bundled simulator, the last), with a
    traceback in the log. uvicorn offers neither as API: ``handle_exit`` and
    ``capture_signals`` are declared in ``gateway/shortcuts.py`` (``HARDENING``).
    """

    def __init__(self, config: uvicorn.Config, hub: ChangeHub) -> None:
        super().__init__(config)
        self._hub = hub
        self._loop = asyncio.get_running_loop()

    def handle_exit(self, sig: int, frame: types.FrameType | None) -> None:
        """Start the graceful shutdown, and end the waits and streams in flight."""
        super().handle_exit(sig, frame)
        self._loop.call_soon_threadsafe(self._hub.close)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Let SIGINT and SIGTERM start the graceful shutdown (a second SIGINT forces it)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        stops = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


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
        "timeout_keep_alive": settings.keep_alive_s,
        # httptools (llhttp) refuses CL+TE; EdgeProtocol adds header deadline and limits.
        "http": edge_protocol(settings.shortcuts.write_batching),
    }


async def serve(settings: Settings) -> None:
    """Migrate, then serve in this process (with the simulator when configured).

    Stopped by SIGINT or SIGTERM, in order: stop accepting, let requests in flight end,
    let attempts in flight finish within ``shutdown_grace`` (the app's shutdown), and
    stop the bundled simulator last, as those attempts may be calling it.
    """
    from gateway.app import create_app
    from gateway.store import upgrade_database
    from gateway.store.replication import check_synchronous_standby

    check_ports(settings)
    await upgrade_database(settings.database_url)
    await check_synchronous_standby(settings.database_url, settings.database)
    async with _simulator_in_process(settings):
        hub = ChangeHub()
        app = create_app(settings, hub=hub)
        app.on_startup.append(tune_gc_after_startup)
        config = uvicorn.Config(app, **uvicorn_options(settings))
        _log_serving(settings)
        await GatewayServer(config, hub).serve()


def serve_workers(settings: Settings, *, simulator_argv: Sequence[str]) -> None:
    """Migrate once, start the simulator once, then run ``settings.workers`` processes.

    ``simulator_argv`` runs ``onejob sim serve`` (the command line's), when the settings
    enable the bundled simulator. The simulator runs in a session of its own, so a
    Ctrl-C at the terminal reaches the workers, not it: it is stopped once every worker
    has finished its attempts in flight.
    """
    from gateway.store import upgrade_database
    from gateway.store.replication import check_synchronous_standby

    check_ports(settings)
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
    hub = ChangeHub()
    app = create_app(settings, hub=hub)
    app.on_startup.append(tune_gc_after_startup)
    _close_on_stop_signals(hub)
    return app


def _close_on_stop_signals(hub: ChangeHub) -> None:
    """Close ``hub`` when SIGINT or SIGTERM stops this worker (as ``GatewayServer`` does).

    uvicorn builds a worker's app on the worker's loop, its signal handlers already set;
    each is kept, and runs after the hub is closed (from the loop, not the handler).
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # built outside a server (a test): nothing to stop
        return
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(sig)
        if not callable(previous):
            continue

        def stop(signum: int, frame: types.FrameType | None, previous: Any = previous) -> None:
            loop.call_soon_threadsafe(hub.close)
            previous(signum, frame)

        signal.signal(sig, stop)


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
    check_simulator_port(sim_cfg.host, sim_cfg.port)
    async with contextlib.AsyncExitStack() as stack:
        try:
            sim = await stack.enter_async_context(
                run_simulator(port=sim_cfg.port, host=sim_cfg.host, catalog=load_catalog)
            )
        except (OSError, SystemExit) as exc:  # uvicorn exits when it cannot bind
            raise SimulatorNotStarted(
                f"the bundled simulator could not listen on {sim_cfg.host}:{sim_cfg.port} "
                f"({exc}): {SIM_PORT_FIX}"
            ) from None
        log.info("bundled simulator listening", extra={"url": sim.base_url})
        yield
    log.info("bundled simulator stopped", extra={"url": sim.base_url})


def check_simulator_port(host: str, port: int) -> None:
    """Raise ``SimulatorNotStarted`` when the simulator's port is taken, naming the fix."""
    from providers.simulator.server import port_refusal

    if refusal := port_refusal(host, port):
        raise SimulatorNotStarted(
            f"the bundled simulator cannot listen on {host}:{port} ({refusal}): {SIM_PORT_FIX}"
        )


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
    check_simulator_port(sim.host, sim.port)
    command = [*simulator_argv, "--host", sim.host, "--port", str(sim.port)]
    proc = subprocess.Popen(
        [*command, "--log-level", "warning", "--log-format", "json"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a Ctrl-C at the terminal is for the workers
    )
    url = f"http://{sim.host}:{sim.port}"
    try:
        _wait_until_listening(proc, sim.host, sim.port)
        log.info("bundled simulator listening", extra={"url": url})
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(SIMULATOR_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.info("bundled simulator stopped", extra={"url": url})


def _wait_until_listening(proc: subprocess.Popen[str], host: str, port: int) -> None:
    """Wait for the simulator to say it listens (its own line on stdout, not a connect:
    another process on that port would answer one)."""
    from providers.simulator.server import LISTENING

    listening = threading.Event()

    def read_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:  # read to the end, so the simulator never blocks on it
            if line.startswith(LISTENING):
                listening.set()

    threading.Thread(target=read_stdout, name="simulator-stdout", daemon=True).start()
    deadline = time.monotonic() + SIMULATOR_READY_TIMEOUT
    while not listening.wait(0.05):
        if proc.poll() is not None:
            raise SimulatorNotStarted(
                f"the bundled simulator exited ({proc.returncode}) before listening on "
                f"{host}:{port}: {SIM_PORT_FIX}"
            )
        if time.monotonic() > deadline:
            raise SimulatorNotStarted(f"the bundled simulator did not listen on {host}:{port}")
