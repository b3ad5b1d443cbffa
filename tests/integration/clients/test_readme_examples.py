"""The clients' READMEs, run as written: each one's shell block in bash and its program
(saved under the name the README gives it) against a served gateway with the bundled
simulator, from a checkout-shaped folder (the client's sources and the gateway's .venv).

Only where the README names this machine's places are they changed: the gateway's address
(a free port) and the scratch folder under /tmp (the test's own). The program runs four
times: once as a newcomer runs it (the job succeeds, the fallback is not pressed), again
(the stored intention gives the same job back), with a new intention whose primary hangs
past its timeout (the job is unknown: the fallback button answers "still in progress,
wait"), and with one both providers fail (the button adds an attempt, which succeeds).
None of them may end in an uncaught error such as JobClosed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from served_gateway import Stack

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
ADDRESS = "http://127.0.0.1:8000"
SCRATCH = "/tmp/onejob-app"
RUN_TIMEOUT = 240.0  # seconds for the shell block: a virtualenv and a pip install in it
JOB_LINE = re.compile(r"^job (job_[0-9A-Z]{26}) \(replayed: (\w+)\)$", re.M)


def blocks(readme: Path) -> dict[str, str]:
    """Return the README's fenced blocks by language; each language must appear once."""
    found: dict[str, str] = {}
    for match in FENCE.finditer(readme.read_text(encoding="utf-8")):
        lang, body = match.group(1), match.group(2)
        assert lang not in found, f"{readme}: a second {lang!r} block (the test runs one)"
        found[lang] = body
    return found


def checkout(tmp_path: Path, client: str) -> Path:
    """Return a folder shaped as a checkout: ``clients/<client>`` and the gateway's .venv."""
    root = tmp_path / "checkout"
    shutil.copytree(
        ROOT / "clients" / client,
        root / "clients" / client,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "node_modules", "__pycache__"),
    )
    (root / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return root


def environment(stack: Stack, tmp_path: Path) -> dict[str, str]:
    """The variables of a shell in which ``.venv/bin/onejob`` reaches the served gateway."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONEJOB_", "VIRTUAL_ENV"))}
    env["ONEJOB_CONFIG"] = str(stack.work_dir / "onejob.toml")
    env["ONEJOB_DATABASE_URL"] = f"sqlite+aiosqlite:///{stack.work_dir / 'onejob.db'}"
    env["TMPDIR"] = str(tmp_path)
    return env


def placed(text: str, stack: Stack, scratch: Path) -> str:
    return text.replace(ADDRESS, stack.gateway).replace(SCRATCH, str(scratch))


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run a command to its end; fail with its output unless it exits 0."""
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}"
    assert "Traceback" not in done.stdout and "JobClosed" not in done.stdout, done.stdout
    return done.stdout


def job_line(output: str) -> tuple[str, str]:
    """Return the job id and ``true``/``false`` (replayed) of the program's first line."""
    found = JOB_LINE.findall(output)
    assert len(found) == 1, output
    return found[0][0], found[0][1].lower()


def check_four_runs(
    stack: Stack, first: str, again: list[str], saved: Path, cwd: Path, env: dict[str, str]
) -> None:
    """Check the README's run, then run the program again as the module says (in the same
    terminal, as it were: with an API key of alice's)."""
    env = {**env, "ONEJOB_API_KEY": stack.key}
    job_id, replayed = job_line(first)
    assert replayed == "false", first
    assert re.search(r"^succeeded: .*priority", first, re.M), first
    assert stack.job(job_id)["status"] == "succeeded"
    assert [c["provider"] for c in stack.sim_calls(job_id)] == ["sim-openai"]

    second = run(again, cwd, env)
    assert job_line(second) == (job_id, "true"), second
    assert re.search(r"^succeeded: ", second, re.M), second

    saved.unlink()  # a new wish: a new intention, whose primary hangs until it times out
    stack.sim_script("sim-openai", {"kind": "hang"})
    third = run(again, cwd, env)
    unknown_id, replayed = job_line(third)
    assert unknown_id != job_id and replayed == "false", third
    attempt = stack.job(unknown_id)["attempts"][0]
    assert f"attempt {attempt['id']} is unknown: wait" in third, third
    assert re.search(r"^unknown: (None|null)$", third, re.M), third
    assert [a["provider"] for a in stack.job(unknown_id)["attempts"]] == ["sim-openai"]

    saved.unlink()  # another wish, which both providers fail: the button adds an attempt
    stack.sim_script("sim-openai", {"kind": "status", "code": 500})
    stack.sim_script("sim-anthropic", {"kind": "status", "code": 500})
    fourth = run(again, cwd, env)
    failed_id, _ = job_line(fourth)
    assert re.search(r"^succeeded: .*priority", fourth, re.M), fourth
    attempts = stack.job(failed_id)["attempts"]
    assert [(a["provider"], a["reason"], a["state"]) for a in attempts] == [
        ("sim-openai", "initial", "failed"),
        ("sim-anthropic", "failover", "failed"),
        ("sim-anthropic", "manual", "succeeded"),
    ]


def test_the_python_clients_readme_runs_as_written(fresh: Stack, tmp_path: Path) -> None:
    code = blocks(ROOT / "clients/python/README.md")
    root, scratch = checkout(tmp_path, "python"), tmp_path / "onejob-app"
    (root / "triage.py").write_text(placed(code["python"], fresh, scratch), encoding="utf-8")
    env = environment(fresh, tmp_path)
    shell = "set -euo pipefail\n" + placed(code["sh"], fresh, scratch)

    first = run(["bash", "-c", shell], root, env)

    again = [str(scratch / "bin/python"), "triage.py"]
    check_four_runs(fresh, first, again, tmp_path / "SUP-42.intention.json", root, env)


@pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None,
    reason="node or npm is not installed (.ci/system-packages installs both)",
)
def test_the_js_clients_readme_runs_as_written(fresh: Stack, tmp_path: Path) -> None:
    code = blocks(ROOT / "clients/js/README.md")
    root, scratch = checkout(tmp_path, "js"), tmp_path / "onejob-app"
    scratch.mkdir()
    (scratch / "triage.mjs").write_text(placed(code["js"], fresh, scratch), encoding="utf-8")
    env = environment(fresh, tmp_path)
    shell = "set -euo pipefail\n" + placed(code["sh"], fresh, scratch)

    first = run(["bash", "-c", shell], root, env)

    assert (scratch / "node_modules/onejob-client/package.json").exists()
    check_four_runs(
        fresh, first, ["node", "triage.mjs"], scratch / "SUP-42.intention.json", scratch, env
    )
