"""Alembic environment: run migrations on the async engine the gateway uses."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from gateway.store.engine import POOLER_SAFE, make_engine
from gateway.store.tables import metadata

config = context.config
target_metadata = metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    # Named statements off, whatever the settings say: migrations may go through a
    # transaction pooler (PgBouncer), and they run too seldom for it to cost anything.
    url = config.get_main_option("sqlalchemy.url") or ""
    engine = make_engine(url, bounded=False, database=POOLER_SAFE)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_run)
            await conn.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=metadata)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_async())
