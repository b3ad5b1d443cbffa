"""Stand-in certificates for runs where ``onejob certify`` is not available.

The real path (``onejob certify --mode live``) is always tried first; this writes passing
certificates for the simulated providers only when the command does not exist, and every
scenario that uses them says so in its notes.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from contracts.loader import CATALOG_ROOT, load_contract
from contracts.registry import CertificationRegistry, adapter_version_of
from scenarios.setup import SIM_ANTHROPIC, SIM_OPENAI

STAND_IN_VALIDITY = dt.timedelta(hours=1)
CERTIFY_TIMEOUT = 120.0  # seconds ``onejob certify`` may take
#: The contract the scenarios send (hedgeable, so the hedge scenario can use it too).
SCENARIO_CONTRACT = "ticket-triage@1"
SIM_PROVIDERS = ((SIM_OPENAI, "openai", "sim-gpt"), (SIM_ANTHROPIC, "anthropic", "sim-claude"))
STAND_IN_NOTE = (
    "`onejob certify` is not available in this build; the harness wrote stand-in passing "
    "certificates for the simulated providers"
)


def write_stand_in_registry(path: Path) -> Path:
    """Write passing live certificates for every loadable contract and both sim providers."""
    now = dt.datetime.now(dt.UTC)
    entries = []
    for folder in sorted(p for p in CATALOG_ROOT.iterdir() if p.is_dir()):
        try:
            contract = load_contract(folder)
        except Exception:  # a contract being edited right now is simply not certified
            continue
        for provider, protocol, model in SIM_PROVIDERS:
            entries.append(
                {
                    "contract": contract.name,
                    "contract_fingerprint": contract.fingerprint,
                    "provider": provider,
                    "protocol": protocol,
                    "model": model,
                    "adapter_version": adapter_version_of(protocol),
                    "mode": "live",
                    "verdict": "pass",
                    "certified_at": now.isoformat().replace("+00:00", "Z"),
                    "expires_at": (now + STAND_IN_VALIDITY).isoformat().replace("+00:00", "Z"),
                    "repeats": 0,
                    "cases": 0,
                    "pass_rates": {},
                    "failures": [],
                    # Agreement evidence that compares equal for every case: a stand-in says so.
                    "evidence": {case.id: {"agree": {}} for case in contract.cases},
                    "stand_in": True,
                }
            )
    CertificationRegistry(path).record(entries)
    return path


def certify_args(config: Path, registry: Path, report_dir: Path) -> list[str]:
    """Return the ``onejob certify`` arguments that certify both simulated providers, live."""
    return [
        "certify",
        "--config",
        str(config),
        "--mode",
        "live",
        "--registry",
        str(registry),
        "--report-dir",
        str(report_dir),
        "--contract",
        SCENARIO_CONTRACT,
        "--provider",
        SIM_OPENAI,
        "--provider",
        SIM_ANTHROPIC,
        "--repeats",
        "1",
    ]
