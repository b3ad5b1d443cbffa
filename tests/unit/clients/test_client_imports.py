"""The Python client needs httpx and the standard library, and nothing of the gateway."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[3] / "clients/python/src/onejob_client"


#: Imported when installed, never required: the module that may, and the package.
OPTIONAL = {"tracing.py": "opentelemetry"}


def test_the_client_imports_only_httpx_the_standard_library_and_itself() -> None:
    found = set()
    for path in SOURCE.glob("*.py"):
        if path.name in OPTIONAL:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    outside = {m for m in found if m not in sys.stdlib_module_names} - {"__future__"}
    assert outside == {"httpx", "onejob_client"}


def test_opentelemetry_is_imported_only_where_its_absence_is_caught() -> None:
    for name, package in OPTIONAL.items():
        tree = ast.parse((SOURCE / name).read_text(encoding="utf-8"))
        guarded = [
            node
            for handler in ast.walk(tree)
            if isinstance(handler, ast.Try)
            and any(
                isinstance(h.type, ast.Name) and h.type.id == "ImportError"
                for h in handler.handlers
            )
            for node in ast.walk(handler)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package)
        ]
        imports = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package)
        ]
        assert imports and imports == guarded, name
