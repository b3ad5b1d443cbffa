"""Jobs against a rate-limited upstream, onejob beside LiteLLM's proxy (issue 43).

``python -m bench.capacity [--jobs 300] [--clients 16] [--rps 10] [--burst 5]
[--databases sqlite,postgresql] [--no-litellm] [--cpu-databases postgresql,sqlite]
[--cpu-rounds 5] [--cpu-duration 6] [--out reports/out/capacity.json]``

In one run, on loopback, with every process started here and stopped by its PID:

1. the product's simulator (``onejob sim serve``), whose provider ``sim-openai`` gets a
   token bucket of ``--rps`` calls a second, ``--burst`` at most (``POST /_sim/limits``:
   a call without a token is OpenAI's 429 with ``retry-after``, ``retry-after-ms`` and
   ``x-ratelimit-*``, not run);
2. per database, onejob's gateway on its defaults (workers, dispatcher, ``[capacity]``,
   ``[admission]`` as shipped; no ``[providers.sim-openai.limits]``), one provider, no
   fallback: ``--jobs`` jobs from ``--clients`` concurrent clients (``POST /v1/jobs`` with
   ``Prefer: wait=60``, then ``GET`` with ``Prefer: wait`` until settled), ``GET
   /v1/providers`` read every 0.5 s meanwhile;
3. LiteLLM's proxy (``bench/lib/peers.py``'s virtualenv and set-up, its retries and
   timeout left at LiteLLM's defaults: the Router's ``num_retries`` is then the OpenAI
   SDK's 2) in front of the same limited provider: the same count of Chat Completions
   requests from as many clients, each sent once;
4. with ``--cpu-databases``, what pacing costs a job on the fast path: two gateways of
   this checkout side by side, driven with wrk at once (``bench.duel``'s rounds, sync
   jobs), against the zero-latency upstream: one with no limit, one with
   ``[providers.upstream.limits] requests_per_minute`` far above what it can send
   (``NEVER_BINDING_RPM``); the median of the rounds' ratios, limited over none.

For each system it reports the jobs that did not succeed (and why), the share of the
provider's calls answered 429, the time until every job was settled, and the call log
per second. The ideal is ``(jobs - burst) / rps`` seconds (29.5 s for 300 jobs at 10/s,
burst 5); issue 43's targets for onejob: 0 jobs failed, at most 25 % of the calls 429,
every job settled within 2x the ideal. It is a measurement, not a test; it writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from bench.duel import FIGURES, one_round
from bench.lib import limited
from bench.lib.children import ROOT, child, free_port, ready, say
from bench.lib.databases import database, prepare
from bench.lib.gateways import gateway, gateway_settings, start_upstream
from bench.lib.loads import CONTRACT, load_script
from bench.lib.measure import tree_cpu_s
from bench.lib.peers import PeerUnavailable, litellm_config, litellm_proxy
from bench.lib.report import commit, interpreter, write_report
from bench.lib.rounds import figure_lines, new_over_base, odd_count
from gateway.settings import Settings
from providers.simulator.control_client import SimulatorControl

PROVIDER = "sim-openai"
#: Jobs (or requests) sent before the limit is set, so the first measured one pays no
#: start-up (connections, compiled statements); the call log is cleared after them.
WARMUP = 5
#: A configured limit no gateway here reaches (100,000 calls a second): its cost is the
#: pacing's own, never a wait.
NEVER_BINDING_RPM = 6_000_000
#: Issue 43's targets for onejob.
TARGET_FAILED = 0
TARGET_SHARE_429 = 0.25
TARGET_IDEAL_RATIO = 2.0


@contextlib.asynccontextmanager
async def simulator(work: Path) -> AsyncIterator[tuple[str, int]]:
    """Run ``onejob sim serve`` for the block; yield its base URL and PID."""
    port = free_port()
    log = work / "simulator.log"
    cmd = ["-c", "from cli.main import main; raise SystemExit(main())", "sim", "serve"]
    with child([*cmd, "--port", str(port), "--log-level", "warning"], log) as proc:
        base = f"http://127.0.0.1:{port}"
        await ready(f"{base}/_sim/health", proc, log)
        yield base, proc.pid


def onejob_settings(url: str, port: int, sim: str, work: Path) -> tuple[Path, int]:
    """Write a gateway's settings: the defaults, one provider (the simulator's
    ``sim-openai``, as the built-in configuration has it) and no fallback. Return the
    file and the worker count the defaults size."""
    settings = Settings.model_validate(
        {
            "database_url": url,
            "port": port,
            "instance_id": f"capacity-{os.getpid()}-{port}",
            "log_level": "WARNING",
            "certifications_path": str(work / "certifications.json"),
            "providers": {
                PROVIDER: {
                    "protocol": "openai",
                    "base_url": f"{sim}/p/{PROVIDER}/v1",
                    "model": "sim-gpt",
                    "timeout": 10.0,
                }
            },
            "routes": {"*": {"primary": PROVIDER}},
        }
    )
    path = work / f"settings-{port}.json"
    path.write_text(settings.model_dump_json(exclude_defaults=True), encoding="utf-8")
    return path, settings.workers


async def limit_upstream(control: SimulatorControl, args: argparse.Namespace) -> None:
    """Clear the simulator (call log, limits) and give the provider its token bucket."""
    await control.reset()
    await control.limit(PROVIDER, args.rps, args.burst)


async def onejob_run(
    kind: str, sim: str, control: SimulatorControl, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    """Start a gateway on a fresh database of ``kind``; run the jobs; return the figures."""
    with database(kind, work) as url:
        key = await prepare(url)
        port = free_port()
        settings, workers = onejob_settings(url, port, sim, work)
        async with gateway(settings, port, work) as pid:
            base = f"http://127.0.0.1:{port}"
            limits = httpx.Limits(max_connections=args.clients + 8)
            timeout = httpx.Timeout(limited.WAIT_S + 30.0)
            async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
                cases = limited.inputs()
                tag = f"cap-{kind}-{uuid.uuid4().hex[:8]}"
                await control.reset()
                warm = limited.Run(time.time(), time.monotonic())
                for n in range(WARMUP):
                    await limited.onejob_job(
                        client, base, key, f"warm-{tag}", n, cases[n], warm, 60.0
                    )
                await limit_upstream(control, args)
                say(
                    f"onejob on {kind} ({workers} worker(s)):"
                    f" {args.jobs} jobs, {args.clients} clients"
                )
                cpu = tree_cpu_s(pid)
                run = limited.Run(time.time(), time.monotonic())
                stop = asyncio.Event()
                sampler = asyncio.create_task(
                    limited.sample_providers(client, base, key, PROVIDER, run, stop)
                )

                async def one(n: int) -> limited.Outcome:
                    job_input = cases[n % len(cases)]
                    return await limited.onejob_job(
                        client, base, key, tag, n, job_input, run, args.bound
                    )

                try:
                    await limited.clients_loop(args.jobs, args.clients, one, run)
                finally:
                    stop.set()
                    samples = await sampler
                cpu = tree_cpu_s(pid) - cpu
                calls = await control.calls(PROVIDER)
    return {
        "system": f"onejob-{kind}",
        "database": kind,
        "workers": workers,
        **limited.outcomes_summary(run, args.jobs),
        "upstream": limited.call_log(calls, run.started),
        "pace": limited.pace_summary(samples),
        "providers_samples": samples,
        "gateway_cpu_ms_per_job": round(cpu * 1000 / args.jobs, 3),
    }


def litellm_defaults(upstream: str) -> dict[str, object]:
    """``bench.compare``'s LiteLLM config without its ``num_retries: 0`` and
    ``request_timeout``: LiteLLM's own retries and timeout, as shipped."""
    config = litellm_config(upstream)
    settings = dict(config["litellm_settings"])  # type: ignore[call-overload]
    settings.pop("num_retries", None)
    settings.pop("request_timeout", None)
    return {**config, "litellm_settings": settings}


async def litellm_run(
    sim: str, control: SimulatorControl, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    """Run LiteLLM's proxy in front of the limited provider; send the requests; return
    the figures."""
    upstream = f"{sim}/p/{PROVIDER}"
    async with litellm_proxy(upstream, work, litellm_defaults(upstream)) as (base, pid):
        limits = httpx.Limits(max_connections=args.clients + 8)
        async with httpx.AsyncClient(timeout=httpx.Timeout(args.bound), limits=limits) as client:
            cases = limited.inputs()
            await control.reset()
            warm = limited.Run(time.time(), time.monotonic())
            for n in range(WARMUP):
                await limited.litellm_request(client, base, n, cases[n], warm)
            await limit_upstream(control, args)
            say(f"LiteLLM proxy: {args.jobs} requests, {args.clients} clients")
            cpu = tree_cpu_s(pid)
            run = limited.Run(time.time(), time.monotonic())

            async def one(n: int) -> limited.Outcome:
                return await limited.litellm_request(client, base, n, cases[n % len(cases)], run)

            await limited.clients_loop(args.jobs, args.clients, one, run)
            cpu = tree_cpu_s(pid) - cpu
            calls = await control.calls(PROVIDER)
    return {
        "system": "litellm",
        "config": litellm_defaults(upstream)["litellm_settings"],
        **limited.outcomes_summary(run, args.jobs),
        "upstream": limited.call_log(calls, run.started),
        "proxy_cpu_ms_per_job": round(cpu * 1000 / args.jobs, 3),
    }


async def pacing_cost(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """Two gateways of this checkout at once, sync jobs against the zero-latency upstream:
    ``base`` with no limit, ``new`` with a limit it never reaches; return the rounds and
    the median of their ratios."""
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="capacity-cpu-")))
        upstream = await start_upstream(stack, work)
        async with contextlib.AsyncExitStack() as sides_stack:
            sides = {}
            for side, limits in (
                ("base", None),
                ("new", {"requests_per_minute": NEVER_BINDING_RPM}),
            ):
                side_work = work / side
                side_work.mkdir()
                url = stack.enter_context(database(kind, side_work))
                key = await prepare(url)
                port = free_port()
                settings = gateway_settings(
                    url,
                    port,
                    upstream,
                    dispatcher=True,
                    runners=16,
                    work=side_work,
                    workers=1,
                    limits=limits,
                )
                pid = await sides_stack.enter_async_context(gateway(settings, port, side_work))
                base = f"http://127.0.0.1:{port}"
                script = await load_script("sync", base, key, url, side_work)
                sides[side] = (pid, base, script, url)
            ns = argparse.Namespace(connections=16, duration=args.cpu_duration)
            one_round(sides, argparse.Namespace(connections=16, duration=2.0), -1)  # warm
            rounds = []
            for n in range(args.cpu_rounds):
                figures = one_round(sides, ns, n)
                rounds.append(figures)
                say(
                    f"[pacing cost, {kind}] round {n + 1}/{args.cpu_rounds}: "
                    + "  ".join(
                        f"{'limit' if side == 'new' else 'none'} {f['rps']} jobs/s,"
                        f" CPU {f['cpu_ms']} ms"
                        for side, f in figures.items()
                    )
                )
    return {
        "database": kind,
        "mode": "sync",
        "connections": 16,
        "duration_s": args.cpu_duration,
        "limit_rpm": NEVER_BINDING_RPM,
        "rounds": rounds,
        "ratios": new_over_base(rounds, FIGURES),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every system against the same limited upstream, then the pacing's cost."""
    systems: list[dict[str, Any]] = []
    load_1m = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="capacity-") as tmp:
        work = Path(tmp)
        async with simulator(work) as (sim, _pid), httpx.AsyncClient(timeout=30) as http:
            control = SimulatorControl(http, sim)
            for kind in args.databases:
                kind_work = work / kind
                kind_work.mkdir()
                systems.append(await onejob_run(kind, sim, control, args, kind_work))
                say(one_line(systems[-1], ideal_s(args)))
            if args.litellm:
                try:
                    systems.append(await litellm_run(sim, control, args, work))
                    say(one_line(systems[-1], ideal_s(args)))
                except (PeerUnavailable, SystemExit) as exc:
                    say(f"LiteLLM not measured: {exc}")
                    systems.append({"system": "litellm", "not_measured": str(exc)})
    costs = [await pacing_cost(kind, args) for kind in args.cpu_databases]
    return {
        "commit": commit(),
        **interpreter(),
        "cpus": os.cpu_count(),
        "loadavg_1m": [load_1m, os.getloadavg()[0]],
        "contract": CONTRACT,
        "jobs": args.jobs,
        "clients": args.clients,
        "upstream_limit": {
            "provider": PROVIDER,
            "requests_per_second": args.rps,
            "burst": args.burst,
        },
        "ideal_s": ideal_s(args),
        "targets": {
            "failed": TARGET_FAILED,
            "share_429": TARGET_SHARE_429,
            "all_settled_s": TARGET_IDEAL_RATIO * ideal_s(args),
        },
        "systems": systems,
        "pacing_cost": costs,
    }


def ideal_s(args: argparse.Namespace) -> float:
    """Seconds the upstream's bucket takes to let every job through: the burst at once,
    then one call per ``1 / rps``."""
    jobs: int = args.jobs
    burst: int = args.burst
    rps: float = args.rps
    return round(max(0, jobs - burst) / rps, 3)


def verdict(system: dict[str, Any], ideal: float) -> str:
    """``targets met``, or which of issue 43's targets a system missed."""
    missed = []
    if system["not_succeeded"] > TARGET_FAILED:
        missed.append(f"{system['not_succeeded']} not succeeded")
    share = system["upstream"]["share_429"]
    if share is not None and share > TARGET_SHARE_429:
        missed.append(f"429 share {share:.1%}")
    if system["all_settled_s"] > TARGET_IDEAL_RATIO * ideal:
        missed.append(f"{system['all_settled_s']} s > {TARGET_IDEAL_RATIO * ideal} s")
    return "targets met" if not missed else "missed: " + ", ".join(missed)


def one_line(system: dict[str, Any], ideal: float) -> str:
    """A system's figures as one line."""
    if "not_measured" in system:
        return f"{system['system']}: not measured ({system['not_measured']})"
    up = system["upstream"]
    share = f"{up['share_429']:.1%}" if up["share_429"] is not None else "-"
    return (
        f"{system['system']}: {system['succeeded']}/{system['jobs']} succeeded"
        f" ({system['reasons'] or 'none failed'}), all settled in {system['all_settled_s']} s;"
        f" upstream {up['calls']} calls, {up['answered_429']} answered 429 ({share});"
        f" {verdict(system, ideal)}"
    )


def summary(report: dict[str, Any]) -> str:
    """The run in a few lines."""
    limit = report["upstream_limit"]
    lines = [
        f"{report['commit']}: {report['jobs']} jobs from {report['clients']} clients,"
        f" upstream {limit['requests_per_second']}/s burst {limit['burst']}"
        f" (ideal {report['ideal_s']} s; targets: 0 failed, <= 25 % 429,"
        f" <= {report['targets']['all_settled_s']} s)"
    ]
    lines += [one_line(system, report["ideal_s"]) for system in report["systems"]]
    for system in report["systems"]:
        if "pace" in system:
            pace = system["pace"]
            lines.append(
                f"  {system['system']} pace: first {pace['first_pace_rpm']} req/min at"
                f" {pace['first_pace_at_s']} s, {pace['min_pace_rpm']}-{pace['max_pace_rpm']},"
                f" last {pace['last_pace_rpm']}; paused in {pace['samples_paused']} of"
                f" {pace['samples']} samples; jobs that waited {system['jobs_that_waited']}"
                f" ({system['waits']} waits)"
            )
    for cost in report["pacing_cost"]:
        lines.append(
            f"pacing cost, {cost['database']} sync jobs, limit {cost['limit_rpm']}/min over none:"
        )
        lines += figure_lines(cost["ratios"], "none", "limit")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the summary and write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.capacity")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rps", type=float, default=10.0, help="the upstream's limit")
    parser.add_argument("--burst", type=int, default=5)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--no-litellm", dest="litellm", action="store_false")
    parser.add_argument(
        "--bound", type=float, default=300.0, help="seconds after which a client gives up"
    )
    parser.add_argument(
        "--cpu-databases", default="postgresql,sqlite", help="the pacing's cost ('' for none)"
    )
    parser.add_argument("--cpu-rounds", type=odd_count, default=5)
    parser.add_argument("--cpu-duration", type=float, default=6.0)
    parser.add_argument("--out", default=str(ROOT / "reports/out/capacity.json"))
    args = parser.parse_args(argv)
    args.databases = [d for d in args.databases.split(",") if d]
    args.cpu_databases = [d for d in args.cpu_databases.split(",") if d]
    report = asyncio.run(run(args))
    print(summary(report))
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
