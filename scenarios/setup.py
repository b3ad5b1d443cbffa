"""What a scenario's gateways are given: a fresh database and a generated config TOML."""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

SIM_OPENAI = "sim-openai"
SIM_ANTHROPIC = "sim-anthropic"


def database_kind(url: str | None) -> str:
    """Return ``postgresql`` or ``sqlite`` for a database URL (None: SQLite)."""
    return "postgresql" if url and url.startswith("postgresql") else "sqlite"


async def fresh_database(
    base_url: str | None, work_dir: Path, name: str
) -> tuple[str, Callable[[], Awaitable[None]]]:
    """Create an empty database for one scenario; return its URL and a coroutine that drops it."""
    if database_kind(base_url) == "sqlite":
        path = _forget_sqlite(work_dir / f"{name}.db")

        async def _forget() -> None:
            return None

        return f"sqlite+aiosqlite:///{path}", _forget
    assert base_url is not None
    url = make_url(base_url)
    dbname = f"onejob_sc_{name.replace('-', '_')}_{secrets.token_hex(3)}"
    admin_dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{dbname}"')
    finally:
        await conn.close()

    async def _drop() -> None:
        conn = await asyncpg.connect(admin_dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        finally:
            await conn.close()

    return url.set(database=dbname).render_as_string(hide_password=False), _drop


def _forget_sqlite(path: Path) -> Path:
    """Delete a SQLite file and its WAL companions; return the path."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


@dataclasses.dataclass(slots=True)
class GatewayConfig:
    """The knobs a scenario turns in the gateway's TOML."""

    sim_port: int
    certifications_path: Path
    sim_host: str = "127.0.0.1"  #: where the gateway reaches the simulator
    primary: str = SIM_OPENAI
    fallbacks: tuple[str, ...] = (SIM_ANTHROPIC,)
    max_attempts: int = 3
    hedge_after_s: float | None = None
    openai_timeout: float = 10.0  # seconds, the attempt deadline on sim-openai
    anthropic_timeout: float = 10.0  # seconds, the attempt deadline on sim-anthropic
    runners: int = 4
    lease_ttl: float = 15.0  # seconds
    poll_interval: float = 0.2  # seconds
    reap_interval: float = 0.5  # seconds
    openai_reconcile: bool = False  #: sim-openai stores completions; the reconciler asks
    reconcile_interval: float = 0.5  # seconds between reconciler passes
    reconcile_grace: float = 0.5  # seconds past a deadline before the reconciler asks
    #: ``[database]`` keys to set (``timeout``, ``connect_timeout``, ...); none: defaults.
    database: dict[str, float | str] = dataclasses.field(default_factory=dict)
    #: ``[shadow]`` keys to set (``sample_rate``, ``min_samples``, ...); none: off.
    shadow: dict[str, float | int] = dataclasses.field(default_factory=dict)
    #: ``[capacity]`` keys to set (``patience``, ``breaker_failures``, ...); none: defaults.
    capacity: dict[str, float | int] = dataclasses.field(default_factory=dict)
    #: The top-level ``database_url``, for a CLI command given only ``--config`` (a
    #: gateway is started with ``--database-url``, which wins); None: not written.
    database_url: str | None = None

    def toml(self) -> str:
        """Render the config as TOML (``gateway.settings.Settings`` shape)."""
        base = f"http://{self.sim_host}:{self.sim_port}"
        lines = [f"certifications_path = {json.dumps(str(self.certifications_path))}"]
        if self.database_url is not None:
            lines.append(f"database_url = {json.dumps(self.database_url)}")
        lines += [
            "",
            "[simulator]",
            "enabled = false",
            "",
            f"[providers.{SIM_OPENAI}]",
            'protocol = "openai"',
            f'base_url = "{base}/p/{SIM_OPENAI}/v1"',
            'model = "sim-gpt"',
            f"timeout = {self.openai_timeout}",
            f"reconcile = {json.dumps(self.openai_reconcile)}",
            "",
            f"[providers.{SIM_ANTHROPIC}]",
            'protocol = "anthropic"',
            f'base_url = "{base}/p/{SIM_ANTHROPIC}"',
            'model = "sim-claude"',
            f"timeout = {self.anthropic_timeout}",
            "",
            '[routes."*"]',
            f"primary = {json.dumps(self.primary)}",
            f"fallbacks = {json.dumps(list(self.fallbacks))}",
            f"max_attempts = {self.max_attempts}",
        ]
        if self.hedge_after_s is not None:
            lines.append(f"hedge_after_s = {self.hedge_after_s}")
        lines += [
            "",
            "[dispatcher]",
            f"runners = {self.runners}",
            f"lease_ttl = {self.lease_ttl}",
            f"poll_interval = {self.poll_interval}",
            f"reap_interval = {self.reap_interval}",
            "shutdown_grace = 1.0",
            "",
            "[reconciler]",
            f"interval = {self.reconcile_interval}",
            f"grace = {self.reconcile_grace}",
            "",
        ]
        if self.database:
            lines += ["[database]", *(f"{k} = {json.dumps(v)}" for k, v in self.database.items())]
            lines.append("")
        if self.shadow:
            lines += ["[shadow]", *(f"{k} = {json.dumps(v)}" for k, v in self.shadow.items())]
            lines.append("")
        if self.capacity:
            lines += [
                "[capacity]",
                *(f"{k} = {json.dumps(v)}" for k, v in self.capacity.items()),
            ]
            lines.append("")
        return "\n".join(lines)

    def write(self, path: Path) -> Path:
        """Write the TOML to ``path`` and return it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.toml())
        return path
