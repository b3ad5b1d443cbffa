"""The processes a benchmark measures: onejob's gateway (from given settings, or one
version's on a database of its own), and the zero-latency upstream."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from bench.lib.children import child, free_port, ready
from bench.lib.databases import database, prepare_in
from bench.lib.loads import load_script
from gateway.settings import Settings

#: The module that serves a gateway from settings given as JSON.
GATEWAY_MODULE = "bench.processes.gateway_from_settings"
#: Its place in a commit from before ``bench/`` (``duel --base`` exports such commits).
OLD_GATEWAY_MODULE = "scenarios.load.gateway_proc"
#: The zero-latency upstream (``bench/processes/upstream.py``).
UPSTREAM_MODULE = "bench.processes.upstream"
#: A gateway started by ``start_side``: its PID, base URL, wrk script and database URL.
Side = tuple[int, str, Path, str]


def gateway_settings(
    url: str,
    port: int,
    upstream: str,
    *,
    dispatcher: bool,
    runners: int,
    work: Path,
    workers: int = 0,
    limits: dict[str, int] | None = None,
    admission: dict[str, int] | None = None,
) -> Path:
    """Write the gateway's settings (one provider: the upstream) and return the file.

    ``limits``: the provider's ``[providers.NAME.limits]`` (``requests_per_minute``, ...);
    ``admission``: the ``[admission]`` table (a commit from before issue 43 has none)."""
    settings = Settings.model_validate(
        {
            "database_url": url,
            "port": port,
            "instance_id": f"compare-{os.getpid()}",
            "log_level": "WARNING",
            "certifications_path": str(work / "certifications.json"),
            "providers": {
                "upstream": {
                    "protocol": "openai",
                    "base_url": f"{upstream}/v1",
                    "model": "bench-gpt",
                    "timeout": 30.0,
                    **({"limits": limits} if limits else {}),
                }
            },
            "routes": {"*": {"primary": "upstream"}},
            "dispatcher": {"enabled": dispatcher, "runners": runners},
            "workers": workers,
            **({"admission": admission} if admission is not None else {}),
        }
    )
    path = work / f"settings-{port}.json"
    # Only what differs from the defaults: an older commit's settings (bench.duel's base)
    # refuse the sections added since.
    path.write_text(settings.model_dump_json(exclude_defaults=True), encoding="utf-8")
    return path


def gateway_module(root: Path) -> str:
    """Return the module that serves a gateway in the checkout ``root`` (this one, or an
    exported commit from before the benchmarks left ``scenarios/load/``)."""
    if (root / "bench" / "processes" / "gateway_from_settings.py").exists():
        return GATEWAY_MODULE
    return OLD_GATEWAY_MODULE


@contextlib.asynccontextmanager
async def gateway(settings: Path, port: int, work: Path) -> AsyncIterator[int]:
    """Run one gateway (its settings' ``workers`` processes); yield its PID."""
    log = work / f"gateway-{port}.log"
    cmd = ["-m", GATEWAY_MODULE, "--settings", str(settings)]
    with child(cmd, log) as proc:
        await ready(f"http://127.0.0.1:{port}/healthz", proc, log)
        yield proc.pid


async def start_upstream(
    stack: contextlib.ExitStack | contextlib.AsyncExitStack, work: Path
) -> str:
    """Start the zero-latency upstream until ``stack`` closes; return its base URL."""
    port = free_port()
    log = work / "upstream.log"
    proc = stack.enter_context(child(["-m", UPSTREAM_MODULE, "--port", str(port)], log))
    base = f"http://127.0.0.1:{port}"
    await ready(f"{base}/healthz", proc, log)
    return base


async def start_side(
    stack: contextlib.ExitStack,
    side: str,
    root: Path,
    upstream: str,
    args: argparse.Namespace,
    env: dict[str, str] | None = None,
) -> Side:
    """Start one version's gateway on a database of its own (``env``: more environment
    for its process); return its PID, base URL, load script and database URL."""
    work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"duel-{side}-")))
    url = stack.enter_context(database(args.database, work))
    python = getattr(args, "base_python", None) if side == "base" else None
    python = python or sys.executable
    key = await asyncio.to_thread(prepare_in, root, url, python)
    port = free_port()
    # With the dispatcher off every job created stays unsent: past [admission] max_queued
    # (10,000 since issue 43) a gateway would answer 503 queue-full, a few seconds into a
    # creation run. Creation is what is measured, so a version that has admission is told
    # never to refuse.
    never_refuse = args.mode != "sync" and (root / "gateway/service/admission.py").exists()
    settings = gateway_settings(
        url,
        port,
        upstream,
        dispatcher=args.mode == "sync",
        runners=16,
        work=work,
        workers=1,
        admission={"max_queued": 0} if never_refuse else None,
    )
    log = work / "gateway.log"
    cmd = ["-m", gateway_module(root), "--settings", str(settings)]
    # It imports the version in ``root``: its working directory comes first on the path.
    proc = stack.enter_context(child(cmd, log, cwd=root, executable=python, env=env))
    base = f"http://127.0.0.1:{port}"
    await ready(f"{base}/healthz", proc, log)
    return proc.pid, base, await load_script(args.mode, base, key, url, work), url
