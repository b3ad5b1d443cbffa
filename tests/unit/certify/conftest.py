"""Fixtures for the certification tool's unit tests: a writable copy of one catalog contract."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from contracts.loader import CATALOG_ROOT


@pytest.fixture
def triage_dir(tmp_path: Path) -> Path:
    """Return a writable copy of the ticket-triage contract folder."""
    dst = tmp_path / "catalog" / "ticket-triage"
    shutil.copytree(
        CATALOG_ROOT / "ticket-triage", dst, ignore=shutil.ignore_patterns("__pycache__")
    )
    return dst
