"""``onejob certify --production N``: draw the production samples a run judges fallbacks on.

For each contract of the run that has a route, and a fallback of that route among the
providers certified: a hedgeable contract that opted in (``[certification]
production_contracts``) gets the N newest succeeded jobs its primary answered, read through
the gateway's composition root (``gateway.bootstrap.production_samples``) and handed to the
runner as plain data (``certify.production.ProductionDraw``); any other gets a draw marked
skipped, with why. The threshold and ``min_samples`` are the shadow checks' (``[shadow]``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from certify.production import ProductionDraw
    from contracts.model import Contract
    from gateway.settings import Settings

NOT_HEDGEABLE = "not hedgeable: a second call on a job's input may have side effects"


class ProductionRefused(ValueError):
    """``--production`` cannot run as asked (no database, not live, a negative N)."""


def add_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--production N`` to ``onejob certify``."""
    parser.add_argument(
        "--production",
        type=int,
        default=0,
        metavar="N",
        help="also send each fallback the inputs of the N newest succeeded jobs its primary "
        "answered (hedgeable contracts in [certification] production_contracts) and judge "
        "its answers against the primary's results; needs the gateway's database (default 0)",
    )


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse ``--production`` where it cannot run; say why."""
    wanted = getattr(args, "production", 0) or 0
    if wanted < 0:
        raise ProductionRefused("--production must be >= 0")
    if wanted and args.sim:
        raise ProductionRefused(
            "--production needs the gateway's database and routes: give --config, not --sim"
        )
    if wanted and args.mode != "live":
        raise ProductionRefused(
            "--production needs --mode live: production inputs are never recorded in cassettes"
        )


async def production_draws(
    args: argparse.Namespace, contracts: Sequence[Contract], names: Sequence[str]
) -> list[ProductionDraw]:
    """Return the draws of this run: one per contract whose route has a fallback in ``names``."""
    wanted = getattr(args, "production", 0) or 0
    if wanted <= 0:
        return []
    from certify.production import ProductionDraw, ProductionSample
    from gateway.bootstrap import production_samples
    from gateway.settings import load_settings

    given = getattr(args, "settings", None)  # the worker's own (its scheduled pass)
    settings: Settings = given if given is not None else load_settings(args.config)
    opted = set(settings.certification.production_contracts)
    draws: list[ProductionDraw] = []
    for contract in contracts:
        route = settings.route_for(contract.name)
        fallbacks = tuple(f for f in (route.fallbacks if route else ()) if f in names)
        if route is None or not fallbacks:
            continue
        skipped: str | None = None
        samples: tuple[ProductionSample, ...] = ()
        if not contract.hedgeable:
            skipped = NOT_HEDGEABLE
        elif contract.name not in opted:
            skipped = (
                f"{contract.name} is not in [certification] production_contracts: its "
                "customers' inputs would go to a provider not yet approved for them"
            )
        else:
            try:
                rows = await production_samples(settings, contract.name, route.primary, wanted)
            except Exception as exc:
                raise ProductionRefused(
                    f"cannot draw production samples from the database: {type(exc).__name__}: "
                    f"{str(exc)[:200]}"
                ) from exc
            samples = tuple(ProductionSample(r["job_id"], r["input"], r["result"]) for r in rows)
        draws.append(
            ProductionDraw(
                contract=contract.name,
                primary=route.primary,
                fallbacks=fallbacks,
                wanted=wanted,
                samples=samples,
                threshold=settings.shadow.threshold,
                min_samples=settings.shadow.min_samples,
                skipped=skipped,
            )
        )
    return draws
