"""Generated gateway config, verdict mapping, and the CLI's progress and summary lines."""

from __future__ import annotations

import io
import tomllib
from pathlib import Path

import pytest

from cli.scenarios import progress_line, run_and_report, summary_table
from gateway.settings import Settings
from scenarios.context import ScenarioContext
from scenarios.model import RunReport, ScenarioResult, Verdict
from scenarios.registry import ScenarioSpec, all_scenarios
from scenarios.runner import RunOptions, run_scenario
from scenarios.setup import GatewayConfig, database_kind


def test_generated_toml_is_valid_gateway_settings(tmp_path: Path) -> None:
    config = GatewayConfig(4321, tmp_path / "certs.json", hedge_after_s=0.5, openai_timeout=1.5)
    settings = Settings.model_validate(tomllib.loads(config.toml()))
    assert settings.providers["sim-openai"].base_url == "http://127.0.0.1:4321/p/sim-openai/v1"
    assert settings.providers["sim-openai"].timeout == 1.5
    assert settings.providers["sim-anthropic"].base_url == "http://127.0.0.1:4321/p/sim-anthropic"
    route = settings.route_for("ticket-triage@1")
    assert route is not None and route.hedge_after_s == 0.5
    assert route.fallbacks == ("sim-anthropic",)
    assert settings.simulator.enabled is False
    assert settings.certifications_path == str(tmp_path / "certs.json")
    assert settings.shadow.sample_rate == 0  # off unless a scenario turns it on


def test_generated_toml_turns_the_shadow_checks_on_and_names_the_database(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'sc.db'}"
    config = GatewayConfig(
        4321,
        tmp_path / "certs.json",
        shadow={"sample_rate": 1.0, "min_samples": 4, "threshold": 0.5, "min_interval": 0.0},
        database_url=url,
    )
    settings = Settings.model_validate(tomllib.loads(config.toml()))
    assert settings.database_url == url
    assert (settings.shadow.sample_rate, settings.shadow.min_samples) == (1.0, 4)
    assert (settings.shadow.threshold, settings.shadow.min_interval) == (0.5, 0.0)


def test_generated_toml_sets_the_capacity_knobs(tmp_path: Path) -> None:
    config = GatewayConfig(
        4321,
        tmp_path / "certs.json",
        capacity={"patience": 2.0, "breaker_failures": 3, "breaker_open": 4.0},
    )
    settings = Settings.model_validate(tomllib.loads(config.toml()))
    capacity = settings.capacity
    assert (capacity.patience, capacity.breaker_failures, capacity.breaker_open) == (2.0, 3, 4.0)
    assert "[capacity]" not in GatewayConfig(4321, tmp_path / "certs.json").toml()


def test_database_kind_tells_postgres_from_sqlite() -> None:
    assert database_kind(None) == "sqlite"
    assert database_kind("sqlite+aiosqlite:///x.db") == "sqlite"
    assert database_kind("postgresql+asyncpg://postgres@127.0.0.1/test") == "postgresql"


def test_every_required_scenario_is_registered_in_order() -> None:
    assert list(all_scenarios()) == [
        "double-click",
        "divergent-key",
        "timeout-unknown",
        "reverse-order-finish",
        "fallback-button-during-unknown",
        "worker-crash",
        "uncertified-fallback",
        "cross-instance-double-click",
        "cancel-vs-finish",
        "load-balancer-retry",
        "unknown-resolved-by-reconciler",
        "shadow-suspension",
        "database-partition",
        "database-failover",
        "rate-limit-storm",
        "provider-outage",
        "database-partition-pgbouncer",
    ]
    assert all_scenarios()["cross-instance-double-click"].needs_postgres
    assert all_scenarios()["database-partition"].postgres_run_only
    assert all_scenarios()["database-failover"].postgres_run_only
    assert all_scenarios()["database-partition-pgbouncer"].postgres_run_only


async def _passes(ctx: ScenarioContext) -> None:
    ctx.expect(True, "it holds")


async def _fails(ctx: ScenarioContext) -> None:
    ctx.expect(True, "first holds")
    ctx.expect(1 == 2, "one job id", "ids ['a', 'b']")
    ctx.expect(True, "never reached")


async def _crashes(ctx: ScenarioContext) -> None:
    raise RuntimeError("socket closed")


@pytest.mark.parametrize(
    ("body", "verdict", "reason"),
    [
        (_passes, Verdict.PASS, "1 checks held"),
        (_fails, Verdict.FAIL, "one job id: ids ['a', 'b']"),
        (_crashes, Verdict.ERROR, "RuntimeError: socket closed"),
    ],
)
async def test_run_scenario_turns_the_outcome_into_a_verdict(
    tmp_path: Path, body: object, verdict: Verdict, reason: str
) -> None:
    spec = ScenarioSpec("fake", "a fake", body, 1)  # type: ignore[arg-type]
    result = await run_scenario(spec, RunOptions(report_dir=tmp_path))
    assert (result.verdict, result.reason) == (verdict, reason)
    if verdict is Verdict.FAIL:
        assert [c.ok for c in result.checks] == [True, False]


async def test_a_postgres_scenario_skips_without_postgres(tmp_path: Path) -> None:
    spec = ScenarioSpec("pg", "needs pg", _passes, 2, needs_postgres=True)
    options = RunOptions(report_dir=tmp_path)
    options.postgres_url = None
    result = await run_scenario(spec, options)
    assert result.verdict is Verdict.SKIP and "needs PostgreSQL" in result.reason


async def test_a_slow_scenario_is_an_error_not_a_hang(tmp_path: Path) -> None:
    import asyncio

    async def slow(ctx: ScenarioContext) -> None:
        await asyncio.sleep(30)

    result = await run_scenario(
        ScenarioSpec("slow", "slow", slow, 3, timeout=0.2), RunOptions(report_dir=tmp_path)
    )
    assert result.verdict is Verdict.ERROR and "did not finish within" in result.reason


def _result(name: str, verdict: Verdict, reason: str) -> ScenarioResult:
    return ScenarioResult(name, name, verdict, reason, 2.5, "sqlite")


def test_progress_line_and_summary_table_show_verdicts_and_reasons() -> None:
    ok, bad = (
        _result("double-click", Verdict.PASS, "9 checks held"),
        _result("worker-crash", Verdict.FAIL, "two provider calls\nmore"),
    )
    assert progress_line(1, 2, ok).startswith("[ 1/2] double-click")
    assert progress_line(2, 2, bad).endswith("two provider calls")
    table = summary_table(RunReport([ok, bad], "t", 5.0, "sqlite"))
    assert "worker-crash" in table and "FAIL" in table
    assert "2 scenarios (1 PASS, 1 FAIL) in 5.0 s on sqlite" in table


async def test_unknown_scenario_name_exits_2(tmp_path: Path) -> None:
    out = io.StringIO()
    code = await run_and_report(["no-such"], RunOptions(report_dir=tmp_path), out)
    assert code == 2 and "unknown scenarios: no-such" in out.getvalue()


async def test_parallel_runs_report_in_catalog_order_and_progress_in_finish_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    import scenarios.runner as runner

    async def slow(ctx: ScenarioContext) -> None:
        await asyncio.sleep(0.4)
        ctx.expect(True, "slow held")

    specs = {
        "first-slow": ScenarioSpec("first-slow", "t", slow, 4),
        "second-fast": ScenarioSpec("second-fast", "t", _passes, 5),
    }
    monkeypatch.setattr(runner, "all_scenarios", lambda: specs)
    finished: list[str] = []
    report = await runner.run_scenarios(
        [],
        RunOptions(report_dir=tmp_path, jobs=2),
        lambda i, n, r: finished.append(f"{i}/{n} {r.name}"),
    )
    assert [r.name for r in report.results] == ["first-slow", "second-fast"]
    assert finished == ["1/2 second-fast", "2/2 first-slow"]  # so they overlapped


def test_workers_are_sized_per_database_unless_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.settings import load_settings

    pg, lite = "postgresql+asyncpg://h/db", "sqlite+aiosqlite:///./onejob.db"
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    assert Settings(database_url=pg).workers == 6
    assert Settings(database_url=pg, workers=0).workers == 6
    assert Settings(database_url=lite).workers == 1
    assert Settings(database_url=lite, workers=0).workers == 1
    assert Settings().workers == 1  # the default database is SQLite
    assert Settings(database_url=pg, workers=3).workers == 3
    assert Settings(database_url=lite, workers=2).workers == 2
    assert Settings(database_url=pg, workers=1).workers == 1
    # The CPUs this process may run on, not the host's count (a pinned container).
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {3})
    assert Settings(database_url=pg).workers == 1
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    env = {"ONEJOB_DATABASE_URL": pg}
    assert load_settings(None, env={**env, "ONEJOB_WORKERS": "0"}).workers == 4
    assert load_settings(None, env=env).workers == 4
    assert load_settings(None, env={**env, "ONEJOB_WORKERS": "1"}).workers == 1
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Settings(database_url=pg, workers=-1)


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("postgresql+asyncpg://127.0.0.1:5432/test", True),
        ("postgresql+asyncpg://onejob:secret@localhost/onejob", True),
        ("postgresql+asyncpg://[::1]:5432/onejob", True),
        ("postgresql+asyncpg:///onejob", True),  # the driver's default Unix socket
        ("postgresql+asyncpg://onejob@/onejob?host=/var/run/postgresql", True),
        ("postgresql+asyncpg://db.internal:5432/onejob", False),
        ("postgresql+asyncpg://10.0.0.5/onejob", False),
        ("postgresql+asyncpg://localhost.example.com/onejob", False),
        ("postgresql+asyncpg://onejob@/onejob?host=db.internal", False),  # the query's host
        ("postgresql+asyncpg://localhost/onejob?host=db.internal", False),  # wins
        ("postgresql+asyncpg://u@/onejob?host=127.0.0.1:5432&host=db.internal:5432", False),
        ("postgresql+asyncpg://u@/onejob?host=/var/run/postgresql,db.internal", False),
        ("postgresql+asyncpg://u@/onejob?host=localhost:5432&host=[::1]:5433", True),
    ],
)
def test_a_postgresql_on_this_host_gets_one_worker_per_two_cpus(
    monkeypatch: pytest.MonkeyPatch, url: str, local: bool
) -> None:
    from gateway.settings import database_on_this_host

    monkeypatch.delenv("PGHOST", raising=False)
    assert database_on_this_host(url) is local
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(6)))
    assert Settings(database_url=url).workers == (3 if local else 6)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    assert Settings(database_url=url).workers == (1 if local else 2)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert Settings(database_url=url).workers == 1
    assert Settings(database_url=url, workers=2).workers == 2  # set: as given


def test_no_host_in_the_url_is_pghost_else_the_default_socket() -> None:
    from gateway.settings import database_on_this_host

    url = "postgresql+asyncpg:///onejob"
    assert database_on_this_host(url, env={}) is True
    assert database_on_this_host(url, env={"PGHOST": "/run/postgresql"}) is True
    assert database_on_this_host(url, env={"PGHOST": "db.internal"}) is False


@pytest.mark.parametrize("url", ["not a url", "postgresql+asyncpg://h:port/db"])
def test_a_malformed_database_url_is_not_called_local(url: str) -> None:
    from gateway.settings import database_on_this_host

    assert database_on_this_host(url) is False  # the engine refuses it when it opens it


def test_sizing_counts_a_container_cpu_quota_and_caps_at_64(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gateway import settings as settings_module
    from gateway.settings import usable_cpus

    pg = "postgresql+asyncpg://h/db"
    cpu_max = tmp_path / "cpu.max"
    monkeypatch.setattr(settings_module, "CGROUP_CPU_MAX", cpu_max)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)))
    assert usable_cpus() == 8  # no cgroup v2 file: the affinity mask
    cpu_max.write_text("150000 100000\n")  # docker --cpus 1.5
    assert usable_cpus() == 2
    assert Settings(database_url=pg).workers == 2
    cpu_max.write_text("max 100000\n")
    assert usable_cpus() == 8
    cpu_max.write_text("garbage\n")
    assert usable_cpus() == 8
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(200)))
    assert Settings(database_url=pg).workers == 64  # a big host still starts


def test_workers_share_one_hosts_postgresql_connections() -> None:
    from gateway.store.engine import pg_pool_share

    assert pg_pool_share(1) == (20, 10)
    assert pg_pool_share(2) == (20, 10)  # as measured: 2 workers on this 2-CPU host
    assert pg_pool_share(4) == (14, 6)
    assert pg_pool_share(64) == (7, 3)
    for n in range(1, 9):  # the default up to 8 CPUs, with each LISTEN connection
        size, overflow = pg_pool_share(n)
        assert n * (size + overflow + 1) <= 100
