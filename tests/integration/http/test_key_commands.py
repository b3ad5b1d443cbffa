"""``onejob keys list | revoke | rotate``: a revoked key is refused at once on every gateway."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar

pytestmark = pytest.mark.slow

ONEJOB = [str(Path(sys.executable).parent / "onejob")]


def onejob(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ONEJOB, *args],
        cwd=cwd,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_revoke_and_rotate_take_effect_at_once_on_two_gateways_and_list_hides_secrets(
    app: Litestar,
    keys: Any,
    database_url: str,
    tmp_path: Path,
    served: Callable[[Litestar], contextlib.AbstractAsyncContextManager[str]],
    second_gateway: Callable[[], contextlib.AbstractAsyncContextManager[str]],
) -> None:
    db = ["--database-url", database_url]
    async with served(app) as one, second_gateway() as two:
        async with httpx.AsyncClient(timeout=10) as http:
            for base in (one, two):
                r = await http.get(f"{base}/v1/me", headers=keys.auth("alice"))
                assert r.status_code == 200
            listed = onejob("keys", "list", "--owner", "alice", *db, cwd=tmp_path)
            assert listed.returncode == 0, listed.stderr
            (line,) = listed.stdout.splitlines()
            key_id, owner, scopes, _created, state = line.split("\t")
            assert (owner, scopes, state) == ("alice", "jobs", "active")
            assert keys.alice not in listed.stdout + listed.stderr

            rotated = onejob("keys", "rotate", key_id, *db, cwd=tmp_path)
            assert rotated.returncode == 0, rotated.stderr
            new_secret = rotated.stdout.strip()
            assert new_secret and new_secret != keys.alice
            for base in (one, two):
                old = await http.get(f"{base}/v1/me", headers=keys.auth("alice"))
                assert old.status_code == 401
                assert old.headers["www-authenticate"].startswith("Bearer")
                new = await http.get(
                    f"{base}/v1/me", headers={"Authorization": f"Bearer {new_secret}"}
                )
                assert new.json() == {"owner": "alice", "scopes": ["jobs"]}

            all_keys = onejob("keys", "list", *db, cwd=tmp_path).stdout.splitlines()
            new_id = next(
                k.split("\t")[0] for k in all_keys if k.endswith("\tactive") and "\talice\t" in k
            )
            assert onejob("keys", "revoke", new_id, *db, cwd=tmp_path).returncode == 0
            for base in (one, two):
                r = await http.get(
                    f"{base}/v1/me", headers={"Authorization": f"Bearer {new_secret}"}
                )
                assert r.status_code == 401
            again = onejob("keys", "revoke", new_id, *db, cwd=tmp_path)
            assert again.returncode == 1 and "no active key" in again.stderr
            assert onejob("keys", "rotate", key_id, *db, cwd=tmp_path).returncode == 1
            # Other owners' keys were not touched.
            r = await http.get(f"{one}/v1/me", headers=keys.auth("bob"))
            assert r.status_code == 200
