"""The comparison's peers: LiteLLM's proxy and a DBOS Transact app, each in its own virtualenv.

``python -m bench.compare --peers`` drives, after onejob's own runs and against
the same zero-latency upstream, the two systems issue 9 compares onejob with. This module
holds what is particular to them: the virtualenvs (built on demand under ``.peers/``,
gitignored, and reused while their pins are unchanged), how each peer is configured, and
how it is started and stopped. The measuring stays in ``bench.compare``.

**LiteLLM's proxy** (``litellm[proxy]``, pinned below), a stateless gateway: no database,
so no spend tracking, keys or retries to record. Set up as LiteLLM's docs recommend for
production and for benchmarks (docs.litellm.ai):

- one worker (``--num_workers 1``): LiteLLM's production checklist recommends one Uvicorn
  worker per pod, scaled horizontally (docs/proxy/prod, "Sizing and workers";
  docs/proxy/server_tuning); it is also what onejob runs with here;
- no database (no ``database_url``), and ``disable_spend_logs``/``disable_error_logs``,
  the production page's "optional best practices" for not writing per request;
- ``set_verbose: false`` and ``LITELLM_LOG=ERROR`` (production page: no debug logging,
  and FastAPI's default info logs off); ``callbacks: []``, ``num_retries: 0`` and a
  30 s ``request_timeout``, the proxy config of LiteLLM's own benchmark page
  (docs/benchmarks);
- a ``master_key``, which the production page requires: every request is authenticated,
  as onejob's are (onejob checks an API key too);
- ``LITELLM_LOCAL_MODEL_COST_MAP=True``: the proxy reads the model price map shipped in
  the package instead of fetching it at start (this machine has no internet besides the
  package registry);
- the model routes to the upstream as an OpenAI-compatible endpoint (``openai/`` prefix,
  ``api_base`` = the upstream's ``/v1``, a dummy key), the setup of LiteLLM's load-test
  pages (docs/load_test_advanced). LiteLLM's CLI runs Uvicorn with uvloop; ``httptools``
  is added to its virtualenv so its HTTP parser is the same as onejob's and the DBOS app's.

**The DBOS app** (``bench/processes/dbos_peer.py``, which documents its own
configuration): the same durable job as onejob's synchronous job, a workflow whose ID is
the idempotency key and whose one step calls the upstream, on FastAPI and Uvicorn (1
worker), with a PostgreSQL system database of its own, created for the run and dropped
after it.

The pins are the newest releases whose ``litellm[proxy]`` extra resolves on the package
index this project uses (1.106.12; later ones require ``litellm-proxy`` packages that are
not published there). A virtualenv that cannot be built raises ``PeerUnavailable`` with
pip's last lines; ``bench.compare`` reports it and goes on with the other peer.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from bench.lib.children import ROOT, child, free_port, ready, say

VENVS = ROOT / ".peers"
DBOS_APP = ROOT / "bench" / "processes" / "dbos_peer.py"
LITELLM_KEY = "sk-onejob-bench"  # the proxy's master key; it starts with sk- as LiteLLM asks
PIP_TIMEOUT = 1200.0  # seconds for one virtualenv's install
MARKER = "onejob-peer.json"  # what a virtualenv was built with


class PeerUnavailable(Exception):
    """A peer's virtualenv could not be built (the message says why)."""


@dataclass(frozen=True)
class Peer:
    """A peer's name and title, its pinned requirements, the import that proves its venv."""

    name: str
    title: str
    requirements: tuple[str, ...]
    check: str

    @property
    def venv(self) -> Path:
        """The virtualenv's directory."""
        return VENVS / self.name

    def program(self, name: str) -> str:
        """The path of a program in the virtualenv (``python``, ``litellm``)."""
        return str(self.venv / "bin" / name)


LITELLM = Peer(
    "litellm",
    "LiteLLM proxy",
    ("litellm[proxy]==1.106.12", "httptools==0.9.0"),
    "import litellm.proxy.proxy_server, httptools",
)
DBOS = Peer(
    "dbos",
    "DBOS Transact app",
    (
        "dbos==3.4.0",
        "fastapi==0.165.0",
        "uvicorn==0.54.0",
        "uvloop==0.23.0",
        "httptools==0.9.0",
        "httpx==0.28.1",
    ),
    "import dbos, fastapi, uvicorn, uvloop, httptools, httpx",
)
PEERS = (LITELLM, DBOS)


def _marker(peer: Peer) -> dict[str, object]:
    return {"requirements": list(peer.requirements), "python": sys.version.split()[0]}


def is_current(peer: Peer) -> bool:
    """True when the peer's virtualenv exists and was built with today's pins and Python."""
    marker = peer.venv / MARKER
    if not marker.is_file() or not Path(peer.program("python")).exists():
        return False
    try:
        return bool(json.loads(marker.read_text(encoding="utf-8")) == _marker(peer))
    except ValueError:
        return False


def ensure_venv(peer: Peer) -> str:
    """Build the peer's virtualenv unless a current one is there; return its Python.

    The marker file is written last, so an install interrupted half way is rebuilt from
    scratch on the next run rather than reused.
    """
    python = peer.program("python")
    if is_current(peer):
        return python
    say(f"building {peer.venv.relative_to(ROOT)}: pip install {' '.join(peer.requirements)}")
    shutil.rmtree(peer.venv, ignore_errors=True)
    log = VENVS / f"{peer.name}-pip.log"
    VENVS.mkdir(exist_ok=True)
    steps = (
        [sys.executable, "-m", "venv", str(peer.venv)],
        [python, "-m", "pip", "install", "--quiet", *peer.requirements],
        [python, "-c", peer.check],
    )
    with open(log, "wb") as out:
        for cmd in steps:
            try:
                done = subprocess.run(
                    cmd, stdout=out, stderr=subprocess.STDOUT, timeout=PIP_TIMEOUT, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise PeerUnavailable(f"{peer.name}: {cmd[1:3]} failed: {exc}") from exc
            if done.returncode != 0:
                out.flush()
                lines = log.read_text(errors="replace").splitlines()
                # pip's last lines, each cut short (they can list every version there is).
                wanted = [ln[:240] for ln in lines if "is ignored" not in ln][-6:]
                raise PeerUnavailable(
                    f"{peer.name}: {' '.join(cmd[1:4])} exited {done.returncode}"
                    f" (log {log}):\n  " + "\n  ".join(wanted)
                )
    (peer.venv / MARKER).write_text(json.dumps(_marker(peer)), encoding="utf-8")
    return python


def chat_request(job_input: object) -> dict[str, object]:
    """The Chat Completions request a client sends LiteLLM: the one the DBOS app's step
    sends the upstream (a system line and the job's input as JSON)."""
    return {
        "model": "bench-gpt",
        "messages": [
            {
                "role": "system",
                "content": "Triage the support ticket. Answer with one JSON object.",
            },
            {"role": "user", "content": json.dumps(job_input)},
        ],
    }


def litellm_config(upstream: str) -> dict[str, object]:
    """LiteLLM's proxy config (written as JSON, which YAML reads): see the module docstring."""
    return {
        "model_list": [
            {
                "model_name": "bench-gpt",
                "litellm_params": {
                    "model": "openai/bench-gpt",
                    "api_base": f"{upstream}/v1",
                    "api_key": "sk-upstream-dummy",
                },
            }
        ],
        "litellm_settings": {
            "callbacks": [],
            "num_retries": 0,
            "request_timeout": 30,
            "set_verbose": False,
        },
        "general_settings": {
            "master_key": LITELLM_KEY,
            "disable_spend_logs": True,
            "disable_error_logs": True,
        },
    }


@contextlib.asynccontextmanager
async def litellm_proxy(
    upstream: str, work: Path, settings: dict[str, object] | None = None
) -> AsyncIterator[tuple[str, int]]:
    """Run LiteLLM's proxy (1 worker) for the block; yield its base URL and PID.

    ``settings``: another config than ``litellm_config(upstream)`` (``bench.capacity``
    leaves LiteLLM's retries at its defaults)."""
    ensure_venv(LITELLM)
    cwd = work / "litellm"
    cwd.mkdir(exist_ok=True)  # no .env or config of anyone else's is picked up
    config = cwd / "config.yaml"
    text = json.dumps(settings or litellm_config(upstream), indent=2)
    config.write_text(text, encoding="utf-8")
    port = free_port()
    log = work / "litellm.log"
    args = ["--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    env = {"LITELLM_LOG": "ERROR", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with child(
        [*args, "--num_workers", "1"],
        log,
        executable=LITELLM.program("litellm"),
        cwd=cwd,
        env=env,
    ) as proc:
        base = f"http://127.0.0.1:{port}"
        await ready(f"{base}/health/liveliness", proc, log)
        yield base, proc.pid


@contextlib.asynccontextmanager
async def dbos_app(upstream: str, database: str, work: Path) -> AsyncIterator[tuple[str, int]]:
    """Run the DBOS app (1 worker) on the system database ``database`` (a libpq URL)."""
    ensure_venv(DBOS)
    cwd = work / "dbos"
    cwd.mkdir(exist_ok=True)  # DBOS would read a dbos-config.yaml found here
    port = free_port()
    log = work / "dbos.log"
    args = [str(DBOS_APP), "--port", str(port), "--upstream", upstream, "--database", database]
    with child(args, log, executable=DBOS.program("python"), cwd=cwd) as proc:
        base = f"http://127.0.0.1:{port}"
        await ready(f"{base}/healthz", proc, log)
        yield base, proc.pid
