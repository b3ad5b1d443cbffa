"""``onejob certify`` refuses to start, with one clear error and exit 2, when a provider
cannot be certified at all: a missing key variable, an unreachable or wrong base URL."""

from __future__ import annotations

import io
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from certify.preflight import preflight
from cli.certify import certify
from contracts.loader import load_catalog
from providers.config import ProviderConfig
from providers.simulator import RunningSimulator, run_simulator

from .conftest import parse

CONTRACT = load_catalog()["ticket-triage@1"]


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    async with run_simulator(port=0) as running:
        yield running


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config_file(tmp_path: Path, protocol: str, base_url: str, key_env: str | None) -> Path:
    key = f'api_key_env = "{key_env}"\n' if key_env else ""
    path = tmp_path / "onejob.toml"
    path.write_text(
        f'[providers.p]\nprotocol = "{protocol}"\nbase_url = "{base_url}"\nmodel = "m"\n{key}'
        '\n[routes."*"]\nprimary = "p"\nfallbacks = []\n'
    )
    return path


async def run_certify(tmp_path: Path, config: Path) -> tuple[int, str]:
    out = io.StringIO()
    args = parse(
        "certify", "--config", str(config), "--contract", "ticket-triage@1",
        "--registry", str(tmp_path / "certs.json"), "--report-dir", str(tmp_path / "out"),
    )  # fmt: skip
    code = await certify(args, out)
    return code, out.getvalue()


async def test_an_unset_key_variable_is_one_error_before_any_call(
    tmp_path: Path, sim: RunningSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ONEJOB_TEST_MISSING_KEY", raising=False)
    url = sim.provider_url("p", "openai")
    code, said = await run_certify(
        tmp_path, config_file(tmp_path, "openai", url, "ONEJOB_TEST_MISSING_KEY")
    )
    assert code == 2
    assert said.count("error: ") == 1
    assert "error: p: api_key_env names ONEJOB_TEST_MISSING_KEY, which is not set" in said
    assert sim.calls() == []
    assert not (tmp_path / "certs.json").exists()


async def test_an_unreachable_base_url_is_one_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    code, said = await run_certify(tmp_path, config_file(tmp_path, "openai", url, None))
    assert code == 2
    # Nothing answers: it says so, and (a loopback address) how to start the simulator,
    # instead of blaming the provider configuration (issue 47, item 6).
    assert f"error: p: nothing answers at {url} (" in said
    assert "is the provider running?" in said and "make serve" in said
    assert "no case was run: fix the above first" in said
    assert "provider configuration" not in said


@pytest.mark.parametrize(
    ("protocol", "suffix", "hint"),
    [
        ("openai", "", "it should end in /v1"),  # base_url without /v1
        ("anthropic", "/v1", "it should be the host without /v1"),  # an extra /v1
    ],
)
async def test_a_wrong_path_is_the_providers_404_with_a_hint(
    tmp_path: Path, sim: RunningSimulator, protocol: str, suffix: str, hint: str
) -> None:
    url = f"{sim.base_url}/p/p{suffix}"
    code, said = await run_certify(tmp_path, config_file(tmp_path, protocol, url, None))
    assert code == 2
    assert "answered 404" in said and hint in said
    assert said.count("error: ") == 1


async def test_a_correct_provider_passes_preflight_without_a_model_call(
    sim: RunningSimulator,
) -> None:
    providers = [
        ProviderConfig(name=n, protocol=p, base_url=sim.provider_url(n, p), model="m")  # type: ignore[arg-type]
        for n, p in (("a", "openai"), ("b", "anthropic"), ("c", "gemini"))
    ]
    async with httpx.AsyncClient() as client:
        assert await preflight(providers, CONTRACT, client) == []
    assert {c["status"] for c in sim.calls()} == {400}  # the empty probe body is refused


async def test_replay_without_cassettes_is_one_line_before_any_case(tmp_path: Path) -> None:
    """It ran every case to print ten 'no cassette for …' lines (issue 47, item 6)."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    out = io.StringIO()
    args = parse(
        "certify", "--config", str(config_file(tmp_path, "openai", url, None)),
        "--contract", "ticket-triage@1", "--mode", "replay",
        "--registry", str(tmp_path / "certs.json"), "--report-dir", str(tmp_path / "out"),
    )  # fmt: skip
    assert await certify(args, out) == 2
    said = out.getvalue()
    assert said.count("error: ") == 1, said
    assert "error: no cassettes for p in " in said and "no case was run" in said
    assert not (tmp_path / "certs.json").exists()
