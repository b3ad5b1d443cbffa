"""API keys: only the sha256 of a key is stored."""

from __future__ import annotations

import logging
import secrets

from gateway.domain.records import (
    Principal,
)
from gateway.store.base import StoreBase
from gateway.store.rows import (
    hash_key,
)
from gateway.store.statements import (
    AUTHENTICATE,
)
from gateway.store.tables import api_keys

log = logging.getLogger("onejob.store")


class ApiKeys(StoreBase):
    """Create, check and revoke API keys."""

    async def create_api_key(self, owner_id: str, scopes: frozenset[str]) -> tuple[str, str]:
        """Create a key; return ``(key_id, secret)``. Only the secret's sha256 is stored."""
        key_id = self.ids.new("key")
        secret = "oj_" + secrets.token_urlsafe(32)
        async with self._tx() as tx:
            await tx.conn.execute(
                api_keys.insert().values(
                    id=key_id,
                    owner_id=owner_id,
                    key_hash=hash_key(secret),
                    scopes=" ".join(sorted(scopes)),
                    created_at=self._now(),
                )
            )
        return key_id, secret

    async def authenticate(self, secret: str) -> Principal | None:
        """Return the principal of an unrevoked key, or None."""
        async with self._read_once() as conn:
            row = (await conn.execute(AUTHENTICATE, {"key_hash": hash_key(secret)})).one_or_none()
        if row is None:
            return None
        return Principal(key_id=row.id, owner_id=row.owner_id, scopes=frozenset(row.scopes.split()))

    async def revoke_api_key(self, key_id: str) -> bool:
        """Revoke a key; say whether it was active."""
        async with self._tx() as tx:
            moved = await tx.conn.execute(
                api_keys.update()
                .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=self._now())
            )
            return moved.rowcount == 1
