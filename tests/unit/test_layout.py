"""The tree's shape, as docs/architecture.md states it: every seam of the gateway in
``gateway/domain/ports.py``, and no shipped module too long to read in one sitting.

Read with the stdlib ``ast`` from the source files (nothing is imported).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("gateway", "providers", "contracts", "certify", "scenarios", "reports", "cli")
PORTS = ROOT / "gateway" / "domain" / "ports.py"
MAX_LINES = 500

#: Protocols in ``gateway`` that are not seams between parts of the system but a part's
#: own inner structure, each with why it stays where it is.
INNER: dict[str, str] = {
    "gateway/store/transaction.py:Dialect": "the store's own choice of database, made once",
    "gateway/store/create.py:Batches": "what the creation batcher needs of the store inside",
}


def _sources(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py"))


def _protocols(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = {ast.unparse(b) for b in node.bases}
            if bases & {"Protocol", "typing.Protocol"}:
                found.append(node.name)
    return found


def test_every_seam_of_the_gateway_is_declared_in_ports() -> None:
    strays = [
        f"{path.relative_to(ROOT)}:{name}"
        for path in _sources("gateway")
        if path != PORTS
        for name in _protocols(path)
        if f"{path.relative_to(ROOT)}:{name}" not in INNER
    ]
    assert not strays, (
        f"declare these seams in gateway/domain/ports.py (or say in INNER why not): {strays}"
    )
    declared = set(_protocols(PORTS))
    assert {"JobStore", "Provider", "Reconcilable", "BackgroundService", "Clock"} <= declared


def test_the_inner_protocols_listed_still_exist() -> None:
    for entry in INNER:
        file, name = entry.split(":")
        assert name in _protocols(ROOT / file), f"{entry} is gone: drop it from INNER"


def test_no_shipped_module_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for path in _sources(*SHIPPED)
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"split these by what they hold (docs/architecture.md): {long}"
