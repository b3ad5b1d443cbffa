"""The registry of wire protocols, and the import graph of providers/ that keeps it acyclic."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

from providers.config import PROTOCOLS, ProviderConfig
from providers.registry import PLUGINS, plugin_for

PROVIDERS = Path(__file__).resolve().parents[3] / "providers"


def test_the_registry_and_the_config_know_the_same_protocols() -> None:
    assert list(PLUGINS) == list(PROTOCOLS)
    assert all(name == plugin.name for name, plugin in PLUGINS.items())


def test_a_protocol_nobody_registered_is_refused_by_the_config_and_the_registry() -> None:
    with pytest.raises(pydantic.ValidationError, match=r"unknown protocol 'smoke-signals'"):
        ProviderConfig(name="p", protocol="smoke-signals", base_url="http://x", model="m")
    with pytest.raises(ValueError, match="unknown provider protocol"):
        plugin_for("smoke-signals")


def test_importing_the_plug_ins_loads_neither_the_simulator_nor_the_registry_twice() -> None:
    code = (
        "import sys, providers.registry\n"
        "print(sorted(m for m in sys.modules if m.startswith('providers.simulator')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def _module(path: Path) -> str:
    parts = ["providers", *path.relative_to(PROVIDERS).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _edges() -> dict[str, set[str]]:
    """Return module -> the providers modules it imports, counting every import statement.

    Imports under ``if TYPE_CHECKING:`` and inside functions count, and importing
    ``a.b.c`` counts ``a.b`` too (its ``__init__`` runs first).
    """
    files = {_module(p): p for p in PROVIDERS.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names
                ]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                found.update(
                    ".".join(parts[:i])
                    for i in range(2, len(parts) + 1)
                    if ".".join(parts[:i]) in files
                )
        edges[name] = {t for t in found if t != name and not name.startswith(t + ".")}
    return edges


def test_no_module_of_providers_imports_itself_through_others() -> None:
    edges = _edges()
    cycles: list[str] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            walk(node)
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_the_plug_ins_never_import_the_registry_nor_the_simulator() -> None:
    edges = _edges()
    plug_ins = [m for m in edges if m.split(".")[1:2] in (["openai"], ["anthropic"], ["gemini"])]
    plug_ins += ["providers.openai_compatible", "providers.plugin", "providers.sim_wire"]
    wrong = [
        f"{m} imports {t}"
        for m in plug_ins
        for t in edges[m]
        if t in ("providers.registry", "providers.factory") or t.startswith("providers.simulator")
    ]
    assert wrong == []
