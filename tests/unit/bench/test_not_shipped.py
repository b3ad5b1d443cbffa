"""The benchmarks stay out of the wheel: setuptools' package list never takes ``bench``."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatchcase
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_no_package_pattern_of_the_wheel_takes_bench() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    for name in ("bench", "bench.lib", "bench.processes"):
        assert not any(fnmatchcase(name, pattern) for pattern in include), name
    assert (ROOT / "bench" / "compare.py").is_file()
