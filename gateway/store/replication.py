"""Whether PostgreSQL keeps an acknowledged job through a failover: its synchronous standby.

A job onejob answered 201 for must survive a failover, or the client's retry with the same
key finds no job on the new primary and creates it again: the intention runs twice. That
holds when every commit waited for a synchronous standby (``synchronous_standby_names``,
pg_auto_failover's ``number_sync_standbys``, Patroni's ``synchronous_mode``) and the
standby that takes over is one of them. With standbys streaming asynchronously, the last
commits before a crash may be missing on the new primary. With no standby at all there is
no failover to fear (only the disk), so nothing is said at ``warn``.

``serve`` and ``worker`` check once at start (``DatabaseConfig.synchronous_standby``):
``warn`` logs a warning when standbys stream with none synchronous, ``require`` refuses
to start unless a synchronous standby is attached now, ``off`` asks nothing.
docs/operations.md, "High availability", says which set-ups keep an acknowledged job.
"""

from __future__ import annotations

import dataclasses
import logging

from gateway.database_url import DatabaseKind
from gateway.settings import DatabaseConfig
from gateway.store.pg_connections import PostgresConnector, close_quietly

log = logging.getLogger("onejob.database")

#: ``pg_stat_replication.sync_state`` of a standby whose flush a commit waits for.
SYNCHRONOUS = frozenset({"sync", "quorum"})


class NoSynchronousStandby(RuntimeError):
    """``synchronous_standby = "require"`` and no synchronous standby is attached."""


@dataclasses.dataclass(frozen=True, slots=True)
class Replication:
    """What the primary says about its standbys."""

    synchronous_standby_names: str
    #: ``(application_name, sync_state)`` of each standby streaming now; sync_state is
    #: None where this role may not read it (``pg_monitor`` or superuser may).
    standbys: tuple[tuple[str, str | None], ...]
    #: Physical replication slots no standby uses now: a standby that is configured but
    #: away (pg_auto_failover keeps one slot per standby).
    idle_slots: tuple[str, ...] = ()

    @property
    def unreadable(self) -> bool:
        """Say whether this role may not see the standbys' ``sync_state``."""
        return any(state is None for _, state in self.standbys)

    @property
    def synchronous(self) -> int:
        """Count the standbys a commit waits for."""
        return sum(1 for _, state in self.standbys if state in SYNCHRONOUS)


async def read_replication(url: str, config: DatabaseConfig | None = None) -> Replication:
    """Ask the primary of ``url`` about its standbys."""
    conn = await PostgresConnector(url, config).connect()
    try:
        names = await conn.fetchval("SHOW synchronous_standby_names")
        rows = await conn.fetch("SELECT application_name, sync_state FROM pg_stat_replication")
        slots = await conn.fetch(
            "SELECT slot_name FROM pg_replication_slots WHERE slot_type = 'physical'"
            " AND NOT active ORDER BY slot_name"
        )
    finally:
        await close_quietly(conn, 2.0)
    return Replication(
        str(names or ""), tuple((r[0], r[1]) for r in rows), tuple(r[0] for r in slots)
    )


async def check_synchronous_standby(url: str, config: DatabaseConfig) -> Replication | None:
    """Warn, or refuse (``NoSynchronousStandby``), as ``config.synchronous_standby`` says."""
    if not DatabaseKind.of(url).replicated or config.synchronous_standby == "off":
        return None
    replication = await read_replication(url, config)
    if replication.synchronous:
        log.info(
            "PostgreSQL commits wait for %d synchronous standby(s): an acknowledged job "
            "survives a failover to one of them",
            replication.synchronous,
            extra={"synchronous_standby_names": replication.synchronous_standby_names},
        )
        return replication
    if replication.unreadable:
        message = (
            "cannot tell whether PostgreSQL's standbys are synchronous: this role may not "
            "read pg_stat_replication.sync_state (grant it pg_monitor)"
        )
        if config.synchronous_standby == "require":
            raise NoSynchronousStandby(message)
        log.warning(message)
        return replication
    if config.synchronous_standby == "require":
        raise NoSynchronousStandby(
            "PostgreSQL has no synchronous standby attached "
            f"(synchronous_standby_names = {replication.synchronous_standby_names!r}, "
            f"{len(replication.standbys)} standby(s) streaming): a failover could lose "
            "acknowledged jobs and a retry would run them twice. Attach one, or set "
            '[database] synchronous_standby = "warn" (docs/operations.md).'
        )
    if replication.idle_slots and not replication.standbys:
        log.warning(
            "PostgreSQL keeps replication slots for standbys that are not attached (%s): "
            "until one is back, commits are not copied anywhere, and a failover to it "
            "would lose them (docs/operations.md, High availability)",
            ", ".join(replication.idle_slots),
        )
    elif replication.standbys:
        log.warning(
            "PostgreSQL streams to %d standby(s), none synchronous: a failover may lose the "
            "last acknowledged jobs, and a client's retry would then run them again "
            "(docs/operations.md, High availability)",
            len(replication.standbys),
            extra={"standbys": [name for name, _ in replication.standbys]},
        )
    return replication
