"""The loads the benchmarks drive: the job asked for, the replay keys, the wrk scripts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from bench.lib import wrk
from bench.lib.children import ROOT
from bench.lib.databases import analyze

CONTRACT = "ticket-triage@1"
#: The job's input: a ticket of the contract's catalog.
INPUT = {
    "ticket_id": "SUP-42",
    "channel": "email",
    "customer": {"name": "Priya", "plan": "pro"},
    "subject": "Charged twice",
    "body": "My card was charged twice for March.",
}
#: The contract's cases, the inputs ``bench.end_to_end`` and ``bench.dispatch`` cycle through.
CASES = ROOT / "contracts/catalog/ticket-triage/cases.jsonl"
#: Keys the replay run cycles through (each replayed ~4 times a second at 16 connections).
#: With 100 hot keys PostgreSQL itself was the limit (its backends busy, waiting on
#: WALWrite, while the gateway's CPU per replay stayed below creation's); docs/benchmarks.md.
REPLAY_KEYS = 2000
#: wrk connections of the 2 s warm-up before each gateway's runs (the most any run uses).
WARM_CONNECTIONS = 16
#: The upstream's own load (``upstream_script`` writes it in the run's working directory).
UPSTREAM_SCRIPT = "upstream.lua"


async def seed_replay_keys(base: str, key: str, payload: dict[str, Any], url: str) -> None:
    """Create the jobs the replay run asks for again, then ``ANALYZE`` the database.

    A table PostgreSQL never analyzed costs its two indexes that lead with ``owner_id``
    the same, and the key lookup of a replay took ``(owner_id, status, id)``, reading
    every job of the owner: 3.4 ms a replay against 0.9 ms once analyzed, with 2,000
    jobs (docs/benchmarks.md, thirteenth session). Autovacuum analyzes a table that
    grows within its naptime (a minute); a run seconds long does not wait for it. So
    the replay run measures the table as it is once analyzed, as P4's seeding does.
    """
    async with httpx.AsyncClient(timeout=30) as client:
        for n in range(REPLAY_KEYS):
            r = await client.post(
                f"{base}/v1/jobs",
                json=payload,
                headers={"Authorization": f"Bearer {key}", "Idempotency-Key": f"replay-{n}"},
            )
            r.raise_for_status()
    analyze(url)


async def load_script(mode: str, base: str, key: str, url: str, work: Path) -> Path:
    """Write the wrk script of ``mode`` (seeding the replay keys first) and return it."""
    payload = {"contract": CONTRACT, "input": INPUT}
    body = json.dumps(payload)
    if mode == "replay":
        await seed_replay_keys(base, key, payload, url)
        load = wrk.replay_jobs(key, body, REPLAY_KEYS)
    else:
        load = wrk.create_jobs(key, body, wait=30 if mode == "sync" else None)
    return wrk.write(work / "load.lua", load)


def upstream_script(work: Path) -> Path:
    """Write the upstream's own load (a Chat Completions POST) into ``work``; return it."""
    body = json.dumps({"model": "bench-gpt", "messages": []})
    return wrk.write(work / UPSTREAM_SCRIPT, wrk.chat_completions(body))
