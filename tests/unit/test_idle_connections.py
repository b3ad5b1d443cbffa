"""A server keeps an idle connection longer than its clients keep theirs.

When both sides give up on an idle connection after the same time (uvicorn's and httpx's
default is 5 s), the server can close the socket at the moment the client sends on it,
and that request fails with ``httpx.ReadError`` (CI met it: a test's control client
waited 5.5 s between two calls to the simulator).
"""

from __future__ import annotations

import httpx

from gateway.server import uvicorn_options
from gateway.settings import Settings
from providers.simulator.app import SimulatorApp
from providers.simulator.server import _config

HTTPX_IDLE = httpx.Limits().keepalive_expiry or 0.0  # what an httpx client keeps


def test_the_gateway_keeps_idle_connections_longer_than_httpx_and_a_load_balancer() -> None:
    keep = uvicorn_options(Settings())["timeout_keep_alive"]
    assert keep > HTTPX_IDLE
    assert keep > 60  # an AWS ALB's and nginx's upstream idle time


def test_the_setting_reaches_uvicorn() -> None:
    assert uvicorn_options(Settings(keep_alive_s=120))["timeout_keep_alive"] == 120


def test_the_simulator_keeps_idle_connections_longer_than_its_clients() -> None:
    from gateway.background import KEEPALIVE_EXPIRY  # the gateway's pool to providers

    config = _config(SimulatorApp(), "127.0.0.1", 0, "warning")
    assert config.timeout_keep_alive > max(HTTPX_IDLE, KEEPALIVE_EXPIRY)
