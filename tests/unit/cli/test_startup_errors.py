"""A command that cannot start says why in a line with the fix, never with a traceback."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from cli.main import EXIT_CANNOT_START, main
from gateway.settings import SettingsError, load_settings

PG_URL = os.environ.get(
    "ONEJOB_TEST_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends


def postgres_answers() -> bool:
    url = make_url(PG_URL)
    try:
        with socket.create_connection((url.host or "127.0.0.1", url.port or 5432), timeout=1):
            return True
    except OSError:
        return False


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``onejob ARGV`` in this process; return what it said, checking it refused."""
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == EXIT_CANNOT_START, err
    assert "Traceback" not in err
    assert 1 <= len(err.strip().splitlines()) <= 3, err
    return err


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgres://alice:s3cret@db.example/onejob", "write postgresql+asyncpg://alice:***@"),
        ("postgresql://db.example/onejob", "write postgresql+asyncpg://db.example/onejob"),
        ("sqlite:///./onejob.db", "write sqlite+aiosqlite:///./onejob.db"),
        ("sqlite+pysqlite:////var/onejob.db", "write sqlite+aiosqlite:////var/onejob.db"),
        ("mysql://db.example/onejob", "SQLite (sqlite+aiosqlite:///PATH) or PostgreSQL"),
        ("onejob.db", "is not a database URL"),
    ],
)
def test_a_database_url_of_another_driver_is_refused_with_the_url_to_write(
    capsys: pytest.CaptureFixture[str], url: str, says: str
) -> None:
    err = refusal(capsys, "keys", "list", "--database-url", url)
    assert err.startswith("onejob keys list: --database-url (database_url): ")
    assert says in err
    assert "s3cret" not in err


def test_a_url_from_the_environment_names_the_variable() -> None:
    with pytest.raises(SettingsError, match=r"^ONEJOB_DATABASE_URL \(database_url\): postgres"):
        load_settings(env={"ONEJOB_DATABASE_URL": "postgres://h/db"})


def test_a_missing_config_file_is_one_line_naming_the_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = refusal(capsys, "serve", "--config", "/nonexistent.toml")
    assert err == (
        "onejob serve: no configuration file at /nonexistent.toml (named by --config or "
        "ONEJOB_CONFIG); fix the path, or copy onejob.example.toml there\n"
    )


def test_a_misspelled_setting_names_the_file_and_the_setting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "onejob.toml"
    config.write_text("[dispatcher]\nrunnerz = 4\n")
    err = refusal(capsys, "worker", "--config", str(config))
    assert err == (
        f"onejob worker: {config}: dispatcher.runnerz: not a setting "
        "(check its spelling in docs/configuration.md)\n"
    )


def test_a_value_of_the_wrong_type_says_what_it_got(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "onejob.toml"
    config.write_text("[dispatcher]\nrunners = 'many'\n")
    err = refusal(capsys, "reconcile", "--config", str(config))
    assert f"{config}: dispatcher.runners: Input should be a valid integer" in err
    assert "'many'" in err


def test_a_file_that_is_not_toml_says_where(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "onejob.toml"
    config.write_text("[dispatcher\n")
    err = refusal(capsys, "db", "upgrade", "--config", str(config))
    assert f"{config} is not valid TOML: Expected ']'" in err
    assert "line 1" in err


def test_a_refused_postgres_port_says_to_start_it_or_fix_the_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{closed_port()}/test"
    err = refusal(capsys, "keys", "list", "--database-url", url)
    assert "cannot connect to the database" in err and "connection refused" in err
    assert "fix --database-url or ONEJOB_DATABASE_URL" in err


def test_a_sqlite_file_in_a_missing_directory_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'missing' / 'onejob.db'}"
    err = refusal(capsys, "keys", "list", "--database-url", url)
    assert "SQLite cannot open the database file" in err
    assert "does its directory exist" in err


@pytest.mark.skipif(not postgres_answers(), reason="no PostgreSQL at ONEJOB_TEST_DATABASE_URL")
def test_a_missing_postgres_database_says_to_create_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = make_url(PG_URL).set(database="onejob_no_such_database")
    err = refusal(capsys, "keys", "list", "--database-url", url.render_as_string(False))
    assert 'database "onejob_no_such_database" does not exist' in err
    assert "create it (createdb)" in err


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("onejob ") and out.strip() != "onejob unknown"


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    import cli.database

    def broken(args: object) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli.database, "cmd_keys_list", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["keys", "list"])
