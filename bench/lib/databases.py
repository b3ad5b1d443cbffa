"""The benchmarks' databases: a fresh one per run, migrated, with an API key; dropped after."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

#: The PostgreSQL server's maintenance database, where the runs' databases are created.
PG_ADMIN = os.environ.get("ONEJOB_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextlib.contextmanager
def database(kind: str, work: Path) -> Iterator[str]:
    """Yield the SQLAlchemy URL of a fresh database of ``kind``; drop it afterwards."""
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{work / f'bench-{secrets.token_hex(4)}.db'}"
        return
    name = f"onejob_bench_{secrets.token_hex(4)}"
    subprocess.run(["psql", PG_ADMIN, "-qc", f"CREATE DATABASE {name}"], check=True)
    try:
        base = PG_ADMIN.rsplit("/", 1)[0]
        yield f"{base.replace('postgresql://', 'postgresql+asyncpg://', 1)}/{name}"
    finally:
        subprocess.run(
            ["psql", PG_ADMIN, "-qc", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], check=False
        )


def libpq(url: str) -> str:
    """Turn a SQLAlchemy asyncpg URL into a libpq one."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def prepare(url: str) -> str:
    """Migrate and create an API key; return the key."""
    from gateway.settings import DatabaseConfig, ShortcutsConfig
    from gateway.store import open_store, upgrade_database

    await upgrade_database(url)
    store = await open_store(
        url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        _, key = await store.create_api_key("bench", frozenset({"jobs"}))
    finally:
        await store.close()
    return key


#: ``prepare`` run by another version's code (its migrations, its store).
PREPARE_IN = """
import asyncio, sys
from bench.lib.databases import prepare
print(asyncio.run(prepare(sys.argv[1])))
"""
PREPARE_OLD = """
import asyncio, sys
from gateway.store import open_store, upgrade_database
async def main(url):
    await upgrade_database(url)
    store = await open_store(url)  # that version's own default
    try:
        _, key = await store.create_api_key("bench", frozenset({"jobs"}))
    finally:
        await store.close()
    return key
print(asyncio.run(main(sys.argv[1])))
"""


def prepare_in(root: Path, url: str, python: str) -> str:
    """``prepare`` with the version in ``root``: an older commit's migrations stop at its
    own head, and refuse a database a newer head migrated."""
    has_bench = (root / "bench" / "lib" / "databases.py").exists()
    done = subprocess.run(
        [python, "-c", PREPARE_IN if has_bench else PREPARE_OLD, url],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip().splitlines()[-1]


def analyze(url: str) -> None:
    """Gather the planner's statistics, as autovacuum does on a live database."""
    if url.startswith("sqlite"):
        import sqlite3

        with contextlib.closing(sqlite3.connect(url.split(":///", 1)[1])) as db:
            db.execute("ANALYZE")
        return
    subprocess.run(["psql", libpq(url), "-qc", "ANALYZE"], check=True)
