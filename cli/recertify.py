"""The worker's scheduled re-certification (issue 38): ``onejob certify --due`` every
``[certification] interval`` (with ``--production [certification] production``, 0 by
default: issue 48), and the days-to-expiry gauge per certificate.

``onejob worker`` runs ``recertify_forever`` beside the dispatcher; cron can run
``onejob certify --due`` instead (docs/certification.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
from typing import TYPE_CHECKING

from cli.certify import EXIT_PASS, certify_due, register

if TYPE_CHECKING:
    from gateway.metrics import Metrics
    from gateway.settings import Settings


async def recertify_forever(settings: Settings, stop: asyncio.Event, metrics: Metrics) -> None:
    """The worker's scheduled pass: ``certify --due`` every ``[certification] interval``."""
    import io
    import logging

    log = logging.getLogger("onejob.recertify")
    config = settings.certification
    args = pass_arguments(settings)
    while not stop.is_set():
        out = io.StringIO()
        try:
            code = await certify_due(args, out)
            _expiry_gauges(settings, metrics)
        except Exception:
            log.exception("re-certification pass failed")
        else:
            said = out.getvalue().strip()
            level = logging.INFO if code == EXIT_PASS else logging.WARNING
            log.log(level, "re-certification pass: %s", said[-2000:], extra={"exit_code": code})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), config.interval)


def pass_arguments(settings: Settings) -> argparse.Namespace:
    """Return the ``onejob certify --due`` arguments of the worker's pass."""
    config = settings.certification
    parser = argparse.ArgumentParser(prog="onejob")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        [
            "certify", "--due", "--mode", "live", "--repeats", str(config.repeats),
            "--within-days", str(config.within_days), "--validity-days", str(config.validity_days),
            "--report-dir", config.report_dir, "--registry", settings.certifications_path,
            "--production", str(config.production),
        ]
    )  # fmt: skip
    args.settings = settings
    return args


def _expiry_gauges(settings: Settings, metrics: Metrics) -> None:
    """Set days to expiry per certificate of the routed providers (the worker's /metrics)."""
    from contracts.loader import load_catalog
    from contracts.registry import CertificationRegistry
    from contracts.registry_file import days_to_expiry

    registry = CertificationRegistry(settings.certifications_path)
    now = dt.datetime.now(dt.UTC)
    names = {n for r in settings.routes.values() for n in (r.primary, *r.fallbacks)}
    for contract in load_catalog():
        for name in sorted(names):
            cert = registry.latest_certificate(contract, name)
            days = days_to_expiry(cert, now) if cert is not None else None
            if days is not None:
                metrics.certification.days_to_expiry.labels(contract, name).set(days)
