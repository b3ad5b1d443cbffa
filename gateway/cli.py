"""The ``onejob`` command line: serve, migrate, manage API keys, and the other parts' commands.

Results a script wants (a new API key) go alone to stdout; everything else to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib
import logging
import sys
from typing import Any

from gateway.logging import configure_logging
from gateway.settings import Settings, load_settings

log = logging.getLogger("onejob.cli")


def _settings_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="path of onejob.toml (default: $ONEJOB_CONFIG)")
    parser.add_argument("--database-url", help="overrides $ONEJOB_DATABASE_URL")


def _settings(args: argparse.Namespace, **overrides: Any) -> Settings:
    return load_settings(args.config, database_url=args.database_url, **overrides)


#: Subcommands registered by other packages: command -> module with ``register(sub)``.
#: Imported only when their command runs (or for help), so a simulator or a worker
#: process does not pay for importing the contract suite and the scenario runner.
PLUGINS: dict[str, str] = {
    "worker": "gateway.worker_cli",
    "reconcile": "gateway.reconcile_cli",
    "sim": "providers.sim_cli",
    "certify": "certify.cli",
    "can-i-failover": "certify.cli",
    "scenarios": "scenarios.cli",
}
_BUILTIN = frozenset({"serve", "db", "keys", "jobs"})
MIN_RETENTION = dt.timedelta(hours=24)  # keys are honoured at least this long (as Stripe does)


def _plugins_for(argv: list[str] | None) -> list[str]:
    """Return the plugin modules the command line needs, in a stable order."""
    command = next(
        (a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("-")), None
    )
    if command in _BUILTIN:
        return []
    if command in PLUGINS:
        return [PLUGINS[command]]
    return list(dict.fromkeys(PLUGINS.values()))


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """Build the parser with the built-in subcommands and the ones ``argv`` needs."""
    parser = argparse.ArgumentParser(
        prog="onejob", description="Keep one user intention as one job."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="migrate the database and serve the gateway")
    _settings_args(serve)
    serve.add_argument("--host", help="default 127.0.0.1 ($ONEJOB_HOST)")
    serve.add_argument("--port", type=int, help="default 8000 ($ONEJOB_PORT)")
    serve.add_argument(
        "--workers",
        type=int,
        help="worker processes on one socket (default: $ONEJOB_WORKERS, else sized: "
        "on PostgreSQL one per CPU, one per two CPUs when it is on this host; 1 on SQLite; "
        "0 sizes it too)",
    )
    serve.set_defaults(func=cmd_serve)

    db = sub.add_parser("db", help="database schema")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_sub.add_parser("upgrade", help="run the Alembic migrations to head")
    _settings_args(upgrade)
    upgrade.set_defaults(func=cmd_db_upgrade)

    keys = sub.add_parser("keys", help="API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser(
        "create", help="create an API key; the key alone is printed on stdout, once"
    )
    create.add_argument("owner", help="the owner the key acts as")
    create.add_argument("--admin", action="store_true", help="add the admin scope")
    _settings_args(create)
    create.set_defaults(func=cmd_keys_create)

    listing = keys_sub.add_parser("list", help="list API keys (never the keys themselves)")
    listing.add_argument("--owner", help="only this owner's keys")
    _settings_args(listing)
    listing.set_defaults(func=cmd_keys_list)
    revoke = keys_sub.add_parser("revoke", help="revoke a key: refused at once on every process")
    revoke.add_argument("key_id", help="the key's id (key_...), as `keys list` shows it")
    _settings_args(revoke)
    revoke.set_defaults(func=cmd_keys_revoke)
    rotate = keys_sub.add_parser(
        "rotate", help="revoke a key and print its replacement (same owner and scopes) once"
    )
    rotate.add_argument("key_id", help="the key's id (key_...)")
    _settings_args(rotate)
    rotate.set_defaults(func=cmd_keys_rotate)
    jobs_cmd = sub.add_parser("jobs", help="job retention")
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
    _settings_args(prune)
    prune.set_defaults(func=cmd_jobs_prune)

    for module in _plugins_for(argv):
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = build_parser(argv).parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    """Upgrade the database schema to the newest migration."""
    from gateway.store import upgrade_database

    settings = _settings(args)
    configure_logging(settings.log_level)
    asyncio.run(upgrade_database(settings.database_url))
    from gateway.server import redacted

    print(f"database is at the newest schema: {redacted(settings.database_url)}", file=sys.stderr)
    return 0


def cmd_keys_create(args: argparse.Namespace) -> int:
    """Create an API key and print it alone on stdout."""
    from gateway.store import open_store, upgrade_database

    settings = _settings(args)
    scopes = frozenset({"jobs", "admin"} if args.admin else {"jobs"})

    async def create() -> tuple[str, str]:
        await upgrade_database(settings.database_url)
        store = await open_store(settings.database_url)
        try:
            return await store.create_api_key(args.owner, scopes)
        finally:
            await store.close()

    key_id, secret = asyncio.run(create())
    print(
        f"created key {key_id} for owner {args.owner!r} with scopes {sorted(scopes)}; "
        "it is shown once",
        file=sys.stderr,
    )
    print(secret, flush=True)
    return 0


def _with_store(args: argparse.Namespace, use: Any) -> Any:
    """Run ``use(store)`` on a migrated store and return its result."""
    from gateway.store import open_store, upgrade_database

    settings = _settings(args)

    async def run() -> Any:
        await upgrade_database(settings.database_url)
        store = await open_store(settings.database_url)
        try:
            return await use(store)
        finally:
            await store.close()

    return asyncio.run(run())


def cmd_keys_list(args: argparse.Namespace) -> int:
    """Print one line per key: id, owner, scopes, created, revoked (tab-separated)."""
    keys = _with_store(args, lambda store: store.list_api_keys(args.owner))
    for key in keys:
        revoked = key.revoked_at.isoformat() if key.revoked_at else "active"
        fields = [key.id, key.owner_id, ",".join(sorted(key.scopes))]
        print("\t".join([*fields, key.created_at.isoformat(), revoked]))
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    """Revoke a key; exit 1 when it is unknown or already revoked."""
    if not _with_store(args, lambda store: store.revoke_api_key(args.key_id)):
        print(f"no active key {args.key_id!r}", file=sys.stderr)
        return 1
    print(f"revoked key {args.key_id}", file=sys.stderr)
    return 0


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    """Revoke a key and print its replacement alone on stdout; exit 1 when it is not active."""
    rotated = _with_store(args, lambda store: store.rotate_api_key(args.key_id))
    if rotated is None:
        print(f"no active key {args.key_id!r}", file=sys.stderr)
        return 1
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
    from gateway.store import open_store, upgrade_database

    try:
        window = parse_window(args.older_than)
    except ValueError as exc:
        print(f"onejob jobs prune: {exc}", file=sys.stderr)
        return 2
    if window < MIN_RETENTION:
        print("onejob jobs prune: the window must be at least 24h", file=sys.stderr)
        return 2
    settings = _settings(args)
    configure_logging(settings.log_level)

    async def prune() -> int:
        await upgrade_database(settings.database_url)
        store = await open_store(settings.database_url)
        total = 0
        try:
            cutoff = store.clock.now() - window
            while True:
                n = await store.prune_jobs(cutoff, dry_run=args.dry_run)
                total += n
                if n == 0 or args.dry_run:
                    return total
                print(f"  pruned {total} jobs so far", file=sys.stderr)
        finally:
            await store.close()

    total = asyncio.run(prune())
    verb = "would prune at least" if args.dry_run else "pruned"
    print(f"{verb} {total} settled jobs created more than {args.older_than} ago", file=sys.stderr)
    print(total)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Migrate, start the bundled simulator if configured, and serve until interrupted."""
    from gateway.server import run_event_loop, serve, serve_workers
    from gateway.store.replication import NoSynchronousStandby

    settings = _settings(args, host=args.host, port=args.port, workers=args.workers)
    configure_logging(settings.log_level)
    with contextlib.suppress(KeyboardInterrupt):
        try:
            if settings.workers > 1:
                serve_workers(settings)
            else:
                run_event_loop(serve(settings))
        except NoSynchronousStandby as exc:
            print(f"onejob serve: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
