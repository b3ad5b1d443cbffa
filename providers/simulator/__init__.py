"""The provider simulator: a real HTTP server speaking the OpenAI, Anthropic and Gemini APIs.

Part of the product: ``onejob sim serve`` runs it, and users' own tests can start one with
``async with run_simulator() as sim:``.
"""

from __future__ import annotations

from providers.simulator.app import SimulatorApp, create_sim_app, route, wires
from providers.simulator.asgi import ASGIApp
from providers.simulator.profiles import DRIFT_KEY, Profile, SimContract, extract_input
from providers.simulator.script import Behaviour, BehaviourKind, CallRecord
from providers.simulator.server import RunningSimulator, run_simulator, serve

__all__ = [
    "DRIFT_KEY",
    "ASGIApp",
    "Behaviour",
    "BehaviourKind",
    "CallRecord",
    "Profile",
    "RunningSimulator",
    "SimContract",
    "SimulatorApp",
    "create_sim_app",
    "extract_input",
    "route",
    "run_simulator",
    "serve",
    "wires",
]
