"""Every speed shortcut is listed with what it relies on, and what it relies on is there.

``gateway/shortcuts.py`` is the one place the shortcuts around libraries are written down.
A dependency upgrade that removes a private name a shortcut takes fails here, naming the
shortcut and its setting (turn it off to run the plain library path meanwhile).
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from gateway.settings import ShortcutsConfig
from gateway.shortcuts import HARDENING, SHORTCUTS, Shortcut

ROOT = Path(__file__).resolve().parents[2]
EVERY = SHORTCUTS + HARDENING


def resolve(name: str) -> object:
    """Import ``module:attribute.attribute`` and return the attribute; for
    ``module:Class#attribute``, check that ``Class.__init__`` sets it."""
    module, _, path = name.partition(":")
    path, _, instance_attribute = path.partition("#")
    found: object = importlib.import_module(module)
    for part in path.split("."):
        found = getattr(found, part)
    if instance_attribute:
        init = inspect.getsource(found.__init__)  # type: ignore[misc]
        if f"self.{instance_attribute} =" not in init and f"self.{instance_attribute}:" not in init:
            raise AttributeError(f"{path}.__init__ no longer sets {instance_attribute}")
    return found


@pytest.mark.parametrize(
    ("shortcut", "name"),
    [(s, name) for s in EVERY for name in s.private],
    ids=lambda v: v.setting or v.code if isinstance(v, Shortcut) else v,
)
def test_every_private_name_a_shortcut_takes_is_still_there(shortcut: Shortcut, name: str) -> None:
    try:
        resolve(name)
    except (ImportError, AttributeError) as exc:
        way_back = (
            f"set [shortcuts] {shortcut.setting} = false (or ONEJOB_SHORTCUTS=off) meanwhile"
            if shortcut.setting
            else "no plain path: adapt the code"
        )
        pytest.fail(f"{shortcut.code} relies on {name}, which is gone ({exc}); {way_back}")


def test_every_shortcut_has_its_setting_and_every_setting_a_shortcut() -> None:
    assert sorted(s.setting for s in SHORTCUTS) == sorted(ShortcutsConfig.model_fields)


def test_every_shortcut_names_its_record_in_the_decisions() -> None:
    headings = {
        line.removeprefix("## ").strip()
        for line in (ROOT / "docs" / "decisions.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    }
    missing = [s.decision for s in EVERY if s.decision not in headings]
    assert not missing


def test_every_shortcut_points_at_code_that_exists() -> None:
    for s in EVERY:
        for part in s.code.split(";"):
            path = part.strip().split(" ")[0].rstrip(",")
            assert (ROOT / path).exists(), (s.setting, path)


def test_onejob_shortcuts_off_turns_every_one_off() -> None:
    assert ShortcutsConfig.from_env({"ONEJOB_SHORTCUTS": "off"}) == ShortcutsConfig.all_off()
    assert ShortcutsConfig.from_env({}) == ShortcutsConfig()
    with pytest.raises(ValueError, match="on or off"):
        ShortcutsConfig.from_env({"ONEJOB_SHORTCUTS": "maybe"})
