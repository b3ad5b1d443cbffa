"""Check an installed onejob-client in a fresh virtualenv: httpx is all it brings.

    python -m venv /tmp/v && /tmp/v/bin/pip install ./clients/python
    /tmp/v/bin/python clients/python/check_installed.py

Run by .ci/run. Fails (exit 1) when the distribution needs anything but httpx (and what
httpx itself needs), when it imports the gateway, or when it cannot make one job of an
intention whose first answers are a 503 and a dropped connection.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
import sys
import sysconfig
from pathlib import Path


def requirement_names(dist: str) -> set[str]:
    """Return the names ``dist`` requires (no extras, markers that hold here)."""
    names = set()
    for req in metadata.requires(dist) or []:
        name, _, marker = req.partition(";")
        if "extra ==" in marker:
            continue
        names.add(re.split(r"[ <>=!~\[(]", name.strip(), maxsplit=1)[0].lower())
    return names


def closure(dist: str) -> set[str]:
    """Return ``dist`` and everything it needs, transitively."""
    seen, todo = set(), [dist.lower()]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(requirement_names(name))
        except metadata.PackageNotFoundError:
            pass  # a requirement whose marker does not hold on this Python
    return seen


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main() -> int:
    import onejob_client

    here = Path(onejob_client.__file__).resolve()
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert site in here.parents, f"onejob_client imported from {here}, not {site}"
    assert requirement_names("onejob-client") == {"httpx"}, metadata.requires("onejob-client")

    needed = {normal(n) for n in closure("onejob-client")}
    installed = {normal(d.metadata["Name"]) for d in metadata.distributions()}
    extra = installed - needed - {"pip", "setuptools", "wheel"}
    assert not extra, f"installed beyond httpx's needs: {sorted(extra)}"
    for module in ("gateway", "providers", "contracts", "litestar"):
        assert module not in sys.modules, f"importing onejob_client imported {module}"

    import httpx

    from onejob_client import Client, Intention

    answers = iter(
        [
            httpx.Response(503, headers={"retry-after": "0"}, json={"outcome": "not_done"}),
            httpx.ReadError("connection reset"),
            httpx.Response(201, json=_job()),
        ]
    )
    keys = []

    def gateway(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers["idempotency-key"])
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    http = httpx.Client(transport=httpx.MockTransport(gateway))
    intention = Intention.new("ticket-triage@1", {"ticket_id": "SUP-42"})
    with Client("http://onejob.test", "oj_key", http=http, sleep=lambda _: None) as onejob:
        created = onejob.create_job(intention)
    assert created.tries == 3 and keys == [f'"{intention.key}"'] * 3, (created, keys)
    print(f"onejob-client {onejob_client.__version__} installed with {sorted(needed)}: ok")
    return 0


def _job() -> dict[str, object]:
    return {
        "id": "job_1",
        "idempotency_key": "k",
        "contract": "ticket-triage@1",
        "provider": "sim-openai",
        "status": "queued",
        "version": 1,
        "completed_by": None,
        "result": None,
        "error": None,
        "attempts": [],
    }


if __name__ == "__main__":
    sys.exit(main())
