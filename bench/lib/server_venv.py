"""The servers' virtualenv (``.peers/servers``): the pinned servers beside this checkout.

Every server ``bench.servers`` compares runs from it, so the app, its dependencies and
the event loop are the same and only the server differs. It is built on the first run
(the pinned granian and hypercorn, this repository installed editable) and reused after.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.lib.children import ROOT, say

PEER_VENV = ROOT / ".peers" / "servers"
#: The servers under test, pinned: a later release may change what is measured here.
PINS = {"granian": "2.8.9", "hypercorn": "0.18.0"}
VERSIONS_OF = ("uvicorn", "httptools", "uvloop", "granian", "hypercorn", "h11", "litestar")


def ensure_venv() -> Path:
    """Build ``.peers/servers`` once (pinned peers, this repository editable); return its bin."""
    bin_dir = PEER_VENV / "bin"
    if _venv_ready(bin_dir):
        return bin_dir
    say(f"building {PEER_VENV.relative_to(ROOT)} (granian, hypercorn, onejob editable)")
    if not (bin_dir / "python").exists():
        # Not --system-site-packages: only what is installed here is importable there.
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    pins = [f"{name}=={version}" for name, version in PINS.items()]
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", "-e", str(ROOT), *pins],
        check=True,
        timeout=900,
    )
    if not _venv_ready(bin_dir):
        raise SystemExit(f"{PEER_VENV} was built but does not have the pinned servers")
    return bin_dir


def _venv_ready(bin_dir: Path) -> bool:
    """Whether the venv has the pinned servers and imports the gateway from this tree."""
    if not (bin_dir / "python").exists():
        return False
    check = (
        "import importlib.metadata as m, json, gateway;"
        f"print(json.dumps([{{n: m.version(n) for n in {list(PINS)!r}}}, gateway.__file__]))"
    )
    out = subprocess.run(
        [str(bin_dir / "python"), "-c", check], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        return False
    versions, where = json.loads(out.stdout)
    return bool(versions == PINS and Path(where).resolve().is_relative_to(ROOT))


def versions(bin_dir: Path) -> dict[str, str]:
    """Return the versions of the servers and of what they share, as installed there."""
    code = (
        "import importlib.metadata as m, json;"
        f"print(json.dumps({{n: m.version(n) for n in {list(VERSIONS_OF)!r}}}))"
    )
    out = subprocess.run([str(bin_dir / "python"), "-c", code], capture_output=True, text=True)
    loaded: dict[str, str] = json.loads(out.stdout)
    return loaded
