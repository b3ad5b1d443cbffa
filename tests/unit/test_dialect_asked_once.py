"""Which database it is, is asked in one place (issue 44).

Before, the dialect was asked at seven places in four ways (``engine.dialect.name``,
``isinstance(db, Postgres)``, ``self.db.name == "postgresql"``, URL sniffing in four
modules). Now: the store's dialect is chosen when it is opened
(``gateway/store/dialects.py``), the engine's options where the engine is made
(``gateway/store/engine.py``), and what a URL decides before anything is opened is
``gateway.database_url.DatabaseKind``. Migrations aside, nothing else may ask: no
``.dialect.name``, no ``isinstance`` against the dialect objects, no comparison of a URL or
a name with ``"sqlite"``/``"postgresql"``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The gateway and its command line (scenarios choose the database a run is on: theirs).
SHIPPED = ("gateway", "cli")
#: The modules that decide it, and only these.
DECIDERS = {
    "gateway/store/dialects.py",
    "gateway/store/engine.py",
    "gateway/database_url.py",
}
DIALECT_CLASSES = {"Postgres", "Sqlite"}
NAMES = {"sqlite", "postgresql", "postgres"}


def asks(tree: ast.AST) -> list[tuple[int, str]]:
    """Where ``tree`` asks which database it runs on."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "name"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "dialect"
        ):
            found.append((node.lineno, ".dialect.name"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "isinstance" and len(node.args) == 2:
                kinds = node.args[1]
                names = [e for e in kinds.elts] if isinstance(kinds, ast.Tuple) else [kinds]
                if any(isinstance(n, ast.Name) and n.id in DIALECT_CLASSES for n in names):
                    found.append((node.lineno, "isinstance against a dialect object"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "get_backend_name") and any(
                isinstance(a, ast.Constant) and a.value in NAMES for a in node.args
            ):
                found.append((node.lineno, f".{node.func.attr}({node.args[0].value!r})"))  # type: ignore[attr-defined]
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Constant) and s.value in NAMES for s in sides):
                found.append((node.lineno, "a comparison with a database's name"))
    return found


def shipped_modules() -> list[Path]:
    return [
        path
        for package in SHIPPED
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def test_only_the_deciders_ask_which_database_it_is() -> None:
    offences = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in shipped_modules()
        if str(path.relative_to(ROOT)) not in DECIDERS
        for line, what in asks(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert offences == [], "\n".join(offences)


def test_the_check_finds_each_way_of_asking() -> None:
    source = """
kind = engine.dialect.name
if isinstance(db, Postgres): pass
if isinstance(db, (Sqlite, int)): pass
if url.startswith("sqlite"): pass
if self.db.name == "postgresql": pass
"""
    assert [what for _, what in asks(ast.parse(source))] == [
        ".dialect.name",
        "isinstance against a dialect object",
        "isinstance against a dialect object",
        ".startswith('sqlite')",
        "a comparison with a database's name",
    ]
