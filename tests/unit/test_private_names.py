"""Another library's private names are taken only where ``gateway/shortcuts.py`` says.

Every shipped module is read with the stdlib ``ast``; what it takes of another library
that is not that library's public API is a *use*:

- an import of a private module (a ``_`` component, ``litestar._asgi``) or of a module
  its library keeps internal though its name has no ``_`` (``INTERNAL_MODULES``);
- ``from library import _name``;
- in a class that subclasses another library's class: a read, a write or an override of
  a ``_name`` that class (or a class above it) has, on ``self``, ``cls`` or ``super()``;
- any other read of ``something._name`` (``getattr(something, "_name")`` included) whose
  ``_name`` the module does not define itself (a def, a class, an assignment, a slot), so
  it is not the module's own; the few project names read across modules are in
  ``OWN_ACROSS_MODULES``, and the few underscore names their libraries document as public
  in ``PUBLIC_UNDERSCORE``.

Dunders (``__await__``, ``__struct_config__``) are Python's protocols, not private names,
and are not uses. The allow-list is built from the shortcuts' own declarations
(``Shortcut.private``), each good in the files of that shortcut's ``code`` only: a use
anywhere else fails, naming file:line, and so does a declared private name that none of
its shortcut's files uses any more (the table and the code cannot drift apart).
``tests/unit/test_shortcuts.py`` checks that every declared name is still in its library.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import inspect
import re
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

import pytest

from gateway.shortcuts import HARDENING, SHORTCUTS, Shortcut

ROOT = Path(__file__).resolve().parents[2]
#: The packages of the wheel (tests/unit/test_layout.py's list).
SHIPPED = ("gateway", "providers", "contracts", "certify", "scenarios", "reports", "cli")
EVERY = SHORTCUTS + HARDENING

#: Modules with no ``_`` in their name that their library still does not offer as API.
INTERNAL_MODULES: dict[str, str] = {
    "sqlalchemy.util": "SQLAlchemy's own helpers (greenlet_spawn, await_): not in its API "
    "reference; an event that must await the driver has AdaptedConnection.run_async",
    "uvicorn.protocols": "uvicorn's protocol implementations: chosen by --http, not an API "
    "to subclass (the edge does, as HARDENING says)",
}

#: Underscore names their library documents as public API.
PUBLIC_UNDERSCORE: dict[str, str] = {
    "_mapping": "SQLAlchemy's Row._mapping (the row as a mapping, documented)",
    "_replace": "namedtuple._replace (documented)",
}

#: (file, name): a project's own private name read in another module of the project, and why.
OWN_ACROSS_MODULES: dict[tuple[str, str], str] = {
    ("scenarios/netpartition.py", "_env"): "scenarios.harness.Harness._env: a gateway "
    "process's environment, built the harness's way for the process it starts itself",
}

#: (file, key): another library's private name outside the shortcuts, not yet moved, each
#: with its public path. Keep it empty: an entry is a debt, not a permission.
NOT_YET_MOVED: dict[tuple[str, str], str] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class Use:
    """One private name of another library taken by a shipped module."""

    path: str  #: the file, from the repository's root
    line: int
    key: str  #: ``module``, ``module:name``, ``Class._name``, or ``?._name`` (owner unknown)
    how: str  #: what the code does with it

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.how}"


def is_private_name(name: str) -> bool:
    """A ``_name``, not a dunder."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def is_private_module(module: str) -> bool:
    """A module with a ``_`` component, or one ``INTERNAL_MODULES`` names (or below it)."""
    if any(is_private_name(part) for part in module.split(".")):
        return True
    return any(module == m or module.startswith(m + ".") for m in INTERNAL_MODULES)


def is_own(module: str) -> bool:
    return module.split(".")[0] in SHIPPED


@cache
def _private_attributes(cls: type) -> frozenset[str]:
    """The ``_names`` a class of another library has: in its namespace, its slots, or set on
    ``self`` anywhere in its source."""
    names = {n for n in vars(cls) if is_private_name(n)}
    slots = vars(cls).get("__slots__", ())
    names.update(n for n in ([slots] if isinstance(slots, str) else slots) if is_private_name(n))
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # a class written in C: its namespace says it all
        source = ""
    names.update(n for n in re.findall(r"\bself\.(_\w+)", source) if is_private_name(n))
    return frozenset(names)


def _import_object(module: str, path: Iterable[str]) -> object:
    found: object = importlib.import_module(module)
    for part in path:
        found = getattr(found, part)
    return found


class _Module:
    """What one module's source takes of other libraries."""

    def __init__(self, source: str, path: str, module: str) -> None:
        self.tree = ast.parse(source)
        self.path = path
        self.module = module
        self.package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        #: local name -> (module, attribute path) it is bound to by an import
        self.bindings: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.classes = {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}
        self.uses: list[Use] = []
        self.unresolved: list[str] = []
        #: attribute nodes already judged as a class's use of its library base
        self._judged: set[int] = set()

    # -- imports ---------------------------------------------------------------------
    def _absolute(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = self.package.split(".")[: len(self.package.split(".")) - node.level + 1]
        return ".".join([*base, node.module] if node.module else base)

    def read_imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.bindings[alias.asname] = (alias.name, ())
                    else:
                        root = alias.name.split(".")[0]
                        self.bindings[root] = (root, ())
                    if not is_own(alias.name) and is_private_module(alias.name):
                        self._use(node, alias.name, f"imports {alias.name}")
            elif isinstance(node, ast.ImportFrom):
                target = self._absolute(node)
                if target == "__future__":
                    continue
                for alias in node.names:
                    self.bindings[alias.asname or alias.name] = (target, (alias.name,))
                    if is_own(target):
                        continue
                    if is_private_module(target) or is_private_name(alias.name):
                        key = f"{target}:{alias.name}"
                        self._use(node, key, f"imports {alias.name} from {target}")

    # -- classes of another library's ---------------------------------------------------
    def _base_classes(self, node: ast.ClassDef, seen: frozenset[str] = frozenset()) -> list[type]:
        """The runtime classes above ``node`` that are not the project's own."""
        found: list[type] = []
        for base in node.bases:
            expr = base.value if isinstance(base, ast.Subscript) else base
            dotted: list[str] = []
            while isinstance(expr, ast.Attribute):
                dotted.insert(0, expr.attr)
                expr = expr.value
            if not isinstance(expr, ast.Name):
                self.unresolved.append(f"{self.path}:{node.lineno}: {ast.unparse(base)}")
                continue
            if not dotted and expr.id in self.classes and expr.id not in seen:
                found += self._base_classes(self.classes[expr.id], seen | {node.name})
                continue
            if expr.id not in self.bindings:
                if hasattr(builtins, expr.id):
                    continue  # object, Exception, dict...: Python's own
                self.unresolved.append(f"{self.path}:{node.lineno}: {ast.unparse(base)}")
                continue
            module, path = self.bindings[expr.id]
            try:
                cls = _import_object(module, (*path, *dotted))
            except (ImportError, AttributeError):
                self.unresolved.append(f"{self.path}:{node.lineno}: {ast.unparse(base)}")
                continue
            if isinstance(cls, type):
                found += [c for c in cls.__mro__ if not is_own(c.__module__) and c is not object]
        return found

    def read_classes(self) -> None:
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [c for c in self._base_classes(node) if c.__module__ != "builtins"]
            if not bases:
                continue
            owner = bases[0].__name__  # the library class the code subclasses

            theirs = frozenset().union(*(_private_attributes(c) for c in bases))
            for item in node.body:
                names: list[str] = []
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.append(item.name)
                elif isinstance(item, ast.Assign):
                    names += [t.id for t in item.targets if isinstance(t, ast.Name)]
                for name in names:
                    if name in theirs:
                        key = f"{owner}.{name}"
                        self._use(item, key, f"{node.name} overrides {key}")
            for sub in ast.walk(node):
                if not (isinstance(sub, ast.Attribute) and sub.attr in theirs):
                    continue
                on = sub.value
                on_self = isinstance(on, ast.Name) and on.id in ("self", "cls")
                on_super = (
                    isinstance(on, ast.Call)
                    and isinstance(on.func, ast.Name)
                    and on.func.id == "super"
                )
                if on_self or on_super:
                    self._judged.add(id(sub))
                    verb = "sets" if isinstance(sub.ctx, ast.Store) else "reads"
                    key = f"{owner}.{sub.attr}"
                    self._use(sub, key, f"{node.name} {verb} {ast.unparse(on)}.{sub.attr} ({key})")

    # -- any other read ------------------------------------------------------------------
    def _defined_here(self) -> set[str]:
        names: set[str] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and id(node) not in self._judged
            ):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[0])
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
            ):
                names.update(
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
        return {n for n in names if is_private_name(n)}

    def read_attributes(self) -> None:
        own = self._defined_here()
        for node in ast.walk(self.tree):
            name: str | None = None
            if isinstance(node, ast.Attribute) and id(node) not in self._judged:
                on = node.value
                if isinstance(on, ast.Name) and on.id in ("self", "cls"):
                    continue  # the class's own (a library base's is judged above)
                if isinstance(on, ast.Call) and ast.unparse(on.func) == "super":
                    continue
                name, what = node.attr, ast.unparse(node)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                name, what = node.args[1].value, ast.unparse(node)
            if name is None or not is_private_name(name) or name in own:
                continue
            if name in PUBLIC_UNDERSCORE or (self.path, name) in OWN_ACROSS_MODULES:
                continue
            self._use(node, f"?.{name}", f"reads {what}, not a name of this module")

    def _use(self, node: ast.AST, key: str, how: str) -> None:
        self.uses.append(Use(self.path, getattr(node, "lineno", 0), key, how))


def private_uses(source: str, path: str, module: str) -> tuple[list[Use], list[str]]:
    """Return what ``source`` takes of other libraries' private names, and the class bases it
    could not resolve (so could not check)."""
    found = _Module(source, path, module)
    found.read_imports()
    found.read_classes()
    found.read_attributes()
    return found.uses, found.unresolved


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def shipped_files() -> Iterator[Path]:
    for package in SHIPPED:
        yield from sorted(p for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


# -- the allow-list, from gateway/shortcuts.py -----------------------------------------------
def code_files(shortcut: Shortcut) -> set[str]:
    """The files a shortcut's ``code`` names (``path (what); path``)."""
    return {part.strip().split(" ")[0].rstrip(",") for part in shortcut.code.split(";")}


def keys_of(declared: str) -> set[str]:
    """The ``Use.key``s a declared ``module:path.to.name`` (or ``#name``) covers."""
    module, _, path = declared.partition(":")
    path, _, instance = path.partition("#")
    parts = path.split(".") if path else []
    keys = {module}
    if parts:
        keys.add(f"{module}:{parts[0]}")
    name = instance or (parts[-1] if parts else "")
    owner = parts[-1] if instance else (parts[-2] if len(parts) > 1 else None)
    if owner:
        keys.add(f"{owner}.{name}")
    if name:
        keys.add(f"?.{name}")
    return keys


def taken_by(declared: str, used: set[str]) -> bool | None:
    """Whether a file whose uses have the keys ``used`` takes ``declared``; None when the
    checker cannot see it (a public-looking name of a public module, a dunder).

    A ``_name`` must be used itself; a name of a private or internal module is taken by any
    import from that module (the class it belongs to is imported, its attributes read).
    """
    module, _, path = declared.partition(":")
    name = re.split(r"[.#]", path)[-1] if path else ""
    if is_private_name(name):
        return bool(keys_of(declared) & used)
    if is_private_module(module):
        return any(k == module or k.startswith(module + ":") for k in used)
    return None


def allowed(shortcuts: Iterable[Shortcut]) -> dict[str, set[str]]:
    """file -> the keys the shortcuts living there declare."""
    allow: dict[str, set[str]] = {}
    for s in shortcuts:
        for path in code_files(s):
            for declared in s.private:
                allow.setdefault(path, set()).update(keys_of(declared))
    return allow


def undeclared(uses: Iterable[Use], shortcuts: Iterable[Shortcut]) -> list[Use]:
    allow = allowed(shortcuts)
    return [u for u in uses if u.key not in allow.get(u.path, set())]


def unused(uses: Iterable[Use], shortcuts: Iterable[Shortcut]) -> list[str]:
    """Declared private names none of their shortcut's files takes."""
    uses = list(uses)
    stale = []
    for s in shortcuts:
        used = {u.key for u in uses if u.path in code_files(s)}
        for declared in s.private:
            if taken_by(declared, used) is False:
                stale.append(f"{s.setting or s.code}: {declared}")
    return stale


@cache
def every_use() -> tuple[tuple[Use, ...], tuple[str, ...]]:
    uses: list[Use] = []
    unresolved: list[str] = []
    for path in shipped_files():
        rel = path.relative_to(ROOT).as_posix()
        found, missed = private_uses(path.read_text(encoding="utf-8"), rel, module_name(path))
        uses += found
        unresolved += missed
    return tuple(uses), tuple(unresolved)


# -- the checks ------------------------------------------------------------------------------
def test_no_private_name_of_another_library_outside_the_shortcuts() -> None:
    uses, _ = every_use()
    wrong = [u for u in undeclared(uses, EVERY) if (u.path, u.key) not in NOT_YET_MOVED]
    assert not wrong, (
        "private names of other libraries, not declared by a shortcut of this file in "
        "gateway/shortcuts.py (move the code into the shortcut's module, or find a public "
        "way):\n" + "\n".join(map(str, wrong))
    )


def test_every_declared_private_name_is_taken_where_its_shortcut_lives() -> None:
    uses, _ = every_use()
    assert unused(uses, EVERY) == []


def test_every_debt_is_still_owed() -> None:
    """An entry of ``NOT_YET_MOVED`` whose use is gone goes too."""
    uses, _ = every_use()
    owed = {(u.path, u.key) for u in uses}
    assert sorted(set(NOT_YET_MOVED) - owed) == []


def test_every_class_base_is_resolved() -> None:
    """A base the checker cannot import would hide its private names."""
    _, unresolved = every_use()
    assert unresolved == ()


def test_the_checker_reads_the_whole_tree() -> None:
    uses, _ = every_use()
    paths = {u.path for u in uses}
    assert "gateway/store/sqlite_inline.py" in paths
    assert "gateway/http/direct.py" in paths


# -- the checker can fail ----------------------------------------------------------------------
VIOLATIONS = """
import litestar._asgi.utils
from httpcore._utils import is_socket_readable
from sqlalchemy.util.concurrency import await_
from httpx import _client
import aiosqlite

class Inline(aiosqlite.Connection):
    def __init__(self) -> None:
        self._mine = 1
        self._tx = None

    async def _connect(self):
        return self._connection

def socket_of(conn):
    return getattr(conn, "_transport", None), conn._protocol, conn._mine
"""


def _keys(source: str, module: str = "gateway.example") -> dict[str, int]:
    uses, unresolved = private_uses(source, "gateway/example.py", module)
    assert unresolved == []
    return {u.key: u.line for u in uses}


def test_the_checker_finds_each_kind_of_use() -> None:
    assert _keys(VIOLATIONS) == {
        "litestar._asgi.utils": 2,
        "httpcore._utils:is_socket_readable": 3,
        "sqlalchemy.util.concurrency:await_": 4,
        "httpx:_client": 5,
        "Connection._tx": 11,
        "Connection._connect": 13,
        "Connection._connection": 14,
        "?._transport": 17,
        "?._protocol": 17,
    }


def test_the_checker_leaves_the_module_s_own_names_and_dunders_alone() -> None:
    own = """
from gateway.store import engine

class Kept:
    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = []
        self._count = 0

    def take(self, other: "Kept") -> int:
        return len(other._held) + other._count + _helper()

def _helper() -> int:
    row = engine.something()
    return row._mapping["n"] + type(row).__struct_config__.x

async def wait(conn):
    return await conn.__await__()
"""
    assert _keys(own) == {}


def test_a_use_is_allowed_only_in_the_files_of_the_shortcut_that_declares_it() -> None:
    shortcut = Shortcut(
        setting="example",
        code="gateway/example.py (Inline)",
        skips="-",
        measured="-",
        decision="-",
        private=(
            "litestar._asgi.utils:is_valid_host",
            "httpcore._utils:is_socket_readable",
            "sqlalchemy.util.concurrency:await_",
            "httpx:_client",
            "aiosqlite.core:Connection#_tx",
            "aiosqlite.core:Connection._connect",
            "aiosqlite.core:Connection#_connection",
            "asyncpg.connection:Connection._transport",
        ),
    )
    uses, _ = private_uses(VIOLATIONS, "gateway/example.py", "gateway.example")
    assert [u.key for u in undeclared(uses, [shortcut])] == ["?._protocol"]
    elsewhere = dataclasses.replace(shortcut, code="gateway/other.py")
    assert len(undeclared(uses, [elsewhere])) == len(uses)
    assert unused(uses, [elsewhere]) == [f"example: {d}" for d in shortcut.private]
    stale = dataclasses.replace(shortcut, private=("uvicorn.protocols.http.h11_impl:H11Protocol",))
    assert unused(uses, [stale]) == ["example: uvicorn.protocols.http.h11_impl:H11Protocol"]


@pytest.mark.parametrize("module", sorted(INTERNAL_MODULES))
def test_every_internal_module_named_exists(module: str) -> None:
    importlib.import_module(module)


def test_every_public_underscore_name_is_still_read_somewhere() -> None:
    """An entry nobody reads any more goes (a library's public name it may shadow stays)."""
    read: set[str] = set()
    for path in shipped_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute):
                read.add(node.attr)
    assert sorted(set(PUBLIC_UNDERSCORE) - read) == []
