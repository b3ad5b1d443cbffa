"""Load the contract suite's plugin: ``--onejob-mode``, ``--onejob-repeats``, ``--onejob-seed``.

The plugin is ``certify.pytest_plugin``; importing its hooks here (rather than naming it in
``pytest_plugins``) keeps the suite loadable however it is reached. Given on the command
line (``pytest tests/contract_suite ...``), this conftest is read before the options are
parsed; reached any other way, the options keep their defaults (replay, k=3, a fresh seed).
"""

from __future__ import annotations

from certify.pytest_plugin import (
    onejob_mode,
    onejob_repeats,
    onejob_seed,
    pytest_addoption,
    pytest_configure,
    pytest_configure_node,
    pytest_report_header,
)

__all__ = [
    "onejob_mode",
    "onejob_repeats",
    "onejob_seed",
    "pytest_addoption",
    "pytest_configure",
    "pytest_configure_node",
    "pytest_report_header",
]
