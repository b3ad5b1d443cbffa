"""README.md's walk-through, run verbatim: its shell blocks in one bash against a served
gateway (a temporary SQLite file, free ports), each answer checked against the output
block the README shows after it (status line, headers, and every scalar JSON field)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
from served import ONEJOB, serving, wait_healthy

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[3] / "README.md"
SECTION = "## A walk-through with curl"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
#: "key":value pairs whose value is a string, a number, a boolean or null.
SCALAR_PAIR = re.compile(r'"([a-z_]+)":("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|null|true|false)')
IDS = re.compile(r"\b(job|att)_[0-9A-Z]+…?")
MARK = "@@ block {} @@"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def walkthrough() -> list[tuple[str, str | None]]:
    """Return each ``sh`` block of the section with the output block after it, if any."""
    text = README.read_text(encoding="utf-8")
    start = text.index(SECTION)
    section = text[start : text.index("\n## ", start + len(SECTION))]
    blocks = [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(section)]
    pairs: list[tuple[str, str | None]] = []
    for n, (lang, body, _, end) in enumerate(blocks):
        if lang != "sh":
            continue
        after = blocks[n + 1] if n + 1 < len(blocks) else None
        adjacent = after is not None and not section[end : after[2]].strip()
        shown = after[1] if after is not None and adjacent and after[0] == "" else None
        pairs.append((body, shown))
    return pairs


def normalized(text: str) -> str:
    return IDS.sub(r"\1_ID", text.replace("\r", ""))


def check(shown: str, got: str) -> None:
    """Check that ``got`` says what the README shows: status line, headers, JSON fields."""
    shown, got = normalized(shown), normalized(got)
    got_lines = {line.strip().lower() for line in got.splitlines()}
    for line in shown.splitlines():
        if line.startswith("HTTP/"):
            assert line.lower() in got_lines, f"{line!r} not in\n{got}"
        elif re.fullmatch(r"[a-z-]+: .+", line):
            assert line.lower() in got_lines, f"header {line!r} not in\n{got}"
    joined = " ".join(line.strip() for line in shown.splitlines())
    for key, value in SCALAR_PAIR.findall(joined):
        assert f'"{key}":{value}' in got, f'"{key}":{value} not in\n{got}'


def test_the_readme_walkthrough_runs_verbatim_and_answers_as_shown(tmp_path: Path) -> None:
    pairs = walkthrough()
    assert len(pairs) >= 5, "the walk-through's shell blocks were not found"
    for block, _ in pairs:
        assert not IDS.search(block), f"a block hard-codes an id, so it cannot be pasted:\n{block}"
    port = free_port()
    onejob = ONEJOB[0]
    env = {
        "ONEJOB_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'onejob.db'}",
        "ONEJOB_PORT": str(port),
        "ONEJOB_SIM_PORT": str(free_port()),
        "ONEJOB_CERTIFICATIONS": str(tmp_path / "certifications.json"),
    }
    script = ["set -euo pipefail"]
    for n, (block, _) in enumerate(pairs):
        script += [f"printf '\\n{MARK.format(n)}\\n'", block]
    script.append("printf '\\n@@ JOB=%s @@\\n' \"$JOB\"")
    text = "\n".join(script).replace(".venv/bin/onejob", onejob)
    text = text.replace("http://127.0.0.1:8000", f"http://127.0.0.1:{port}")

    with serving(["serve"], tmp_path, **env) as proc:
        wait_healthy(f"http://127.0.0.1:{port}/healthz", proc, tmp_path / "serve.log")
        done = subprocess.run(
            ["bash", "-c", text],
            cwd=tmp_path,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stdout
    job = re.search(r"@@ JOB=(\S*) @@", done.stdout)
    assert job and re.fullmatch(r"job_[0-9A-Z]{26}", job.group(1)), done.stdout
    outputs = re.split(r"\n@@ block \d+ @@\n", done.stdout.split("\n@@ JOB=")[0])[1:]
    assert len(outputs) == len(pairs), done.stdout
    checked = 0
    for (_, shown), got in zip(pairs, outputs, strict=True):
        if shown is not None:
            check(shown, got)
            checked += 1
    assert checked >= 4, "the README's answers were not compared"
    assert f'"id":"{job.group(1)}"' in outputs[-1], "the last answer is not the created job"
