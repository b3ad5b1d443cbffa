"""The scenario registry: ``@scenario`` registers a module's scenario, with its place.

``all_scenarios()`` imports every module of ``scenarios.breakpoints`` (discovered, not
listed), so each registers itself; the run order is each scenario's ``order``.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scenarios.context import ScenarioContext

ScenarioBody = Callable[["ScenarioContext"], Awaitable[None]]

SCENARIO_TIMEOUT = 90.0  # seconds one scenario may run before it is an ERROR
PACKAGE = "scenarios.breakpoints"


@dataclasses.dataclass(frozen=True, slots=True)
class ScenarioSpec:
    """A registered scenario."""

    name: str
    title: str
    body: ScenarioBody
    order: int  #: where it runs among the others (reports list them in this order)
    needs_postgres: bool = False
    timeout: float = SCENARIO_TIMEOUT  # seconds
    #: Builds its own world around PostgreSQL (a network namespace, a failover cluster)
    #: and runs once, in the run on PostgreSQL; the SQLite run lists it as skipped.
    postgres_run_only: bool = False


SCENARIOS: dict[str, ScenarioSpec] = {}


def scenario(
    name: str,
    title: str,
    *,
    order: int,
    needs_postgres: bool = False,
    timeout: float = SCENARIO_TIMEOUT,
    postgres_run_only: bool = False,
) -> Callable[[ScenarioBody], ScenarioBody]:
    """Register the decorated coroutine as the scenario ``name``, run ``order``-th."""

    def register(body: ScenarioBody) -> ScenarioBody:
        clash = next((s for s in SCENARIOS.values() if s.order == order and s.name != name), None)
        if clash is not None:
            raise ValueError(f"scenarios {clash.name!r} and {name!r} both have order {order}")
        SCENARIOS[name] = ScenarioSpec(
            name,
            title,
            body,
            order,
            needs_postgres or postgres_run_only,
            timeout,
            postgres_run_only,
        )
        return body

    return register


def all_scenarios() -> dict[str, ScenarioSpec]:
    """Import every scenario module and return the registry in run order."""
    package = importlib.import_module(PACKAGE)
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{PACKAGE}.{module.name}")
    return {s.name: s for s in sorted(SCENARIOS.values(), key=lambda s: s.order)}


def scenario_order() -> tuple[str, ...]:
    """Return the scenarios' names in run order."""
    return tuple(all_scenarios())
