"""The Python client needs httpx and the standard library, and nothing of the gateway."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[3] / "clients/python/src/onejob_client"


def test_the_client_imports_only_httpx_the_standard_library_and_itself() -> None:
    found = set()
    for path in SOURCE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    outside = {m for m in found if m not in sys.stdlib_module_names} - {"__future__"}
    assert outside == {"httpx", "onejob_client"}
