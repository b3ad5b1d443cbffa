"""The DBOS Transact peer of the comparison: onejob's durable job, written the DBOS way.

Run only inside the DBOS virtualenv that ``bench.lib.peers`` builds (``.peers/dbos``),
as a script: ``.peers/dbos/bin/python bench/processes/dbos_peer.py --port P
--upstream URL --database URL``. It imports nothing from this repository, and nothing in
the repository imports it (``dbos`` and ``fastapi`` are not onejob's dependencies).

``POST /jobs`` takes onejob's job body (``{"contract", "input"}``) and an
``Idempotency-Key`` header, and runs the workflow ``triage`` with that key as its
workflow ID (``SetWorkflowID``, DBOS's idempotency: a second request with the key gets
the recorded result, the step does not run again). The workflow has one step,
``call_upstream``, which POSTs the Chat Completions request to the upstream with httpx
and returns the parsed answer; DBOS checkpoints the workflow's input, the step's output
and the workflow's outcome in its system database (PostgreSQL). The answer is 200 with
``"status":"succeeded"`` and the result, like onejob's synchronous job.

How it is set up, and why (DBOS's docs, docs.dbos.dev):

- the system database is PostgreSQL (``system_database_url``), which DBOS recommends for
  production over its SQLite default (python/tutorials/database-connection);
- DBOS is configured with ``DBOS(config=...)`` and launched from the FastAPI lifespan, as
  in DBOS's own FastAPI starter template (shipped in the ``dbos`` package,
  ``_templates/dbos-db-starter``); the other ``DBOSConfig`` fields keep their defaults
  (python/reference/configuration): a 20-connection system-database pool,
  LISTEN/NOTIFY, OTLP off. ``log_level`` is WARNING so no line is logged per workflow;
- the workflow ID is the idempotency key (python/tutorials/idempotency-tutorial);
- the endpoint, the workflow and the step are plain functions, as in that template
  (FastAPI runs a ``def`` endpoint in its thread pool; a DBOS synchronous workflow runs
  in the calling thread), with one shared ``httpx.Client`` so the step reuses keep-alive
  connections. The ``async`` variant (``async def`` endpoint, workflow and step, an
  ``httpx.AsyncClient``) measured no faster here: 179 against 193 req/s at 16
  connections, p50 7.1 against 5.5 ms at 1 (5 s runs each, load average 1.2-2.3);
- uvicorn serves it with one worker, uvloop and httptools (uvicorn's ``[standard]``
  choice for speed), and no access log.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import httpx
import uvicorn
from dbos import DBOS, DBOSConfig, SetWorkflowID
from fastapi import FastAPI, Header

SYSTEM_PROMPT = "Triage the support ticket. Answer with one JSON object."
#: One keep-alive connection per FastAPI worker thread that may run a step at once.
POOL = httpx.Limits(max_connections=64, max_keepalive_connections=64)
_client: httpx.Client | None = None


@DBOS.step()
def call_upstream(job: dict[str, Any]) -> Any:
    """The one step: ask the upstream, return its answer's content parsed as JSON."""
    assert _client is not None
    body = {
        "model": "bench-gpt",
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": json.dumps(job["input"])},
        ],
    }
    response = _client.post("/v1/chat/completions", json=body)
    response.raise_for_status()
    return json.loads(response.json()["choices"][0]["message"]["content"])


@DBOS.workflow()
def triage(job: dict[str, Any]) -> Any:
    """The durable job: one step."""
    return call_upstream(job)


def build_app(upstream: str, database: str) -> FastAPI:
    """Configure DBOS and return the FastAPI app whose lifespan launches it."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        global _client
        _client = httpx.Client(base_url=upstream, timeout=30.0, limits=POOL)
        DBOS.launch()
        try:
            yield
        finally:
            DBOS.destroy()
            _client.close()

    app = FastAPI(lifespan=lifespan)
    config: DBOSConfig = {
        "name": "onejob-bench-peer",
        "system_database_url": database,
        "log_level": "WARNING",
    }
    DBOS(config=config)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/jobs")
    def create_job(
        job: dict[str, Any], idempotency_key: Annotated[str, Header()]
    ) -> dict[str, Any]:
        with SetWorkflowID(idempotency_key):
            result = triage(job)
        return {"id": idempotency_key, "status": "succeeded", "result": result}

    return app


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(prog="dbos_peer.py")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the upstream's base URL")
    parser.add_argument("--database", required=True, help="the system database's URL")
    args = parser.parse_args(argv)
    app = build_app(args.upstream, args.database)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
