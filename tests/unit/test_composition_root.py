"""One composition root (issue 44): routing built once, capabilities decided there.

Before, ``Routes`` was built in four places (the service, the dispatcher, the reconciler's
and the shadow checks' builders), and whether the store keeps shadow checks, the registry
suspensions, or an adapter can be asked after the fact was found out at run time with
``isinstance`` against the seams (seven checks, in the service, the builders and the
reconciler). Now ``gateway/bootstrap.py`` builds ``Routes`` for each composition path and
decides the optional capabilities, and the builders in ``gateway/background.py`` pass them
on: nothing else may do either.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPOSITION = {"gateway/bootstrap.py", "gateway/background.py"}


def seams() -> set[str]:
    """The ``Protocol`` classes of ``gateway/domain/ports.py``."""
    tree = ast.parse((ROOT / "gateway/domain/ports.py").read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and any(isinstance(b, ast.Name) and b.id == "Protocol" for b in node.bases)
    }


def findings(tree: ast.AST, protocols: set[str]) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id == "Routes":
            found.append((node.lineno, "Routes built"))
        if node.func.id == "isinstance" and len(node.args) == 2:
            kinds = node.args[1]
            names = list(kinds.elts) if isinstance(kinds, ast.Tuple) else [kinds]
            for name in names:
                if isinstance(name, ast.Name) and name.id in protocols:
                    found.append((node.lineno, f"isinstance against the seam {name.id}"))
    return found


def test_routes_are_built_and_capabilities_decided_in_the_composition_root_only() -> None:
    protocols = seams()
    assert {"ShadowStore", "FailoverSuspensions", "Reconcilable"} <= protocols
    offences = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sorted((ROOT / "gateway").rglob("*.py"))
        if str(path.relative_to(ROOT)) not in COMPOSITION
        for line, what in findings(ast.parse(path.read_text(encoding="utf-8")), protocols)
    ]
    assert offences == [], "\n".join(offences)


def test_the_check_finds_a_routes_built_and_a_seam_asked() -> None:
    source = "r = Routes(s, c, p, x)\nok = isinstance(store, (ShadowStore, int))\n"
    assert findings(ast.parse(source), {"ShadowStore"}) == [
        (1, "Routes built"),
        (2, "isinstance against the seam ShadowStore"),
    ]


def env_reads(tree: ast.AST) -> list[int]:
    """Lines that read ``ONEJOB_SHORTCUTS`` or ``ONEJOB_DATABASE_*`` (``from_env``)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "from_env"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in ("ShortcutsConfig", "DatabaseConfig")
    ]


def test_the_shortcut_and_database_choices_are_made_by_the_settings_only() -> None:
    """The store and the dispatcher take the shortcuts and the database settings they are
    given: ``Settings`` reads ``ONEJOB_SHORTCUTS`` and ``ONEJOB_DATABASE_*``, and the
    composition root passes its choice on."""
    offences = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "gateway").rglob("*.py"))
        if str(path.relative_to(ROOT)) != "gateway/settings.py"
        for line in env_reads(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert offences == [], "\n".join(offences)


def test_the_check_finds_a_read_of_the_environment() -> None:
    source = "x = 1\nshortcuts = shortcuts or ShortcutsConfig.from_env()\n"
    assert env_reads(ast.parse(source)) == [2]
    assert env_reads(ast.parse("config = config or DatabaseConfig.from_env()")) == [1]


def test_the_dispatcher_knows_nothing_of_the_http_edge() -> None:
    """The dispatcher lets woken waiters answer before its bookkeeping whatever the server
    does (it waited only when the edge's ``write_batching`` was on, reading its setting)."""
    for path in sorted((ROOT / "gateway/dispatch").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "write_batching" not in text, path
        assert "gateway.http" not in text, path


def test_the_service_gets_its_local_runner_when_built() -> None:
    """No setter: the composition root builds the dispatcher first and hands it to the
    service (``local_runner``), which runs new jobs' first attempts on it."""
    from gateway.background import DispatcherService
    from gateway.domain.ports import LocalRunner
    from gateway.service import JobService

    assert not [name for name in dir(JobService) if name.startswith(("use_", "set_"))]
    assert all(
        callable(getattr(DispatcherService, m, None))
        for m in vars(LocalRunner)
        if not m.startswith("_")
    )
