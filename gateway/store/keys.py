"""API keys: only the sha256 of a key is stored."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import secrets

import sqlalchemy as sa

from gateway.domain.records import Principal
from gateway.store.database import Database
from gateway.store.rows import hash_key
from gateway.store.tables import api_keys

log = logging.getLogger("onejob.store")

#: An unrevoked key's owner and scopes, by the key's hash (built once: it is on every request).
AUTHENTICATE = sa.select(api_keys.c.id, api_keys.c.owner_id, api_keys.c.scopes).where(
    api_keys.c.key_hash == sa.bindparam("key_hash"), api_keys.c.revoked_at.is_(None)
)


@dataclasses.dataclass(frozen=True, slots=True)
class ApiKeyInfo:
    """What may be shown of a key: never the key or its hash."""

    id: str
    owner_id: str
    scopes: frozenset[str]
    created_at: dt.datetime
    revoked_at: dt.datetime | None


class ApiKeys:
    """Create, check and revoke API keys."""

    db: Database

    async def create_api_key(self, owner_id: str, scopes: frozenset[str]) -> tuple[str, str]:
        """Create a key; return ``(key_id, secret)``. Only the secret's sha256 is stored."""
        key_id = self.db.ids.new("key")
        secret = "oj_" + secrets.token_urlsafe(32)
        async with self.db.write() as tx:
            await tx.conn.execute(
                api_keys.insert().values(
                    id=key_id,
                    owner_id=owner_id,
                    key_hash=hash_key(secret),
                    scopes=" ".join(sorted(scopes)),
                    created_at=self.db.now(),
                )
            )
        return key_id, secret

    async def authenticate(self, secret: str) -> Principal | None:
        """Return the principal of an unrevoked key, or None."""
        async with self.db.read_once() as conn:
            row = (await conn.execute(AUTHENTICATE, {"key_hash": hash_key(secret)})).one_or_none()
        if row is None:
            return None
        return Principal(key_id=row.id, owner_id=row.owner_id, scopes=frozenset(row.scopes.split()))

    async def revoke_api_key(self, key_id: str) -> bool:
        """Revoke a key; say whether it was active."""
        async with self.db.write() as tx:
            moved = await tx.conn.execute(
                api_keys.update()
                .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=self.db.now())
            )
            return moved.rowcount == 1

    async def list_api_keys(self, owner_id: str | None = None) -> list[ApiKeyInfo]:
        """List keys (of one owner, or all), oldest first; revoked ones included."""
        query = sa.select(
            api_keys.c.id,
            api_keys.c.owner_id,
            api_keys.c.scopes,
            api_keys.c.created_at,
            api_keys.c.revoked_at,
        ).order_by(api_keys.c.created_at, api_keys.c.id)
        if owner_id is not None:
            query = query.where(api_keys.c.owner_id == owner_id)
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [
            ApiKeyInfo(r.id, r.owner_id, frozenset(r.scopes.split()), r.created_at, r.revoked_at)
            for r in rows
        ]

    async def rotate_api_key(self, key_id: str) -> tuple[str, str] | None:
        """Revoke an active key and create one for the same owner and scopes, atomically.

        Return ``(new_key_id, secret)``, or None when ``key_id`` is not an active key.
        """
        new_id = self.db.ids.new("key")
        secret = "oj_" + secrets.token_urlsafe(32)
        async with self.db.write() as tx:
            now = self.db.now()
            old = (
                await tx.conn.execute(
                    api_keys.update()
                    .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                    .values(revoked_at=now)
                    .returning(api_keys.c.owner_id, api_keys.c.scopes)
                )
            ).one_or_none()
            if old is None:
                return None
            await tx.conn.execute(
                api_keys.insert().values(
                    id=new_id,
                    owner_id=old.owner_id,
                    key_hash=hash_key(secret),
                    scopes=old.scopes,
                    created_at=now,
                )
            )
        return new_id, secret
