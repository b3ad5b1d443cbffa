"""Fixtures for the contract integration tests: the CLI parser and writable catalog copies."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from certify.cassettes import CASSETTE_ROOT
from cli import certify as certify_commands
from contracts.loader import CATALOG_ROOT


def parse(*argv: str) -> argparse.Namespace:
    """Parse ``onejob`` arguments with only the contract commands registered."""
    parser = argparse.ArgumentParser(prog="onejob")
    certify_commands.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(list(argv))


@pytest.fixture
def catalog_copy(tmp_path: Path) -> Path:
    """Return a writable copy of the shipped catalog."""
    dst = tmp_path / "catalog"
    shutil.copytree(CATALOG_ROOT, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


@pytest.fixture
def cassettes_copy(tmp_path: Path) -> Path:
    """Return a writable copy of the committed cassettes."""
    dst = tmp_path / "cassettes"
    shutil.copytree(CASSETTE_ROOT, dst)
    return dst
