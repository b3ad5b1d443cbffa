"""Failover suspensions: a certified pair that production traffic showed to disagree.

The gateway's shadow checks (``gateway.shadow``) re-run a sample of succeeded jobs on each
certified fallback; when the fallback disagrees with the primary too often, they write a
suspension into the registry file beside the certificates::

    "suspensions": [{"contract": "ticket-triage@1", "primary": "sim-openai",
                     "fallback": "sim-anthropic", "since": "...Z",
                     "reason": "shadow checks disagree", "disagreement_rate": 0.45,
                     "checks": 20, "disagreements": 9, "threshold": 0.2, "min_samples": 20,
                     "fields": {"category": 9}, "fallback_run_id": "cert-...",
                     "fallback_certified_at": "...Z", "by": "gw-4242",
                     "cleared_at": null, "cleared_by": null}]

A suspension holds against the fallback's certificate it was measured on (and any older
one): a newer certificate of the fallback for the contract clears it. It is then kept,
marked ``cleared_at`` / ``cleared_by`` (the run id), as the record of what happened.
``fields`` counts disagreeing must-agree fields and broken layers by name: no value of a
job ever reaches the registry.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from contracts.registry_file import iso, parse_time

REASON = "suspended"  #: the verdict's reason while a suspension holds
#: What ``GET /v1/certifications`` shows of a suspension.
PUBLIC_FIELDS = (
    "since",
    "reason",
    "disagreement_rate",
    "checks",
    "disagreements",
    "threshold",
    "min_samples",
    "fields",
    "fallback_run_id",
    "by",
)


def active_suspension(
    suspensions: Sequence[Mapping[str, Any]],
    contract: str,
    primary: str,
    fallback: str,
    fallback_certificate: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """Return the pair's suspension still in force against ``fallback_certificate``."""
    if fallback_certificate is None:
        return None
    certified = parse_time(str(fallback_certificate["certified_at"]))
    for s in reversed(suspensions):  # the newest is last
        if (
            s.get("contract") == contract
            and s.get("primary") == primary
            and s.get("fallback") == fallback
            and certified <= parse_time(str(s["fallback_certified_at"]))
        ):
            return dict(s)
    return None


def detail(s: Mapping[str, Any]) -> str:
    """Say why a pair is suspended, in one sentence (field names, never values)."""
    rate = s.get("disagreement_rate")
    rate_text = f"{rate:.0%}" if isinstance(rate, int | float) else "?"
    threshold = s.get("threshold")
    limit = f", threshold {threshold:.0%}" if isinstance(threshold, int | float) else ""
    fields = s.get("fields") or {}
    on = f" (on {', '.join(sorted(fields))})" if fields else ""
    return (
        f"failover from {s.get('primary')} to {s.get('fallback')} on {s.get('contract')} "
        f"suspended since {s.get('since')}: shadow checks on production jobs disagreed in "
        f"{s.get('disagreements')} of {s.get('checks')} ({rate_text}{limit}){on}; "
        f"certify {s.get('fallback')} again to clear it"
    )


def public(s: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Return what the failover matrix shows of a suspension (None: not suspended)."""
    if s is None:
        return None
    return {field: s.get(field) for field in PUBLIC_FIELDS}


def clear_superseded(
    suspensions: list[dict[str, Any]],
    certificates: Sequence[Mapping[str, Any]],
    now: dt.datetime,
) -> None:
    """Mark cleared the suspensions a new passing certificate of their fallback supersedes."""
    for s in suspensions:
        if s.get("cleared_at"):
            continue
        held = parse_time(str(s["fallback_certified_at"]))
        for c in certificates:
            if (
                c.get("contract") == s.get("contract")
                and c.get("provider") == s.get("fallback")
                and c.get("verdict") == "pass"
                and c.get("mode") in ("live", "record")
                and parse_time(str(c["certified_at"])) > held
            ):
                s["cleared_at"] = iso(now)
                s["cleared_by"] = c.get("run_id") or "unknown"
                break
