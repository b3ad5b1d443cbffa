"""``make serve`` installs the runtime dependencies only (``pip install -e .``), so nothing
the shipped packages import may come from the ``[dev]`` extras alone; ``make test`` and
``make lint`` install the extras.

The imports are read with ``ast`` from every shipped module, those inside functions too
(a command imports what it needs when it runs); each third-party module is mapped to its
distribution and must be a runtime dependency or one of theirs.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("gateway", "providers", "contracts", "certify", "scenarios", "reports", "cli")
#: Loaded by pytest alone (tests/contract_suite's conftest), never by a command.
TEST_ONLY = {ROOT / "certify" / "pytest_plugin.py"}
#: Imported only when an optional extra is installed and turned on: the module, its extra.
OPTIONAL = {ROOT / "gateway" / "tracing_otel.py": "otel"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_closure(extra: str | None = None) -> set[str]:
    """Return the runtime dependencies (with an ``extra``'s) and everything they require,
    installed here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    if extra is not None:
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    seen: set[str] = set()
    while wanted:
        req = wanted.pop()
        name = normalized(req.name)
        if name in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed on this platform (a marker the tests did not evaluate)
        wanted.extend(Requirement(r) for r in requires)
    return seen


def shipped_imports(only: Path | None = None) -> dict[str, list[str]]:
    """Return each top-level module the shipped code imports, with where (``only``: one
    optional module's; otherwise the optional modules are left out)."""
    found: dict[str, list[str]] = {}
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path in TEST_ONLY or (path != only if only else path in OPTIONAL):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.setdefault(name.split(".")[0], []).append(where)
    return found


@pytest.mark.parametrize("optional", [None, *sorted(OPTIONAL)], ids=lambda p: str(p and p.name))
def test_the_shipped_packages_import_only_runtime_dependencies(optional: Path | None) -> None:
    """Each optional module may import its extra's dependencies too, and only it may."""
    closure = runtime_closure(OPTIONAL[optional] if optional else None)
    owners = metadata.packages_distributions()
    ours = set(SHIPPED)
    outside = []
    for module, places in shipped_imports(optional).items():
        if module in ours or module in sys.stdlib_module_names or module == "__future__":
            continue
        dists = {normalized(d) for d in owners.get(module, [])}
        if not dists & closure:
            outside.append(f"{module} ({', '.join(sorted(dists)) or 'not installed'}): {places[0]}")
    assert outside == [], "imported by shipped code but not a runtime dependency:\n" + "\n".join(
        outside
    )


def test_nothing_shipped_loads_the_pytest_plugin() -> None:
    for module, places in shipped_imports().items():
        assert module != "pytest", places
    for path in TEST_ONLY:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        loaders = [
            p
            for package in SHIPPED
            for p in (ROOT / package).rglob("*.py")
            if p not in TEST_ONLY and name in p.read_text(encoding="utf-8")
        ]
        assert loaders == [], f"{name} is loaded by shipped code: {loaders}"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_serve_installs_the_runtime_and_make_test_the_dev_extras() -> None:
    def planned(target: str) -> str:
        # -n: print the recipes without running them; -B: as on a fresh clone.
        done = subprocess.run(
            ["make", "-n", "-B", target],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    serve, test = planned("serve"), planned("test")
    installs = [line for line in serve.splitlines() if "pip install" in line]
    assert installs and all(line.rstrip().endswith(" -e .") for line in installs), serve
    assert "[dev]" not in serve
    assert "--progress-bar on" in installs[0] and " -q" not in installs[0]
    assert "-e '.[dev]'" in test, test
