from __future__ import annotations

from pathlib import Path

from gateway.settings import Settings, load_settings, simulator_defaults

EXAMPLE = Path(__file__).resolve().parents[3] / "onejob.example.toml"


def test_the_example_config_matches_the_built_in_default() -> None:
    settings = load_settings(EXAMPLE, env={})
    builtin = Settings.model_validate(simulator_defaults())
    assert settings.providers == builtin.providers
    assert settings.routes == builtin.routes
    assert settings.simulator == builtin.simulator
    assert settings.dispatcher == builtin.dispatcher
    assert settings.max_body_bytes == builtin.max_body_bytes


def test_the_config_file_can_come_from_the_environment() -> None:
    settings = load_settings(None, env={"ONEJOB_CONFIG": str(EXAMPLE)})
    assert "sim-anthropic" in settings.providers


def test_environment_overrides_the_file() -> None:
    settings = load_settings(EXAMPLE, env={"ONEJOB_DATABASE_URL": "sqlite+aiosqlite:///x.db"})
    assert settings.database_url == "sqlite+aiosqlite:///x.db"
