"""What the commands write into a checkout stays out of ``git status``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gateway.settings import Settings

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(
    not (ROOT / ".git").exists() or shutil.which("git") is None, reason="not a git checkout"
)
def test_the_registry_onejob_certify_writes_is_ignored_by_git() -> None:
    written = Path(Settings().certifications_path)  # where onejob certify and serve keep it
    lock = written.parent / f".{written.name}.lock"  # contracts.registry_file.locked's
    for path in (written, lock):
        done = subprocess.run(
            ["git", "check-ignore", "--no-index", "-q", str(path)], cwd=ROOT, check=False
        )
        assert done.returncode == 0, f"{path} would show as untracked after onejob certify"
