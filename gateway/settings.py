"""Gateway settings: a TOML file (``onejob.toml``) and ``ONEJOB_*`` environment variables.

Nothing here runs at import time; ``load_settings`` is called by the CLI (the composition
root) and tests build ``Settings`` directly.
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.certification_config import CertificationConfig
from gateway.database_url import DatabaseKind, PostgresUrl, check_database_url
from gateway.database_url import database_on_this_host as database_on_this_host
from gateway.tracing import TelemetryConfig
from gateway.webhooks.config import WebhooksConfig
from providers.config import ProviderConfig

#: Where cgroup v2 says a container's CPU quota ("max 100000", or "200000 100000").
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
MAX_WORKERS = 64  # server processes of one host, at most

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./onejob.db"
DEFAULT_SIM_PORT = 8765
SHORTCUTS_ENV = "ONEJOB_SHORTCUTS"
#: Seconds a job may take from its creation, unless its route says otherwise (issue 43).
DEFAULT_JOB_DEADLINE = 600.0  #: ``off``: every speed shortcut runs its plain path


class SettingsError(ValueError):
    """The settings cannot be read: a missing or malformed file, or a value refused.

    Its message is for the operator, a line or a few, each naming what to change.
    """


class RouteConfig(BaseModel):
    """Where a contract's jobs go: a primary and ordered fallbacks (DESIGN R6)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    primary: str
    fallbacks: tuple[str, ...] = ()
    max_attempts: int = Field(default=3, ge=1, le=20)
    #: Start a hedge on the first certified fallback after this many seconds (None: never).
    hedge_after_s: float | None = Field(default=None, gt=0)
    #: Seconds a job may take from its creation: nothing is sent for it after that, and a
    #: job still waiting for capacity then fails with ``job_deadline``. A client may ask
    #: for a shorter one (``deadline_s`` in the request's body).
    job_deadline_s: float = Field(default=DEFAULT_JOB_DEADLINE, gt=0, le=7 * 24 * 3600)


class DispatcherConfig(BaseModel):
    """How attempts are run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    runners: int = Field(default=8, ge=1, le=512)
    lease_ttl: float = Field(default=15.0, gt=0)  # seconds
    poll_interval: float = Field(default=1.0, gt=0)  # seconds, fallback when no wake-up arrives
    reap_interval: float = Field(default=2.0, gt=0)  # seconds
    shutdown_grace: float = Field(default=10.0, ge=0)  # seconds
    #: Seconds a provider's answer (or failure) is kept trying to be recorded while the
    #: database cannot take it (a partition, a failover); past its lease, a late answer
    #: resolves the attempt the reaper made ``unknown``.
    decision_retry: float = Field(default=120.0, ge=0, le=3600)


class CapacityConfig(BaseModel):
    """How jobs wait for a provider's capacity (issue 43; docs/operations.md, "When a
    provider says not now"): patience, backoff, the circuit breaker, and how processes
    share what they know."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: With a certified fallback, wait for the primary only when the wait it asks for (or
    #: its circuit's) is at most this many seconds; a longer wait fails over at once.
    patience: float = Field(default=5.0, ge=0, le=3600)
    #: The longest wait a provider's Retry-After (or its kin) is taken at (seconds).
    max_wait: float = Field(default=300.0, gt=0, le=86400)
    #: Backoff when the provider named no time: from ``backoff_base`` seconds, doubling
    #: each time up to ``backoff_max``, half of it random.
    backoff_base: float = Field(default=1.0, gt=0, le=600)
    backoff_max: float = Field(default=60.0, gt=0, le=3600)
    #: Consecutive counted failures that open a provider's circuit (0: never).
    breaker_failures: int = Field(default=5, ge=0, le=10_000)
    #: Seconds an open circuit stays open before one probe may go.
    breaker_open: float = Field(default=5.0, gt=0, le=3600)
    #: What counts toward opening it: ``failure`` (a 5xx, a refused connection),
    #: ``timeout`` (an outcome unknown), ``overloaded`` (503, 529), ``rate_limited`` (429:
    #: off by default, pacing takes care of those).
    breaker_counts: tuple[Literal["failure", "timeout", "overloaded", "rate_limited"], ...] = (
        "failure",
        "timeout",
        "overloaded",
    )
    #: Seconds between a process's looks at what the others know (a pause, a circuit, a
    #: limit and its slice of it): no database write on a call, one per look at most.
    sync_interval: float = Field(default=1.0, gt=0, le=60)


class AdmissionConfig(BaseModel):
    """How many jobs may wait unsent before creation refuses new ones (issue 43)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Unsent attempts (queued or waiting for capacity, every process) past which a new
    #: job is refused with 503 ``urn:onejob:queue-full``; a replay is still answered.
    #: 0: never refuse.
    max_queued: int = Field(default=10_000, ge=0)
    #: The Retry-After of that refusal (seconds).
    retry_after: int = Field(default=5, ge=1, le=3600)
    #: Seconds between two counts of the queue (each process counts it for itself).
    interval: float = Field(default=1.0, gt=0, le=60)


class ReconcilerConfig(BaseModel):
    """How ``unknown`` attempts of providers with ``reconcile = true`` are looked up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Run the periodic pass in ``serve``/``worker`` (it runs only if a provider reconciles).
    enabled: bool = True
    interval: float = Field(default=30.0, gt=0)  # seconds between passes
    #: Seconds after an attempt's deadline before it is first asked about: a provider may
    #: still be working on a request the client gave up on, and storing may lag.
    grace: float = Field(default=60.0, ge=0)
    lookup_timeout: float = Field(default=10.0, gt=0)  # seconds, one lookup request
    batch: int = Field(default=200, ge=1, le=1000)  # unknown attempts read per pass


class ShadowConfig(BaseModel):
    """Shadow checks (issue 38): succeeded jobs of hedgeable contracts re-run on each
    certified fallback, off the hot path, to measure agreement on production inputs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Fraction of succeeded jobs re-run on each certified fallback; 0 turns it off.
    sample_rate: float = Field(default=0.0, ge=0, le=1)
    #: Shadow provider calls per hour at most, over every process sharing the database.
    calls_per_hour: int = Field(default=60, ge=0, le=100_000)
    min_interval: float = Field(default=1.0, ge=0)  # seconds between two calls of a process
    interval: float = Field(default=10.0, gt=0)  # seconds between passes
    lookback: float = Field(default=3600.0, gt=0)  # seconds: older succeeded jobs are not sampled
    batch: int = Field(default=100, ge=1, le=1000)  # succeeded jobs read per pass
    #: Disagreement rate at or above which failover to the fallback is suspended ...
    threshold: float = Field(default=0.2, gt=0, le=1)
    min_samples: int = Field(default=20, ge=1)  # ... once this many checks were judged
    window: int = Field(default=200, ge=1)  # the pair's newest judged checks the rate is over


class DatabaseConfig(BaseModel):
    """How the gateway waits on its database (every wait has a deadline: past one, 503 and
    the connection discarded; keepalives notice a silent peer in seconds) and what stands
    between them (docs/operations.md, "When the database goes away", "Behind PgBouncer")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Seconds one statement (a commit included) may take, and a request may wait for a
    #: pooled connection.
    timeout: float = Field(default=5.0, gt=0, le=600)
    #: Seconds opening one connection may take, per host of a multi-host URL.
    connect_timeout: float = Field(default=5.0, gt=0, le=600)
    #: Seconds a PostgreSQL socket may sit idle before TCP keepalive probes start.
    keepalive_idle: int = Field(default=5, ge=1, le=7200)
    keepalive_interval: int = Field(default=2, ge=1, le=600)  # seconds between probes
    keepalive_count: int = Field(default=3, ge=1, le=100)  # unanswered probes: peer gone
    #: Seconds sent data may stay unacknowledged before the kernel drops the connection
    #: (``TCP_USER_TIMEOUT``); 0 leaves the kernel's default (about 15 minutes).
    tcp_user_timeout: float = Field(default=5.0, ge=0, le=600)
    #: What ``serve`` and ``worker`` do when PostgreSQL replicates to standbys with none
    #: synchronous, so that a failover may lose acknowledged jobs: ``warn`` (log it),
    #: ``require`` (refuse to start unless a synchronous standby is attached), ``off``.
    synchronous_standby: Literal["off", "warn", "require"] = "warn"
    #: ``transaction``: behind PgBouncer's transaction mode (operations.md, "Behind PgBouncer").
    pooler: Literal["none", "transaction"] = "none"
    listen_url: PostgresUrl | None = None  # direct, for LISTEN (``database_url.relay_url``)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DatabaseConfig:
        """Return the defaults under the ``ONEJOB_DATABASE_*`` variables that are set."""
        env = os.environ if env is None else env
        return cls.model_validate({f: env[v] for v, f in _ENV_DATABASE_FIELDS.items() if v in env})


class ShortcutsConfig(BaseModel):
    """Speed shortcuts around libraries, each on by default; off runs the plain library path.

    Each was measured to pay for itself and relies on something of a dependency that
    its maintainers may change (``gateway/shortcuts.py`` lists them: what each bypasses,
    the private names it uses, the measurement). Turning one off is the way back when an
    upgrade breaks it, and what the tests run both ways: ``ONEJOB_SHORTCUTS=off`` turns
    them all off.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: ``POST /v1/jobs`` straight to its handler (plain: Litestar's router).
    direct_route: bool = True
    #: A connection's writes of one loop turn in one send (plain: uvicorn writes at once).
    write_batching: bool = True
    #: Providers are called over onejob's HTTP/1.1 pool (plain: httpx's own transport).
    provider_pool: bool = True
    #: PostgreSQL's one-statement paths on pooled asyncpg connections taken bare
    #: (plain: SQLAlchemy connections).
    bare_connections: bool = True
    #: PostgreSQL creations that queue while one is on the wire go in one statement
    #: (plain: each alone).
    creation_batches: bool = True
    #: SQLite runs on the event loop's thread (plain: aiosqlite's thread per connection).
    sqlite_inline: bool = True
    #: A new job's first attempt is claimed by its creating statement and run in the
    #: process that took the request (plain: it is queued for any runner to claim).
    first_attempt_in_process: bool = True
    #: That attempt's prompt is rendered while the creating statement is on the wire
    #: (plain: when the attempt starts).
    prompt_meanwhile: bool = True

    @classmethod
    def all_off(cls) -> ShortcutsConfig:
        """Return the plain library path everywhere."""
        return cls(**dict.fromkeys(cls.model_fields, False))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ShortcutsConfig:
        """Return the defaults, or all off when ``ONEJOB_SHORTCUTS`` says ``off``."""
        value = (os.environ if env is None else env).get(SHORTCUTS_ENV, "").strip().lower()
        if value in ("", "on"):
            return cls()
        if value in ("off", "plain"):
            return cls.all_off()
        raise ValueError(f"{SHORTCUTS_ENV} must be on or off, not {value!r}")


class SimulatorConfig(BaseModel):
    """The bundled simulator that ``onejob serve`` starts when asked to (the default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = DEFAULT_SIM_PORT


class Settings(BaseModel):
    """Everything the gateway needs to run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    database_url: str = DEFAULT_DATABASE_URL
    host: str = "127.0.0.1"
    port: int = 8000
    instance_id: str = Field(default_factory=lambda: f"gw-{os.getpid()}")
    certifications_path: str = "reports/certifications.json"
    max_body_bytes: int = 1024 * 1024
    #: Seconds an idle client connection is kept open. Longer than any client keeps an
    #: idle one (httpx 5 s, Node's fetch 4 s; a load balancer 60 s): a server that closes at
    #: the moment the client reuses the socket makes that request fail (uvicorn's 5 s
    #: default raced httpx's 5 s).
    keep_alive_s: int = Field(default=65, ge=1, le=3600)
    #: Server processes on one socket (``onejob serve --workers``), each with a dispatcher.
    #: Unset or 0 sizes it (``default_workers``): one per CPU this process may run on
    #: with a PostgreSQL elsewhere, one per two with a PostgreSQL on this host, one on
    #: SQLite, where processes share the file's single write lock (docs/benchmarks.md
    #: measured each). ``/metrics`` adds up all of them (gateway.metrics).
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)  # replaced by the sizing below
    log_level: str = "INFO"
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    #: Contract name (``ticket-triage@1``) or ``"*"`` for every other contract -> route.
    routes: dict[str, RouteConfig] = Field(default_factory=dict)
    dispatcher: DispatcherConfig = DispatcherConfig()
    capacity: CapacityConfig = CapacityConfig()
    admission: AdmissionConfig = AdmissionConfig()
    reconciler: ReconcilerConfig = ReconcilerConfig()
    shadow: ShadowConfig = ShadowConfig()
    webhooks: WebhooksConfig = WebhooksConfig()
    certification: CertificationConfig = CertificationConfig()
    database: DatabaseConfig = Field(default_factory=DatabaseConfig.from_env)
    #: ``ONEJOB_SHORTCUTS=off`` turns every one off, over the file's ``[shortcuts]``.
    shortcuts: ShortcutsConfig = Field(default_factory=ShortcutsConfig.from_env)
    simulator: SimulatorConfig = SimulatorConfig()
    #: OpenTelemetry tracing; ``ONEJOB_TELEMETRY`` and the GenAI capture variable override it.
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig.from_env)

    @field_validator("telemetry")
    @classmethod
    def _telemetry_env(cls, config: TelemetryConfig) -> TelemetryConfig:
        return config.with_env()

    @field_validator("database_url")
    @classmethod
    def _database_url_has_our_driver(cls, url: str) -> str:
        check_database_url(url)
        return url

    @model_validator(mode="before")
    @classmethod
    def _name_providers(cls, data: Any) -> Any:
        """Let ``[providers.NAME]`` tables omit ``name``."""
        if isinstance(data, dict) and isinstance(data.get("providers"), dict):
            data = dict(data)
            data["providers"] = {
                name: ({"name": name, **cfg} if isinstance(cfg, dict) else cfg)
                for name, cfg in data["providers"].items()
            }
        return data

    @model_validator(mode="before")
    @classmethod
    def _size_workers(cls, data: Any) -> Any:
        """Replace ``workers`` unset or 0 by ``default_workers`` for the database."""
        if isinstance(data, dict) and str(data.get("workers", "0")).strip() in ("0", ""):
            url = str(data.get("database_url") or DEFAULT_DATABASE_URL)
            data = {**data, "workers": default_workers(url)}
        return data

    @model_validator(mode="after")
    def _routes_name_known_providers(self) -> Settings:
        for contract, route in self.routes.items():
            for name in (route.primary, *route.fallbacks):
                if name not in self.providers:
                    raise ValueError(f"route {contract!r} names unknown provider {name!r}")
        return self

    def reconcilable_providers(self) -> list[str]:
        """Return the providers configured with ``reconcile = true``, by name."""
        return sorted(name for name, cfg in self.providers.items() if cfg.reconcile)

    def route_for(self, contract: str) -> RouteConfig | None:
        """Return the route of ``contract`` (or the ``*`` route)."""
        return self.routes.get(contract) or self.routes.get("*")


def simulator_defaults(host: str = "127.0.0.1", port: int = DEFAULT_SIM_PORT) -> dict[str, Any]:
    """Return the built-in configuration: two faithful simulated providers on two protocols."""
    base = f"http://{host}:{port}"
    return {
        "simulator": {"enabled": True, "host": host, "port": port},
        "providers": {
            "sim-openai": {
                "protocol": "openai",
                "base_url": f"{base}/p/sim-openai/v1",
                "model": "sim-gpt",
                "timeout": 10.0,
            },
            "sim-anthropic": {
                "protocol": "anthropic",
                "base_url": f"{base}/p/sim-anthropic",
                "model": "sim-claude",
                "timeout": 10.0,
            },
        },
        "routes": {"*": {"primary": "sim-openai", "fallbacks": ["sim-anthropic"]}},
    }


_ENV_FIELDS = {
    "ONEJOB_DATABASE_URL": "database_url",
    "ONEJOB_HOST": "host",
    "ONEJOB_PORT": "port",
    "ONEJOB_INSTANCE_ID": "instance_id",
    "ONEJOB_CERTIFICATIONS": "certifications_path",
    "ONEJOB_LOG_LEVEL": "log_level",
    "ONEJOB_WORKERS": "workers",
}
#: ``ONEJOB_*`` variables of the ``[database]`` table.
_ENV_DATABASE_FIELDS = {
    "ONEJOB_DATABASE_TIMEOUT": "timeout",
    "ONEJOB_DATABASE_CONNECT_TIMEOUT": "connect_timeout",
    "ONEJOB_DATABASE_POOLER": "pooler",
    "ONEJOB_DATABASE_LISTEN_URL": "listen_url",
}


def default_workers(database_url: str) -> int:
    """Return the server processes ``onejob serve`` starts when not told.

    SQLite: 1, as processes would share the file's one write lock. PostgreSQL on another
    host: one per usable CPU, as Python runs one core per process. PostgreSQL on this
    host: one per two usable CPUs (at least 1), as the database's backends need cores
    too. On 2 vCPUs beside PostgreSQL, one worker made 1.17x the creations of two at
    two thirds of the host's CPU per creation, and as many sync jobs
    (docs/benchmarks.md, thirteenth session).
    """
    if DatabaseKind.of(database_url).one_process:
        return 1
    cpus = usable_cpus()
    return max(1, cpus // 2) if database_on_this_host(database_url) else cpus


def usable_cpus(cpu_max: Path | None = None) -> int:
    """Return the CPUs this process may use: its affinity mask, capped by a cgroup v2
    CPU quota (``docker --cpus``, a Kubernetes limit) rounded up, at most ``MAX_WORKERS``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS and Windows have no affinity call
        cpus = os.cpu_count() or 1
    with contextlib.suppress(OSError, ValueError):
        text = (cpu_max or CGROUP_CPU_MAX).read_text(encoding="ascii")
        quota, period = text.split()[:2]
        if quota != "max":
            cpus = min(cpus, -(-int(quota) // int(period)))
    return max(1, min(cpus, MAX_WORKERS))


def load_settings(
    config_path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build settings from the TOML file (or the built-in default), then env, then overrides."""
    env = os.environ if env is None else env
    path = config_path or env.get("ONEJOB_CONFIG")
    if path is None and Path("onejob.toml").is_file():
        path = "onejob.toml"
    if path is not None:
        data: dict[str, Any] = _read_file(Path(path))
    else:
        data = simulator_defaults(port=_sim_port(env))
    origins: dict[str, str] = {}  # a setting -> the variable or option that set it
    for var, field in _ENV_FIELDS.items():
        if var in env:
            data[field] = env[var]
            origins[field] = var
    for var, field in _ENV_DATABASE_FIELDS.items():
        if var in env:
            data["database"] = {**data.get("database", {}), field: env[var]}
            origins[f"database.{field}"] = var
    try:
        if ShortcutsConfig.from_env(env) == ShortcutsConfig.all_off():
            data["shortcuts"] = ShortcutsConfig.all_off().model_dump()
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    for key, value in overrides.items():
        if value is not None:
            data[key] = value
            origins[key] = "--" + key.replace("_", "-")
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, path, origins)) from None


def _read_file(path: Path) -> dict[str, Any]:
    """Read the TOML file, or say in a line why it cannot be read."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise SettingsError(
            f"no configuration file at {path} (named by --config or ONEJOB_CONFIG); "
            "fix the path, or copy onejob.example.toml there"
        ) from None
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path} is not valid TOML: {exc}") from None


def _sim_port(env: Mapping[str, str]) -> int:
    text = env.get("ONEJOB_SIM_PORT", str(DEFAULT_SIM_PORT))
    if not text.strip().isdigit() or not 0 < int(text) < 65536:
        raise SettingsError(f"ONEJOB_SIM_PORT must be a port number, not {text!r}")
    return int(text)


def _describe(exc: ValidationError, path: str | Path | None, origins: Mapping[str, str]) -> str:
    """Say what a validation error refused, a line per setting, and where it was set."""
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "settings"
        if where in origins:
            where = f"{origins[where]} ({where})"
        elif path is not None:
            where = f"{path}: {where}"
        if error["type"] == "extra_forbidden":
            what = "not a setting (check its spelling in docs/configuration.md)"
        elif error["type"] == "value_error":
            what = str(error.get("ctx", {}).get("error", error["msg"]))
        else:
            what = f"{error['msg']} (got {error.get('input')!r})"
        lines.append(f"{where}: {what}")
    return "\n".join(lines)
