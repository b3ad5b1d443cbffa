"""Fixtures for the reconciler's integration tests (helpers live beside the tests)."""

from __future__ import annotations

import sys
from pathlib import Path

# Under --import-mode=importlib the helpers beside the tests need this path.
sys.path.insert(0, str(Path(__file__).parent))
