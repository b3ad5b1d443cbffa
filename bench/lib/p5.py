"""P5: one key replayed right after a surge of creations, on tables never analyzed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import httpx

from bench.lib import wrk
from bench.lib.children import free_port, say
from bench.lib.databases import database, prepare
from bench.lib.gateways import gateway
from bench.lib.measure import measure


async def surge_then_hot_replay(
    kind: str,
    args: argparse.Namespace,
    settings_for: Any,
    work: Path,
    payload: dict[str, Any],
) -> dict[str, Any]:
    """P5: one key replayed at 16 connections right after a surge of creations, on tables
    never analyzed (no ``ANALYZE`` anywhere): the retry storm after a partition heals.

    The gateway's connections plan their statements while the tables are empty and keep
    those plans; a key lookup that took an index other than the unique one read every job
    of the owner (112 replays/s after 45,000 creations, docs/operations.md).
    """
    body = json.dumps(payload)
    seconds = args.duration
    with database(kind, work) as url:
        key = await prepare(url)
        port = free_port()
        cfg = settings_for(url, port, dispatcher=False)
        base = f"http://127.0.0.1:{port}"
        async with gateway(cfg, port, work) as pid:
            create = wrk.write(work / "surge.lua", wrk.create_jobs(key, body, wait=None))
            say(f"[{kind}] P5: a surge of creations at 16 connections, tables never analyzed")
            surge = measure(base, create, connections=16, duration=seconds, prefix="p5c", pid=pid)
            say(f"  {surge['rps']} req/s")
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                first = await http.post(
                    "/v1/jobs",
                    json=payload,
                    headers={"Authorization": f"Bearer {key}", "Idempotency-Key": "replay-0"},
                )
                first.raise_for_status()
            hot = wrk.write(work / "hot.lua", wrk.replay_jobs(key, body, 1))
            say(f"[{kind}] P5: one key replayed at 16 connections right after it")
            replay = measure(base, hot, connections=16, duration=seconds, prefix="p5r", pid=pid)
            say(f"  {replay['rps']} req/s")
    return {"surge_creation_16": surge, "hot_replay_16": replay}
