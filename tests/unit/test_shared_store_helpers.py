"""The shadow checks', production samples' and webhooks' tests make a succeeded job and a
store on a manual clock with ``tests/integration/store_helpers.py``, not each with a copy
of their own (other store tests may move to it as they are next changed)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "tests/integration/store"
USERS = [
    STORE / "test_shadow_checks.py",
    STORE / "test_production_samples.py",
    *sorted(STORE.glob("test_webhook*.py")),
    *sorted((ROOT / "tests/integration/webhooks").glob("test_*.py")),
]


def test_no_store_or_webhook_test_keeps_its_own_copy_of_the_helpers() -> None:
    copies = []
    for path in USERS:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and node.name in {
                "succeeded",
                "clocked",
                "clocked_store",
            }:
                copies.append(f"{path.relative_to(ROOT)}: def {node.name}")
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "open_store":
                if any(k.arg == "clock" for k in node.keywords):
                    copies.append(f"{path.relative_to(ROOT)}:{node.lineno}: open_store(clock=)")
    assert not copies, f"use tests/integration/store_helpers.py instead: {copies}"
