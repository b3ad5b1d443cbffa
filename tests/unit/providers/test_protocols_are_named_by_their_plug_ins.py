"""No shipped module names a wire protocol except its plug-in and the registry.

Whatever differs by protocol (the config's checks, snapshot suffixes, base-URL hints and
paths, the tokenizer, the simulator's stored-answer listing) is asked of the plug-in
through ``providers.registry``; a string literal equal to a registered protocol's name
anywhere else is a list or a comparison a new protocol would have to find and edit. Read
with the stdlib ``ast`` (docstrings and comments do not count: a docstring is never just
a protocol's name). ``bench/`` is not shipped and configures providers of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

from providers.registry import PLUGINS

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ("providers", "gateway", "certify", "contracts", "cli", "scenarios", "reports")
#: Modules that name a protocol as configuration data, and why (keep this short).
ALLOWED: dict[str, str] = {
    "gateway/settings.py": "simulator_defaults: the built-in simulated providers' config",
    "certify/simulated.py": "SIM_PROVIDERS: which protocol each --sim provider speaks",
    "scenarios/certs.py": "SIM_PROVIDERS: the scenarios' simulated providers",
}


def plug_in_homes() -> set[Path]:
    """Return each plug-in's package folder or module file (where its adapter lives)."""
    homes: set[Path] = set()
    for plugin in PLUGINS.values():
        top = ROOT.joinpath(*plugin.adapter.__module__.split(".")[:2])
        homes.add(top if top.is_dir() else top.with_suffix(".py"))
    return homes


def named_protocols(path: Path) -> list[str]:
    """Return ``line: name`` for every string constant in ``path`` equal to a protocol."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if node.value in PLUGINS
    ]


def scanned() -> list[Path]:
    homes = plug_in_homes()
    return [
        path
        for package in SHIPPED
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "providers" / "registry.py"
        and not any(path == home or home in path.parents for home in homes)
    ]


def test_the_plug_ins_are_found_where_their_adapters_live() -> None:
    homes = {str(home.relative_to(ROOT)) for home in plug_in_homes()}
    assert {"providers/openai", "providers/openai_compatible.py"} <= homes


def test_no_module_outside_the_plug_ins_and_the_registry_names_a_protocol() -> None:
    found = {
        str(path.relative_to(ROOT)): hits
        for path in scanned()
        if str(path.relative_to(ROOT)) not in ALLOWED and (hits := named_protocols(path))
    }
    assert found == {}, "ask the plug-in (providers.registry) instead of naming protocols"


def test_every_allowed_module_still_needs_its_place_on_the_list() -> None:
    stale = [name for name in ALLOWED if not named_protocols(ROOT / name)]
    assert stale == []
