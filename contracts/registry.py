"""The certification registry (``onejob.certifications/1``) and the failover verdict (DESIGN §6).

File format::

    {
      "format": "onejob.certifications/1",
      "updated_at": "2026-03-01T10:00:00Z",
      "certificates": [
        {
          "contract": "ticket-triage@1", "contract_fingerprint": "<sha256 hex>",
          "provider": "faithful", "protocol": "openai", "model": "sim-gpt",
          "adapter_version": "openai/2", "mode": "live",
          "verdict": "pass" | "fail", "certified_at": "...Z", "expires_at": "...Z",
          "repeats": 3, "cases": 17,
          "pass_rates": {"render": 1.0, "transport": 1.0, "schema": 1.0, "model": 1.0,
                         "semantics": 1.0, "stability": 1.0},
          "failures": [{"case": "...", "layer": "schema", "reason": "...", "excerpt": "..."}],
          "run_id": "cert-...", "reported_models": ["sim-gpt"],
          "omitted_parameters": ["temperature"], "stability_basis": "pass^k alone",
          "evidence": {"<case>": {"agree": {...} | null, "answers": [...],
                                  "provider_ids": [...], "models": [...]}},
          "variants": {"seed": "cert-...", "drawn": 8, "passed": 8, "calls": 24, ...},
          "variant_evidence": {"<case>~v3": {"case": "<case>", "relations": [...],
                                             "agree": ..., "answers": ..., ...}},
          "usage": {"calls": 75, "latency_ms": {"p50": ..., "p95": ...}, ...},
          "budget": {"declared": {...}, "passed": true, "reason": ""}
        }
      ]
    }

One entry per (contract, fingerprint, provider, model, adapter version, mode); writing an
entry with the same key replaces it. Only ``live`` and ``record`` certificates count.
``omitted_parameters`` names what the adapter left out because the model refuses it; with
``temperature`` among them, ``stability_basis`` is ``pass^k alone`` (else ``temperature 0
and pass^k``) and an allowed failover to that provider says so.
``run_id``, ``reported_models``, ``evidence`` and those two extend the format compatibly: a
certificate without evidence is read, but allows no failover (``no agreement evidence
with P``), since agreement is computed from the two certificates' evidence
(``contracts.evidence``). ``variants``, ``variant_evidence``, ``usage`` and ``budget``
(issue 38) extend it the same way: the variants of two certificates drawn with one seed are
compared too, and a certificate that failed them (or its budget) failed.
``suspensions`` (issue 38, ``contracts.suspensions``) lists the pairs the gateway's shadow
checks suspended; a suspended pair is refused until the fallback is certified again. The
file's reading and writing (under a lock: the gateway writes suspensions while ``onejob
certify`` writes certificates) is ``contracts.registry_file``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from contracts import suspensions as susp
from contracts.evidence import compare_evidence
from contracts.model import Contract
from contracts.registry_file import (
    FORMAT,
    KEY_FIELDS,
    RegistryError,
    locked,
    read_document,
    write_document,
)
from contracts.registry_file import iso as _iso
from contracts.registry_file import parse_time as _parse_time
from providers.config import ProviderConfig

__all__ = ["FORMAT", "KEY_FIELDS", "CertificationRegistry", "RegistryError", "Verdict"]

DEFAULT_VALIDITY = dt.timedelta(days=30)
CERTIFYING_MODES = frozenset({"live", "record"})


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a failover is allowed, and why."""

    allowed: bool
    #: ``certified``, ``missing certificate for P on C``, ``failed``, ``expired``,
    #: ``fingerprint changed``, ``model changed``, ``adapter changed``, ``registry unreadable``,
    #: ``no agreement evidence with P``, ``disagrees with primary``, ``suspended`` (shadow
    #: checks on production jobs disagreed: ``contracts.suspensions``).
    reason: str
    detail: str = ""  #: one human sentence naming the provider and the certificate

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason


def adapter_version_of(protocol: str) -> str:
    """Return the current adapter version of a wire protocol (``providers.factory``)."""
    from providers.factory import adapter_version  # imported late: providers build on us

    return str(adapter_version(protocol))


class CertificationRegistry:
    """Certificates in a JSON file; re-read when the file's mtime or size changes."""

    def __init__(
        self, path: str | Path, *, adapter_version: Callable[[str], str] | None = None
    ) -> None:
        self.path = Path(path)
        self._adapter_version = adapter_version or adapter_version_of
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._entries: list[dict[str, Any]] = []
        self._suspensions: list[dict[str, Any]] = []
        #: Why the file could not be read (then every verdict refuses), or None.
        self.error: str | None = None

    def entries(self) -> list[dict[str, Any]]:
        """Return every certificate (reloading the file if it changed)."""
        self._refresh()
        return list(self._entries)

    def suspensions(self) -> list[dict[str, Any]]:
        """Return every suspension, cleared ones too, oldest first (``contracts.suspensions``)."""
        self._refresh()
        return [dict(s) for s in self._suspensions]

    def _refresh(self) -> None:
        with self._lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                self._stamp, self._entries, self._suspensions, self.error = None, [], [], None
                return
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            try:
                self._entries, self._suspensions = read_document(self.path)
                self.error = None
            except RegistryError as exc:
                # Fail closed: an unreadable registry certifies nothing.
                self._entries, self._suspensions, self.error = [], [], str(exc)
            self._stamp = stamp

    def record(self, certificates: Sequence[Mapping[str, Any]]) -> None:
        """Add certificates, replacing entries with the same key, and write atomically.

        A passing certificate newer than the one a suspension was measured on clears it.
        """
        with self._lock, locked(self.path):
            existing, suspensions = read_document(self.path)
            new_keys = {_key(c) for c in certificates}
            kept = [e for e in existing if _key(e) not in new_keys]
            entries = kept + [dict(c) for c in certificates]
            entries.sort(key=lambda e: (e["contract"], e["provider"], e["certified_at"]))
            susp.clear_superseded(suspensions, certificates, dt.datetime.now(dt.UTC))
            write_document(self.path, entries, suspensions)
            self._stamp = None  # force a re-read on next access

    def suspend(self, suspension: Mapping[str, Any]) -> bool:
        """Record a pair's suspension; False when one already holds for that certificate."""
        with self._lock, locked(self.path):
            entries, suspensions = read_document(self.path)
            held = susp.active_suspension(
                suspensions,
                str(suspension["contract"]),
                str(suspension["primary"]),
                str(suspension["fallback"]),
                {"certified_at": suspension["fallback_certified_at"]},
            )
            if held is not None:
                return False
            suspensions.append(dict(suspension))
            write_document(self.path, entries, suspensions)
            self._stamp = None
            return True

    def suspension(self, contract: str, primary: str, fallback: str) -> dict[str, Any] | None:
        """Return the pair's suspension in force (against the fallback's newest certificate)."""
        return susp.active_suspension(
            self.suspensions(),
            contract,
            primary,
            fallback,
            self.latest_certificate(contract, fallback),
        )

    def latest_certificate(self, contract: str, provider: str) -> dict[str, Any] | None:
        """Return the newest live/record certificate of ``provider`` for ``contract``, if any.

        This is the certificate an operator wants to see next to a verdict; the verdict
        itself (``can_failover``) still decides whether it counts.
        """
        mine = [
            e
            for e in self.entries()
            if e.get("contract") == contract
            and e.get("provider") == provider
            and e.get("mode") in CERTIFYING_MODES
        ]
        return dict(max(mine, key=lambda e: e["certified_at"])) if mine else None

    def certificate_verdict(
        self,
        contract: Contract,
        provider: ProviderConfig,
        *,
        now: dt.datetime | None = None,
        adapter_version: str | None = None,
    ) -> Verdict:
        """Say whether ``provider`` holds a valid passing certificate for ``contract``."""
        return self._certificate(contract, provider, now, adapter_version)[0]

    def _certificate(
        self,
        contract: Contract,
        provider: ProviderConfig,
        now: dt.datetime | None,
        adapter_version: str | None,
    ) -> tuple[Verdict, dict[str, Any] | None]:
        now = now or dt.datetime.now(dt.UTC)
        version = adapter_version or self._adapter_version(provider.protocol)
        who = f"{provider.name} on {contract.name}"
        entries = self.entries()
        if self.error is not None:
            return Verdict(False, "registry unreadable", self.error), None
        mine = [
            e
            for e in entries
            if e.get("contract") == contract.name
            and e.get("provider") == provider.name
            and e.get("mode") in CERTIFYING_MODES
        ]
        if not mine:
            return Verdict(
                False, f"missing certificate for {who}", "no live/record certificate"
            ), None
        latest = max(mine, key=lambda e: e["certified_at"])
        current = [e for e in mine if e.get("contract_fingerprint") == contract.fingerprint]
        if not current:
            return (
                Verdict(
                    False,
                    "fingerprint changed",
                    f"{who}: certified for contract fingerprint "
                    f"{str(latest.get('contract_fingerprint'))[:12]}, "
                    f"the contract is now {contract.fingerprint[:12]}",
                ),
                None,
            )
        same_model = [e for e in current if e.get("model") == provider.model]
        if not same_model:
            latest = max(current, key=lambda e: e["certified_at"])
            return (
                Verdict(
                    False,
                    "model changed",
                    f"{who}: certified with model {latest.get('model')!r}, "
                    f"configured model is {provider.model!r}",
                ),
                None,
            )
        same_adapter = [e for e in same_model if e.get("adapter_version") == version]
        if not same_adapter:
            latest = max(same_model, key=lambda e: e["certified_at"])
            return (
                Verdict(
                    False,
                    "adapter changed",
                    f"{who}: certified with adapter {latest.get('adapter_version')!r}, "
                    f"current adapter is {version!r}",
                ),
                None,
            )
        latest = max(same_adapter, key=lambda e: e["certified_at"])
        if latest.get("verdict") != "pass":
            failures = latest.get("failures") or []
            first = failures[0] if failures else {}
            why = (
                f"{first.get('layer')} layer, case {first.get('case')}: {first.get('reason')}"
                if first
                else "no failure recorded"
            )
            return Verdict(False, "failed", f"{who} failed certification ({why})"), latest
        expires = _parse_time(latest["expires_at"])
        if expires <= now:
            return Verdict(
                False, "expired", f"{who}: certificate expired at {_iso(expires)}"
            ), latest
        return Verdict(True, "certified", f"{who}: certified until {_iso(expires)}"), latest

    def can_failover(
        self,
        contract: Contract,
        primary: ProviderConfig,
        fallback: ProviderConfig,
        *,
        now: dt.datetime | None = None,
    ) -> Verdict:
        """Say whether ``fallback`` may replace ``primary``: both certified, evidence agrees."""
        verdict, f_entry = self._certificate(contract, fallback, now, None)
        p_verdict, p_entry = self._certificate(contract, primary, now, None)
        if not verdict.allowed or not p_verdict.allowed:
            return _refusal(contract.name, verdict, p_verdict)
        held = susp.active_suspension(
            self._suspensions, contract.name, primary.name, fallback.name, f_entry
        )
        if held is not None:
            return Verdict(False, susp.REASON, susp.detail(held))
        # Agreement comes from the two certificates in force, whatever runs made them.
        agreement = compare_evidence(contract, p_entry, f_entry)
        if not agreement.computable:
            lacking = [
                f"{e['provider']} (run {e.get('run_id') or 'unknown'})"
                for e in (p_entry, f_entry)
                if e is not None and not _has_evidence(e, agreement.missing)
            ]
            return Verdict(
                False,
                f"no agreement evidence with {primary.name}",
                f"{fallback.name} cannot be compared with {primary.name} on {contract.name}: "
                f"no must-agree values stored for {len(agreement.missing)} case(s) "
                f"(first: {agreement.missing[0]}) in the certificate of "
                f"{' and '.join(lacking) or 'either'}; certify both for the current "
                "fingerprint with this version of onejob",
            )
        if not agreement.agrees:
            first = agreement.failures[0]
            return Verdict(
                False,
                "disagrees with primary",
                f"{fallback.name} disagrees with {primary.name} on {contract.name}'s must-agree "
                f"fields in {len(agreement.failures)} of {agreement.compared} case(s) "
                f"(case {first['case']}: {first['reason']})",
            )
        shared = (
            f" and {agreement.variants_compared} shared variants"
            if agreement.variants_compared
            else ""
        )
        return Verdict(
            True,
            "certified",
            f"{primary.name} and {fallback.name} both hold valid certificates for {contract.name} "
            f"and agree on its {agreement.compared} cases{shared} ({_runs(p_entry, f_entry)})"
            f"{_stability_caveat(p_entry, f_entry)}",
        )

    def provider_ids(self, provider: str, contract: str) -> dict[str, str]:
        """Return ``{provider id: run id}`` over every stored certificate of one unit."""
        out: dict[str, str] = {}
        for e in self.entries():
            if e.get("provider") != provider or e.get("contract") != contract:
                continue
            for key in ("evidence", "variant_evidence"):
                evidence = e.get(key)
                if not isinstance(evidence, dict):
                    continue
                for case in evidence.values():
                    for pid in (case or {}).get("provider_ids") or ():
                        if isinstance(pid, str):
                            out[pid] = str(e.get("run_id") or "unknown")
        return out

    def matrix(
        self,
        catalog: Mapping[str, Contract],
        providers: Mapping[str, ProviderConfig],
        routes: Mapping[str, Any],
        *,
        now: dt.datetime | None = None,
    ) -> list[dict[str, Any]]:
        """Return one row per contract x configured fallback: the effective failover matrix."""
        rows: list[dict[str, Any]] = []
        for name in sorted(catalog):
            route = routes.get(name) or routes.get("*")
            if route is None:
                continue
            primary_name = _field(route, "primary")
            for fb in _field(route, "fallbacks") or ():
                primary, fallback = providers.get(primary_name), providers.get(fb)
                if primary is None or fallback is None:
                    missing = primary_name if primary is None else fb
                    verdict = Verdict(False, "unknown provider", f"{missing} is not configured")
                else:
                    verdict = self.can_failover(catalog[name], primary, fallback, now=now)
                rows.append(
                    {
                        "contract": name,
                        "primary": primary_name,
                        "fallback": fb,
                        "allowed": verdict.allowed,
                        "reason": verdict.reason,
                        "detail": verdict.detail,
                    }
                )
        return rows


def _stability_caveat(*entries: Mapping[str, Any] | None) -> str:
    """Return a verdict clause naming the certificates whose stability rests on pass^k alone."""
    alone = [
        str(e["provider"])
        for e in entries
        if e is not None and "temperature" in (e.get("omitted_parameters") or ())
    ]
    if not alone:
        return ""
    return (
        f"; the stability of {' and '.join(alone)} rests on pass^k alone (the model refuses "
        "temperature, so the contract's was not sent)"
    )


def _refusal(contract: str, fallback: Verdict, primary: Verdict) -> Verdict:
    """Return the refusal when a certificate is not valid, naming both when both lack one."""
    if fallback.allowed:
        return primary
    if primary.allowed:
        return fallback
    lacking = "missing certificate for "
    if fallback.reason.startswith(lacking) and primary.reason.startswith(lacking):
        f_name = fallback.reason[len(lacking) :].rsplit(" on ", 1)[0]
        p_name = primary.reason[len(lacking) :].rsplit(" on ", 1)[0]
        return Verdict(
            False,
            f"{lacking}{f_name} and {p_name} on {contract}",
            "neither provider holds a live/record certificate",
        )
    if (fallback.reason, fallback.detail) == (primary.reason, primary.detail):
        return fallback  # the registry's own problem (unreadable), said once
    return Verdict(False, fallback.reason, f"{fallback.detail}; and {primary}")


def _runs(*entries: Mapping[str, Any] | None) -> str:
    """Name the runs of the certificates in force once each (one run often certified both)."""
    runs = list(dict.fromkeys(run_of(e) for e in entries))
    return f"run {runs[0]}" if len(runs) == 1 else f"runs {' and '.join(runs)}"


def run_of(entry: Mapping[str, Any] | None) -> str:
    """Return the run id a certificate names (``unknown`` for certificates before run ids)."""
    return str((entry or {}).get("run_id") or "unknown")


def _has_evidence(entry: Mapping[str, Any], cases: Sequence[str]) -> bool:
    evidence = entry.get("evidence")
    if not isinstance(evidence, Mapping):
        return False
    return all(isinstance((evidence.get(c) or {}).get("agree"), dict) for c in cases)


def _field(route: Any, name: str) -> Any:
    return route.get(name) if isinstance(route, Mapping) else getattr(route, name)


def _key(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(entry.get(f) for f in KEY_FIELDS)
