"""``onejob db``, ``onejob keys`` and ``onejob jobs``: the commands on the database itself.

Results a script wants (a new API key) go alone to stdout; everything else to stderr. Each
command migrates first and opens the store through ``gateway.bootstrap.migrated_store``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from cli.arguments import Subcommands, add_settings_args, settings_from

if TYPE_CHECKING:
    from gateway.settings import Settings
    from gateway.store import SqlJobStore

T = TypeVar("T")

COMMANDS = {"db": "database schema", "keys": "API keys", "jobs": "job retention"}
MIN_RETENTION = dt.timedelta(hours=24)  # keys are honoured at least this long (as Stripe does)
EXIT_NOT_ACTIVE = 1
EXIT_BAD_WINDOW = 2


def register(subcommands: Subcommands) -> None:
    """Add ``onejob db``, ``onejob keys`` and ``onejob jobs``."""
    db = subcommands.add_parser("db", help=COMMANDS["db"])
    db_sub = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_sub.add_parser("upgrade", help="run the Alembic migrations to head")
    add_settings_args(upgrade)
    upgrade.set_defaults(func=cmd_db_upgrade)

    keys = subcommands.add_parser("keys", help=COMMANDS["keys"])
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser(
        "create", help="create an API key; the key alone is printed on stdout, once"
    )
    create.add_argument("owner", type=owner_name, help="the owner the key acts as")
    create.add_argument("--admin", action="store_true", help="add the admin scope")
    add_settings_args(create)
    create.set_defaults(func=cmd_keys_create)
    listing = keys_sub.add_parser("list", help="list API keys (never the keys themselves)")
    listing.add_argument("--owner", help="only this owner's keys")
    add_settings_args(listing)
    listing.set_defaults(func=cmd_keys_list)
    revoke = keys_sub.add_parser("revoke", help="revoke a key: refused at once on every process")
    revoke.add_argument("key_id", help="the key's id (key_...), as `keys list` shows it")
    add_settings_args(revoke)
    revoke.set_defaults(func=cmd_keys_revoke)
    rotate = keys_sub.add_parser(
        "rotate", help="revoke a key and print its replacement (same owner and scopes) once"
    )
    rotate.add_argument("key_id", help="the key's id (key_...)")
    add_settings_args(rotate)
    rotate.set_defaults(func=cmd_keys_rotate)

    jobs_cmd = subcommands.add_parser("jobs", help=COMMANDS["jobs"])
    jobs_sub = jobs_cmd.add_subparsers(dest="jobs_command", required=True)
    prune = jobs_sub.add_parser(
        "prune",
        help="delete settled jobs (succeeded, failed, cancelled) older than a window",
        description=(
            "Delete succeeded, failed and cancelled jobs created before the window, with "
            "their attempts and events. A key is honoured (replay or 409) while its job "
            "exists: after pruning, the same key makes a new job. Queued, running and "
            "unknown jobs are never pruned. The window is at least 24h."
        ),
    )
    prune.add_argument("--older-than", required=True, help="e.g. 30d or 48h (at least 24h)")
    prune.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    add_settings_args(prune)
    prune.set_defaults(func=cmd_jobs_prune)


def owner_name(text: str) -> str:
    """An owner as ``keys create`` takes it: a name, not empty, no space around it."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an owner is a name: it may not be empty")
    if text != text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} has spaces around it: write {text.strip()}")
    return text


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    """Upgrade the database schema to the newest migration."""
    from gateway.database_url import redacted
    from gateway.logging import configure_logging
    from gateway.store import upgrade_database

    settings = settings_from(args)
    configure_logging(settings.log_level)
    asyncio.run(upgrade_database(settings.database_url))
    print(f"database is at the newest schema: {redacted(settings.database_url)}", file=sys.stderr)
    return 0


def _with_store(settings: Settings, use: Callable[[SqlJobStore], Awaitable[T]]) -> T:
    """Run ``use(store)`` on the migrated store of ``settings`` and return its result."""
    from gateway.bootstrap import migrated_store

    async def run() -> T:
        async with migrated_store(settings) as store:
            return await use(store)

    return asyncio.run(run())


def cmd_keys_create(args: argparse.Namespace) -> int:
    """Create an API key and print it alone on stdout."""
    scopes = frozenset({"jobs", "admin"} if args.admin else {"jobs"})
    key_id, secret = _with_store(
        settings_from(args), lambda store: store.create_api_key(args.owner, scopes)
    )
    print(
        f"created key {key_id} for owner {args.owner!r} with scopes {sorted(scopes)}; "
        "it is shown once",
        file=sys.stderr,
    )
    print(secret, flush=True)
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    """Print one line per key: id, owner, scopes, created, revoked (tab-separated, times
    in UTC with their zone); a header line first when stdout is a terminal (a script
    reading the lines gets the keys alone)."""
    keys = _with_store(settings_from(args), lambda store: store.list_api_keys(args.owner))
    if sys.stdout.isatty():
        print("\t".join(["ID", "OWNER", "SCOPES", "CREATED", "REVOKED"]))
    for key in keys:
        revoked = utc_text(key.revoked_at) if key.revoked_at else "active"
        fields = [key.id, key.owner_id, ",".join(sorted(key.scopes))]
        print("\t".join([*fields, utc_text(key.created_at), revoked]))
    return 0


def utc_text(at: dt.datetime) -> str:
    """A time as ``2026-12-07T13:50:16Z`` (a naive time is the store's UTC)."""
    aware = at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)
    return aware.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    """Revoke a key; exit 1 when it is unknown or already revoked."""
    if not _with_store(settings_from(args), lambda store: store.revoke_api_key(args.key_id)):
        print(f"no active key {args.key_id!r}", file=sys.stderr)
        return EXIT_NOT_ACTIVE
    print(f"revoked key {args.key_id}", file=sys.stderr)
    return 0


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    """Revoke a key and print its replacement alone on stdout; exit 1 when it is not active."""
    rotated = _with_store(settings_from(args), lambda store: store.rotate_api_key(args.key_id))
    if rotated is None:
        print(f"no active key {args.key_id!r}", file=sys.stderr)
        return EXIT_NOT_ACTIVE
    new_id, secret = rotated
    print(f"revoked key {args.key_id}; its replacement {new_id} is shown once", file=sys.stderr)
    print(secret, flush=True)
    return 0


def parse_window(text: str) -> dt.timedelta:
    """Read ``30d`` or ``48h`` as a duration; raise ValueError otherwise."""
    number, unit = text[:-1], text[-1:]
    if not number.isdigit() or unit not in ("d", "h"):
        raise ValueError(f"{text!r} is not a window like 30d or 48h")
    return dt.timedelta(days=int(number)) if unit == "d" else dt.timedelta(hours=int(number))


def cmd_jobs_prune(args: argparse.Namespace) -> int:
    """Delete settled jobs older than the window, in batches, with progress on stderr."""
    from gateway.logging import configure_logging

    try:
        window = parse_window(args.older_than)
    except ValueError as exc:
        print(f"onejob jobs prune: {exc}", file=sys.stderr)
        return EXIT_BAD_WINDOW
    if window < MIN_RETENTION:
        print("onejob jobs prune: the window must be at least 24h", file=sys.stderr)
        return EXIT_BAD_WINDOW
    settings = settings_from(args)
    configure_logging(settings.log_level)

    async def prune(store: SqlJobStore) -> int:
        cutoff = store.clock.now() - window
        if args.dry_run:
            return await store.prune_jobs(cutoff, dry_run=True)

        def progress(total: int) -> None:
            print(f"  pruned {total} jobs so far", file=sys.stderr)

        # Paced, batch after batch: live traffic keeps the database half the time.
        return await store.prune_all(cutoff, progress=progress)

    total = _with_store(settings, prune)
    from gateway.store.prune import PRUNE_BATCH

    # A dry run counts one batch: a full one means there may be more.
    verb = "pruned"
    if args.dry_run:
        verb = "would prune at least" if total >= PRUNE_BATCH else "would prune"
    print(f"{verb} {total} settled jobs created more than {args.older_than} ago", file=sys.stderr)
    print(total)
    return 0
