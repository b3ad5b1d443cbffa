"""The packages' import graph: no cycles, and no import against the layers.

Built with the stdlib ``ast`` from the source files (nothing is imported). Every import
counts: the ones inside functions, and the ones in ``if TYPE_CHECKING:`` blocks (they
never run, but a cycle hidden there is still two modules that cannot be read apart). The
layers are those of docs/architecture.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "gateway",
    "providers",
    "contracts",
    "certify",
    "scenarios",
    "reports",
    "cli",
    "bench",
)
#: Shipped in the wheel (bench/ is not: it is run from a checkout).
SHIPPED = tuple(p for p in PACKAGES if p != "bench")

#: (importing package prefix, forbidden module prefixes, why)
LAYERS: list[tuple[str, tuple[str, ...], str]] = [
    (
        "gateway.domain",
        ("litestar", "sqlalchemy", "httpx", "gateway.store", "gateway.http", "gateway.service"),
        "the domain knows no framework and no outer layer",
    ),
    (
        "gateway.store",
        ("litestar", "gateway.http", "gateway.service", "gateway.dispatch"),
        "the store knows no HTTP and no use case",
    ),
    (
        "gateway.service",
        ("litestar", "sqlalchemy", "gateway.http"),
        "the service layer knows no framework and no SQL",
    ),
    ("gateway.dispatch", ("litestar", "gateway.http"), "the dispatcher knows no HTTP"),
    (
        "gateway.capacity",
        (
            "litestar",
            "sqlalchemy",
            "httpx",
            "gateway.store",
            "gateway.http",
            "gateway.service",
            "gateway.dispatch",
        ),
        "capacity (pacing, breaker, sharing) knows the store by its seam only, and no caller",
    ),
    (
        "gateway.webhooks",
        (
            "litestar",
            "sqlalchemy",
            "gateway.store",
            "gateway.http",
            "gateway.service",
            "gateway.dispatch",
        ),
        "webhook delivery knows the store by its seam only, and no caller",
    ),
    (
        "gateway",
        ("certify",),
        "the gateway runs on the contract model (contracts), never on the certification tool",
    ),
    (
        "providers",
        ("gateway", "contracts", "certify", "scenarios", "reports"),
        "providers sit below everything else",
    ),
    (
        "contracts",
        ("gateway", "certify", "scenarios", "reports"),
        "the runtime contract model knows providers only: no gateway, no certification tool",
    ),
    (
        "certify",
        ("gateway", "scenarios", "reports"),
        "the certification tool builds on contracts and providers, not on the gateway",
    ),
    ("scenarios", ("gateway.store.",), "scenarios drive processes over HTTP, not the database"),
    (
        "reports",
        (
            "gateway",
            "providers",
            "scenarios.runner",
            "scenarios.stage",
            "certify.runner",
        ),
        "reports render the results they are given (scenarios.model and certify.results are "
        "their input)",
    ),
]
LAYERS += [
    (package, ("bench",), "nothing shipped imports the benchmarks (bench/ is not in the wheel)")
    for package in SHIPPED
]
LAYERS += [
    (package, ("cli",), "the command line imports the packages; no shipped package imports it")
    for package in SHIPPED
    if package != "cli"
]
#: Modules allowed to cross a line above, and why (none today: keep it that way).
EXCEPTIONS: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str) -> set[str]:
    """Return the modules ``path`` imports (absolute names), wherever the import is."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # ``from pkg import mod`` imports the module pkg.mod; ``from pkg import name``
            # imports pkg. Both are kept; ``graph`` drops the names that are not modules.
            found.update(f"{target}.{alias.name}" for alias in node.names)
            found.add(target + "*")  # marks "the names may all be submodules"
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def graph() -> dict[str, set[str]]:
    """Return module -> the project modules it imports."""
    files = {
        module_name(p): p
        for package in PACKAGES
        for p in (ROOT / package).rglob("*.py")
        if "migrations" not in p.parts and not p.name.startswith("test_")
    }
    edges: dict[str, set[str]] = {}
    for name, path in files.items():
        found = imports_of(path, name)
        targets = {t for t in found if t in files and t != name}
        for marked in (t for t in found if t.endswith("*")):
            base = marked[:-1]
            names = {
                t
                for t in found
                if t.startswith(base + ".")
                and t.count(".") == base.count(".") + 1
                and not t.endswith("*")
            }
            if base in files and base != name and not names <= set(files):
                targets.add(base)  # some imported names are not submodules: pkg runs
        edges[name] = targets
    return edges


def test_the_graph_sees_the_packages() -> None:
    edges = graph()
    assert "gateway.app" in edges and "gateway.store.store" in edges["gateway.store"]
    assert "providers.base" in edges


def test_no_module_imports_itself_through_others() -> None:
    edges = graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            walk(node)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize(("layer", "forbidden", "why"), LAYERS)
def test_no_import_runs_against_the_layers(
    layer: str, forbidden: tuple[str, ...], why: str
) -> None:
    wrong: list[str] = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = module_name(path)
            if "migrations" in path.parts or not (name == layer or name.startswith(layer + ".")):
                continue
            for target in (t.rstrip("*") for t in imports_of(path, name)):
                for bad in forbidden:
                    hit = target == bad.rstrip(".") or target.startswith(bad.rstrip(".") + ".")
                    allowed = any(name == m and target.startswith(t) for (m, t) in EXCEPTIONS)
                    if hit and not allowed:
                        wrong.append(f"{name} imports {target}")
    assert wrong == [], f"{why}:\n" + "\n".join(sorted(set(wrong)))
