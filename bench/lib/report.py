"""What every benchmark report records: the commit and Python measured; the JSON written."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.lib.children import ROOT, say


def write_report(path: str | Path, report: Any) -> Path:
    """Write ``report`` as indented JSON to ``path`` (its folder made if need be); say so."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    say(f"wrote {out}")
    return out


def interpreter() -> dict[str, Any]:
    """Return the Python the measured processes run on: its version and where it is
    installed (``/usr`` for the distribution's, built with PGO and LTO; a pyenv directory
    for a source build, which spent ~1.2x the gateway's CPU per job on the same host)."""
    return {"python": platform.python_version(), "python_home": sys.base_prefix}


def commit() -> str:
    """Return the short commit measured (with ``+dirty`` when the tree has changes)."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")
