"""``onejob certify`` and ``onejob can-i-failover``.

Exit codes of ``certify``: 0 every requested certification passed, 1 some failed,
2 an error (bad configuration, unknown provider or contract, cassette mismatch).
``can-i-failover`` exits 0 (allowed) or 1 (refused, with the reason), 2 on bad arguments.
The providers, routes and registry path come from onejob.toml (the gateway's settings
parse it) or, with ``--sim``, from ``certify.simulated``; the reports are written here.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from cli.arguments import Subcommands, tracing_of
from cli.certify_output import (
    failover_lines,
    progress_printer,
    recorded_providers,
    summary_table,
)
from cli.certify_production import (
    ProductionRefused,
    add_argument,
    check_arguments,
    production_draws,
)

if TYPE_CHECKING:
    from contracts.model import Contract
    from gateway.settings import Settings
    from providers.config import ProviderConfig

COMMANDS = {
    "certify": "run the contract suite against providers and write certificates",
    "can-i-failover": "say whether a fallback may replace a primary for a contract",
}
EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_ERROR = 2
DEFAULT_REPORT_DIR = "reports/out"
DEFAULT_REGISTRY = "reports/certifications.json"
#: Where a ``--sim`` run writes unless told otherwise: a scratch registry and report
#: folder of its own, so made-up providers never reach the registry running gateways
#: read, nor replace the live run's contracts.html (issue 47).
SIM_REPORT_DIR = "reports/out/sim"
SIM_REGISTRY = "reports/out/sim/certifications.json"
CASES_IN_FLIGHT = 8  # cases certified at once, by default
VALIDITY_DAYS = 30.0  # days a certificate stays valid, by default


def register(subcommands: Subcommands) -> None:
    """Add ``onejob certify`` and ``onejob can-i-failover``."""
    from certify.cassettes import CASSETTE_ROOT
    from certify.results import Mode
    from certify.runner import DEFAULT_REPEATS
    from certify.simulated import SIM_PROVIDERS

    cert = subcommands.add_parser(
        "certify",
        help=COMMANDS["certify"],
        description=(
            "Run each contract's cases and variants against each provider, write a "
            "certificate per provider and contract into the registry, and the reports. "
            "The result goes to stdout, progress to stderr. Exit 0: all passed; 1: one "
            "failed; 2: nothing could run."
        ),
    )
    cert.add_argument("--config", help="path of onejob.toml (default: $ONEJOB_CONFIG)")
    cert.add_argument("--provider", action="append", default=[], help="provider name (repeat)")
    cert.add_argument("--contract", action="append", default=[], help="name@version (repeat)")
    cert.add_argument(
        "--mode",
        choices=[m.value for m in Mode],
        default=Mode.LIVE.value,
        help="live: call the providers; record: and keep cassettes; replay: from the "
        "cassettes, offline (proves adapters, certifies nothing) (default %(default)s)",
    )
    cert.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help="k for pass^k: each case must pass k times (default %(default)s)",
    )
    cert.add_argument(
        "--report-dir",
        help=f"where the reports go (default {DEFAULT_REPORT_DIR}; with --sim {SIM_REPORT_DIR})",
    )
    cert.add_argument(
        "--registry",
        help=f"certificates file (default {DEFAULT_REGISTRY}; with --sim {SIM_REGISTRY})",
    )
    cert.add_argument(
        "--cassettes", default=str(CASSETTE_ROOT), help="cassette folder (default: the shipped one)"
    )
    cert.add_argument("--catalog", help="contract catalog folder (default: the shipped one)")
    cert.add_argument(
        "--concurrency",
        type=int,
        default=CASES_IN_FLIGHT,
        help="cases in flight at once (default %(default)s)",
    )
    cert.add_argument(
        "--validity-days",
        type=float,
        default=VALIDITY_DAYS,
        help="days a new certificate stays valid (default %(default)g)",
    )
    cert.add_argument(
        "--variants",
        type=int,
        metavar="N",
        help="variants drawn per contract (default: its [variants] per_run; 0: none)",
    )
    cert.add_argument(
        "--seed", help="draw the variants with this seed, not the run id (replays a run's draw)"
    )
    cert.add_argument(
        "--compare",
        metavar="PREVIOUS",
        help="list what changed since a previous contracts.json, or 'last' (the registry)",
    )
    cert.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="NAME=INPUT,OUTPUT",
        help="a provider's price in US dollars per million tokens (cost budgets)",
    )
    cert.add_argument(
        "--sim",
        action="store_true",
        help="start an in-process simulator and certify " + ", ".join(SIM_PROVIDERS),
    )
    cert.add_argument(
        "--due",
        action="store_true",
        help="certify again only what expires within --within-days (for cron; the worker's pass)",
    )
    cert.add_argument(
        "--within-days",
        type=float,
        metavar="D",
        help="with --due: days before expiry (default: [certification] within_days, 7)",
    )
    add_argument(cert)  # --production N
    cert.set_defaults(func=cmd_certify)

    can = subcommands.add_parser(
        "can-i-failover",
        help=COMMANDS["can-i-failover"],
        description=(
            "Say whether the registry allows FALLBACK to stand in for PRIMARY on CONTRACT, "
            "and why. Exit 0: yes; 1: no; 2: bad arguments."
        ),
    )
    can.add_argument("--contract", required=True, help="name@version")
    can.add_argument("--from", dest="primary", required=True, help="primary provider")
    can.add_argument("--to", dest="fallback", required=True, help="fallback provider")
    can.add_argument("--config", help="path of onejob.toml (default: $ONEJOB_CONFIG)")
    can.add_argument(
        "--registry",
        help=f"certificates file (default {DEFAULT_REGISTRY}; with --sim {SIM_REGISTRY})",
    )
    can.add_argument("--catalog", help="contract catalog folder (default: the shipped one)")
    can.add_argument("--sim", action="store_true", help="use the --sim provider configurations")
    can.set_defaults(func=cmd_can_i_failover)


def _configured(
    args: argparse.Namespace,
) -> tuple[dict[str, ProviderConfig], list[tuple[str, str]], str]:
    """Return providers, primary -> fallback pairs and the registry path from the settings."""
    if args.sim:
        from certify.simulated import sim_pairs, sim_providers

        return sim_providers(), sim_pairs(), args.registry or SIM_REGISTRY
    from gateway.settings import load_settings

    given = getattr(args, "settings", None)  # the worker's own settings (its scheduled pass)
    settings = given if given is not None else load_settings(args.config)
    pairs = [(route.primary, fb) for route in settings.routes.values() for fb in route.fallbacks]
    registry = args.registry or settings.certifications_path or DEFAULT_REGISTRY
    return dict(settings.providers), list(dict.fromkeys(pairs)), registry


def unknown_words(names: Sequence[str], known_as: str, known: Iterable[str]) -> str:
    """Say which names are unknown and which are known, without Python's quotes."""
    return f"{', '.join(names)} ({known_as} {', '.join(sorted(known)) or 'none'})"


def _pick_contracts(catalog: Mapping[str, Contract], names: Sequence[str]) -> list[Contract]:
    if not names:
        return [catalog[n] for n in catalog]
    unknown = [n for n in names if n not in catalog]
    if unknown:
        raise ValueError(f"unknown contract {unknown_words(unknown, 'the catalog has', catalog)}")
    return [catalog[n] for n in names]


def cmd_certify(args: argparse.Namespace) -> int:
    """Run the suite, write the registry and the reports; return the exit code."""
    return asyncio.run(certify(args))


async def certify(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run ``certify`` with parsed arguments (async, for tests).

    The result (the provider x contract table, the variants line, the changes, the last
    line with the registry and reports, the errors of the run) goes to ``out``, stdout:
    ``> out.txt`` or ``| less`` keeps it. Progress and the refusals before any case ran
    go to ``err``, stderr. A caller passing ``out`` alone gets both there.
    """
    import httpx

    from certify.compare import CompareError, compare, load_previous, snapshot_of_report
    from certify.preflight import preflight
    from certify.results import Mode
    from certify.runner import Runner
    from certify.simulated import (
        in_process_simulator,
        sim_origin,
        sim_prices,
        sim_providers,
        simulator_client,
    )
    from certify.usage import Price
    from contracts.loader import load_catalog
    from contracts.model import ContractError
    from contracts.registry import CertificationRegistry, RegistryError
    from reports.contracts_report import run_json, write_reports

    err = err or out or sys.stderr
    out = out or sys.stdout
    if getattr(args, "due", False):
        return await certify_due(args, out)
    mode = Mode(args.mode)
    if args.repeats < 1 or (args.variants is not None and args.variants < 0):
        print("error: --repeats must be >= 1 and --variants >= 0", file=err)
        return EXIT_ERROR
    try:
        check_arguments(args)
    except ProductionRefused as exc:
        print(f"error: {exc}", file=err)
        return EXIT_ERROR
    try:
        prices = sim_prices() if args.sim else {}
        prices.update(Price.parse(text) for text in args.price)
        catalog = load_catalog(Path(args.catalog) if args.catalog else None)
        contracts = _pick_contracts(catalog, args.contract)
        providers, pairs, registry_path = _configured(args)
        # Replay can only replay what was recorded: the providers with cassettes.
        recorded = recorded_providers(Path(args.cassettes)) if mode is Mode.REPLAY else set()
        if args.sim and mode is Mode.REPLAY and not args.provider:
            providers = {n: p for n, p in providers.items() if n in recorded}
        names = args.provider or list(providers)
        unknown = [n for n in names if n not in providers]
        if unknown:
            raise ValueError(f"unknown provider {unknown_words(unknown, 'configured:', providers)}")
    except (ContractError, KeyError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=err)
        return EXIT_ERROR
    chosen = [providers[n] for n in names]
    if mode is Mode.REPLAY:
        if unrecorded := [n for n in names if n not in recorded]:
            print(
                f"error: no cassettes for {', '.join(unrecorded)} in {args.cassettes}: record "
                "them first (--mode record, against the live provider), or replay "
                f"{', '.join(sorted(recorded)) or 'a recorded provider'}; no case was run",
                file=err,
            )
            return EXIT_ERROR
    try:  # production inputs are drawn before any case runs, and go to fallbacks only
        draws = await production_draws(args, contracts, names)
    except ProductionRefused as exc:
        print(f"error: {exc}", file=err)
        return EXIT_ERROR
    pairs = [(p, f) for p, f in pairs if p in names and f in names]
    registry = CertificationRegistry(registry_path)
    try:  # read before this run's certificates are recorded
        previous = load_previous(args.compare, registry.entries()) if args.compare else None
    except CompareError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_ERROR
    # Cassettes hold the catalog's cases only: with --sim, an in-process simulator answers
    # replay's variants (over ASGI, offline).
    variant_client = simulator_client() if args.sim and mode is Mode.REPLAY else None
    tracing = tracing_of(lambda: _settings_of(args))
    async with in_process_simulator(args.sim and mode is not Mode.REPLAY) as base_url:
        if base_url is not None:
            live = sim_providers(base_url)
            chosen = [live[p.name] for p in chosen]
        if mode is not Mode.REPLAY:
            async with httpx.AsyncClient() as probe:
                problems = await preflight(chosen, contracts[0], probe)
            if problems:
                for problem in problems:
                    print(f"error: {problem}", file=err)
                print("no case was run: fix the above first", file=err)
                return EXIT_ERROR
        runner = Runner(
            mode,
            repeats=args.repeats,
            concurrency=args.concurrency,
            cassette_root=Path(args.cassettes),
            recorded_from=sim_origin if args.sim else "live provider endpoints",
            progress=progress_printer(
                err,
                len(chosen) * len(contracts),
                len(chosen)
                * sum(len(c.cases) + (args.variants or c.variants_per_run) for c in contracts)
                + sum(len(d.samples) * len(d.fallbacks) for d in draws),
                widths=(
                    max((len(p.name) for p in chosen), default=8),
                    max((len(c.name) for c in contracts), default=8),
                ),
            ),
            # An answer carrying a provider id an earlier run already saw is a replay.
            earlier_ids=registry.provider_ids,
            variants=args.variants,
            seed=args.seed,
            variant_client=variant_client,
            prices=prices,
            production=draws,
            spans=tracing,
        )
        print(
            f"certifying {len(chosen)} provider(s) x {len(contracts)} contract(s), "
            f"mode {mode.value}, k={args.repeats}, run {runner.run_id}, "
            f"variants seeded {runner.seed}",
            file=err,
            flush=True,
        )
        try:
            run = await runner.run(contracts, chosen, pairs=pairs)
        finally:
            if variant_client is not None:
                await variant_client.aclose()
            if tracing is not None:  # its spans exported before the command exits
                tracing.shutdown()

    validity = dt.timedelta(days=args.validity_days)
    try:
        registry.record([u.certificate(validity) for u in run.units])
    except RegistryError as exc:
        print(f"error: cannot update the registry: {exc}", file=err)
        return EXIT_ERROR
    source = "the registry's newest certificates" if args.compare == "last" else args.compare
    comparison = (
        compare(previous, snapshot_of_report(run_json(run)), source)
        if previous is not None
        else None
    )
    report_dir = args.report_dir or (SIM_REPORT_DIR if args.sim else DEFAULT_REPORT_DIR)
    paths = write_reports(run, report_dir, comparison, registry=registry, validity=validity)
    print("\n" + summary_table(run), file=out)
    print("\n" + run.variants_line(), file=out)
    if (production := run.production_line()) is not None:
        print("\n" + production, file=out)
    if comparison is not None:
        print("\n" + "\n".join(comparison.lines()), file=out)
    print(
        f"\n{sum(u.passed for u in run.units)}/{len(run.units)} certification(s) passed in "
        f"{run.duration:.1f}s; registry {registry_path}; reports {paths['html'].parent}/",
        file=out,
    )
    if mode is Mode.REPLAY:
        print("note: replay mode proves adapters and parsers; it never certifies", file=out)
    if run.errors:
        for problem in run.errors[:10]:
            print(f"error: {problem}", file=out)
        return EXIT_ERROR
    return EXIT_PASS if run.passed else EXIT_FAIL


async def certify_due(args: argparse.Namespace, out: TextIO, now: dt.datetime | None = None) -> int:
    """Certify again, provider by provider, the units whose certificates expire soon."""
    from certify.due import due_units
    from contracts.loader import load_catalog
    from contracts.registry import CertificationRegistry

    try:
        catalog = load_catalog(Path(args.catalog) if args.catalog else None)
        providers, pairs, registry_path = _configured(args)
        within = args.within_days
        if within is None:
            within = _settings_of(args).certification.within_days if not args.sim else 7.0
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=out)
        return EXIT_ERROR
    registry = CertificationRegistry(registry_path)
    due, skipped = due_units(
        registry, catalog, providers, pairs, now=now or dt.datetime.now(dt.UTC), within_days=within
    )
    for note in skipped:
        print(f"not due: {note}", file=out)
    if not due:
        print(f"nothing to certify again: no certificate expires within {within:g} days", file=out)
        return EXIT_PASS
    print("due:\n" + "\n".join(f"  {d.line()}" for d in due), file=out, flush=True)
    code = EXIT_PASS
    for provider in dict.fromkeys(d.provider for d in due):
        contracts = [d.contract for d in due if d.provider == provider]
        one = argparse.Namespace(**{**vars(args), "due": False})
        one.provider, one.contract = [provider], contracts
        code = max(code, await certify(one, out))
    return code


def _settings_of(args: argparse.Namespace) -> Settings:
    given = getattr(args, "settings", None)
    if given is not None:
        return given  # type: ignore[no-any-return]
    from gateway.settings import load_settings

    return load_settings(args.config)


def cmd_can_i_failover(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print whether the failover is allowed and why; 0 allowed, 1 refused, 2 bad arguments."""
    from contracts.loader import load_catalog
    from contracts.model import ContractError
    from contracts.registry import CertificationRegistry

    out = out or sys.stdout
    try:
        catalog = load_catalog(Path(args.catalog) if args.catalog else None)
        providers, _, registry_path = _configured(args)
        unknown = []
        if args.contract not in catalog:
            unknown.append(f"contract {unknown_words([args.contract], 'the catalog has', catalog)}")
        missing = [n for n in dict.fromkeys([args.primary, args.fallback]) if n not in providers]
        if missing:
            unknown.append(f"provider {unknown_words(missing, 'configured:', providers)}")
        if unknown:
            print(f"error: unknown {'; unknown '.join(unknown)}", file=out)
            return EXIT_ERROR
        contract = catalog[args.contract]
        primary, fallback = providers[args.primary], providers[args.fallback]
    except (ContractError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=out)
        return EXIT_ERROR
    registry = CertificationRegistry(registry_path)
    verdict = registry.can_failover(contract, primary, fallback)
    word = "yes" if verdict.allowed else "no"
    print(f"{word}: {verdict}", file=out)
    for line in failover_lines(contract, registry, primary.name, fallback.name):
        print(line, file=out)
    settings = None if args.sim else _settings_of(args)
    if settings is not None and contract.hedgeable:
        if settings.shadow.sample_rate <= 0:
            print("shadow checks: off ([shadow] sample_rate = 0)", file=out)
        else:
            pair = (contract.name, primary.name, fallback.name)
            print(asyncio.run(_shadow_line(settings, registry, *pair)), file=out)
    return EXIT_PASS if verdict.allowed else EXIT_FAIL


async def _shadow_line(
    settings: Settings, registry: Any, contract: str, primary: str, fallback: str
) -> str:
    """Say what the shadow checks measured for the pair since the fallback's certificate."""
    from gateway.bootstrap import open_store_for
    from gateway.shadow import certified_since

    since = certified_since(registry, contract, fallback)
    try:
        store = await open_store_for(settings)
        try:
            tally = await store.shadow_tally(
                contract, primary, fallback, since=since, window=settings.shadow.window
            )
        finally:
            await store.close()
    except Exception as exc:  # the verdict above stands; the rate is extra
        return f"shadow checks: not read ({type(exc).__name__}: {str(exc)[:120]})"
    rate = "no judged check yet" if tally.rate is None else f"{tally.rate:.0%} disagreed"
    fields = f", on {', '.join(sorted(tally.fields))}" if tally.fields else ""
    return (
        f"shadow checks since {since.isoformat().replace('+00:00', 'Z')}: {tally.checks} "
        f"judged, {tally.disagreements} disagreed ({rate}{fields}), {tally.errors} without an "
        f"answer; suspended at {settings.shadow.threshold:.0%} with {settings.shadow.min_samples} "
        "judged"
    )
