"""A deliberately broken ``onejob``: its gateway has no unique (owner, key) constraint.

Used only to prove that the scenarios can fail. ``sim serve`` runs the real simulator;
``keys create`` prints a key; ``serve`` runs a tiny gateway that makes a new job (and a new
provider call) for every POST, as a gateway with the constraint disabled would.
"""

from __future__ import annotations

import http.server
import itertools
import json
import sys
import threading
import tomllib
from typing import Any

import httpx

from contracts.loader import CATALOG_ROOT, load_contract

JOBS: dict[str, dict[str, Any]] = {}
LOCK = threading.Lock()
IDS = itertools.count(1)


def make_handler(sim_base: str) -> type[http.server.BaseHTTPRequestHandler]:
    """Return a handler class that calls the simulator at ``sim_base``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path in ("/readyz", "/healthz"):
                self._send(200, {"ok": True})
            elif self.path == "/v1/contracts":
                self._send(200, {"contracts": [{"name": "ticket-triage@1", "hedgeable": True}]})
            elif self.path.startswith("/v1/jobs/"):
                job = JOBS.get(self.path.rsplit("/", 1)[-1])
                self._send(200 if job else 404, job or {"title": "not found"})
            elif self.path.startswith("/v1/jobs"):
                self._send(200, {"jobs": list(JOBS.values()), "next_cursor": None})
            else:
                self._send(404, {"title": "not found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            if self.path != "/v1/jobs":
                self._send(404, {"title": "not found"})
                return
            with LOCK:  # the bug: no lookup by (owner, key), every click is a new job
                job_id = f"job_broken{next(IDS):04d}"
            contract = load_contract(CATALOG_ROOT / body["contract"].split("@")[0])
            prompt = contract.render(body["input"])
            answer = httpx.post(
                f"{sim_base}/chat/completions",
                json={
                    "model": "sim-gpt",
                    "messages": [
                        {"role": "system", "content": prompt.system},
                        {"role": "user", "content": prompt.user},
                    ],
                },
                headers={"Idempotency-Key": f"{job_id}/1"},
                timeout=30,
            ).json()
            now = "2026-01-01T00:00:00Z"
            job = {
                "id": job_id,
                "owner": "alice",
                "idempotency_key": self.headers.get("idempotency-key", "").strip('"'),
                "contract": body["contract"],
                "status": "succeeded",
                "version": 2,
                "completed_by": f"{job_id}-a1",
                "result": answer,
                "error": None,
                "attempts": [
                    {
                        "id": f"{job_id}-a1",
                        "number": 1,
                        "provider": "sim-openai",
                        "reason": "initial",
                        "state": "succeeded",
                        "error": None,
                        "started_at": now,
                        "finished_at": now,
                    }
                ],
            }
            JOBS[job_id] = job
            self._send(201, job, {"location": f"/v1/jobs/{job_id}"})

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def main(argv: list[str]) -> int:
    """Dispatch like the real CLI, for the three commands the scenarios use."""
    if argv[:2] == ["sim", "serve"]:
        from cli.main import main as real_main

        return real_main(argv)
    if argv[:2] == ["keys", "create"]:
        print("oj_broken_key")
        return 0
    if argv[:1] == ["serve"]:
        port = int(argv[argv.index("--port") + 1])
        with open(argv[argv.index("--config") + 1], "rb") as fh:
            config = tomllib.load(fh)
        sim_base = config["providers"]["sim-openai"]["base_url"]
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), make_handler(sim_base))
        server.serve_forever()
    print(f"broken onejob: unsupported command {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
