"""Side-by-side benchmark of onejob against its own database and the direct upstream.

``python -m bench.compare [--databases postgresql,sqlite] [--duration 10]`` runs,
in one invocation, on this machine:

1. the zero-latency upstream alone (``bench.processes.upstream``), at 16 and 1 connection;
2. pgbench with onejob's own creation SQL (PostgreSQL), 1 and 8 clients;
3. per database: ``onejob serve`` with the dispatcher off for creation and replay
   (16 connections), in ``--rounds`` alternated rounds with pgbench at 16 clients
   (PostgreSQL), then with the dispatcher on for durable sync jobs
   (``POST /v1/jobs`` + ``Prefer: wait=30``) at 16 connections, and at 1 connection in
   ``--rounds`` rounds alternated with the upstream alone at 1 connection (P3 is the
   median of the rounds' differences of p50);
4. with ``--peers``, against the same upstream and with the same load (16 connections,
   then 1): LiteLLM's proxy (1 worker, no database) and a DBOS Transact app doing the same
   durable job on PostgreSQL, each in its own virtualenv under ``.peers/``, built on the
   first run and reused after (``bench.lib.peers`` says how each is configured and
   why); the ratios onejob's sync jobs/s over theirs come from the same run;

all driven by ``wrk``. It prints every figure with the goals of issue 9 beside them
(P1 creation >= 0.5x pgbench, replay >= creation; P2 sync >= 300 jobs/s on PostgreSQL,
>= 150 on SQLite; P3 p50 overhead above the upstream <= 3 ms PostgreSQL, <= 5 ms SQLite),
and writes ``reports/out/compare.json``. Answers that are not what the run expects
(anything but 201/200, a sync job not ``succeeded``, a peer's answer not 200) are counted
and reported, never as throughput. It is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.lib import peers, wrk
from bench.lib.children import ROOT, child, free_port, listening, say
from bench.lib.compare_summary import summary
from bench.lib.databases import database, libpq, prepare
from bench.lib.gateways import UPSTREAM_MODULE, gateway, gateway_settings
from bench.lib.goals import ratios
from bench.lib.loads import (
    CONTRACT,
    INPUT,
    REPLAY_KEYS,
    UPSTREAM_SCRIPT,
    WARM_CONNECTIONS,
    seed_replay_keys,
    upstream_script,
)
from bench.lib.measure import at_16_and_1, measure, measured, tree_rss_kib
from bench.lib.p3 import bare_server, p3_rounds, p3_run
from bench.lib.p4 import p4_rounds
from bench.lib.p5 import surge_then_hot_replay
from bench.lib.pgbench import pgbench
from bench.lib.report import commit, interpreter, write_report
from bench.lib.rounds import alternated_rounds, median_run, odd_count
from bench.lib.wrk import run_wrk
from gateway.settings import Settings

SOAK_STEP = 30.0  # seconds between RSS samples in the soak


async def run_database(
    kind: str, args: argparse.Namespace, upstream: str, work: Path
) -> dict[str, Any]:
    """Measure one database: pgbench (PostgreSQL), creation, replay, P4 seeding, sync."""
    out: dict[str, Any] = {"database": kind}
    payload = {"contract": CONTRACT, "input": INPUT}
    body = json.dumps(payload)
    seconds = args.duration
    # Creation runs keep the dispatcher off: every job stays unsent, and past [admission]
    # max_queued (issue 43) the gateway would answer 503 queue-full; it is told never to.
    settings_for = functools.partial(
        gateway_settings,
        upstream=upstream,
        runners=args.runners,
        work=work,
        workers=args.workers,
        admission={"max_queued": 0},
    )
    out.update(await surge_then_hot_replay(kind, args, settings_for, work, payload))
    with database(kind, work) as url:
        key = await prepare(url)
        if kind == "postgresql":
            out["pgbench"] = []
            for clients in (1, 8):
                say(f"[{kind}] pgbench, onejob's creation SQL, {clients} client(s)")
                out["pgbench"].append(pgbench(url, clients, seconds, work))
                say(f"  {out['pgbench'][-1]}")

        port = free_port()
        cfg = settings_for(url, port, dispatcher=False)
        base = f"http://127.0.0.1:{port}"
        out["workers"] = Settings.model_validate_json(cfg.read_text(encoding="utf-8")).workers
        say(f"[{kind}] {out['workers']} gateway worker(s)")
        async with gateway(cfg, port, work) as pid:
            create = wrk.create_jobs(key, body, wait=None)
            script = wrk.write(work / "create.lua", create)
            # At the measured concurrency: every worker's pool is full before the clock runs.
            run_wrk(base, script, connections=WARM_CONNECTIONS, duration=2, prefix="warm")
            await seed_replay_keys(base, key, payload, url)
            replay = wrk.replay_jobs(key, body, REPLAY_KEYS)
            rscript = wrk.write(work / "replay.lua", replay)
            runs: dict[str, Any] = {
                "creation": lambda n: measure(
                    base, script, connections=16, duration=seconds, prefix=f"c16-{n}", pid=pid
                ),
                "replay": lambda n: measure(
                    base, rscript, connections=16, duration=seconds, prefix=f"r16-{n}", pid=pid
                ),
            }
            if kind == "postgresql":
                runs["pgbench"] = lambda n: pgbench(url, 16, seconds, work)
            out["rounds"] = alternated_rounds(kind, runs, args.rounds)
            out["creation_16"] = median_run(out["rounds"], "creation", "rps")
            out["replay_16"] = median_run(out["rounds"], "replay", "rps")
            if kind == "postgresql":
                out["pgbench"].append(median_run(out["rounds"], "pgbench", "tps"))
            if args.seed:
                out.update(
                    await p4_rounds(kind, args, settings_for, work, (base, script, pid), body)
                )

    # The sync runs get a database of their own: the jobs queued above (no dispatcher)
    # would otherwise be run first.
    with database(kind, work) as url:
        key = await prepare(url)
        port = free_port()
        cfg = settings_for(url, port, dispatcher=True)
        base = f"http://127.0.0.1:{port}"
        async with gateway(cfg, port, work) as pid:
            sync = wrk.create_jobs(key, body, wait=30)
            script = wrk.write(work / "sync.lua", sync)
            run_wrk(base, script, connections=WARM_CONNECTIONS, duration=2, prefix="warm")
            rss_before = tree_rss_kib(pid)
            out["sync_16"] = measured(
                base,
                script,
                seconds,
                pid,
                16,
                label=f"[{kind}] sync durable jobs,",
                prefix="s",
                unit="jobs/s",
            )
            async with contextlib.AsyncExitStack() as floors:
                bare = None
                if kind == "postgresql":  # its statements are PostgreSQL's
                    say(f"[{kind}] the bare floor (bare_path): starting")
                    bare = await floors.enter_async_context(bare_server(upstream, work))
                out["p3_rounds"] = p3_rounds(
                    kind, (base, script, pid), upstream, work / UPSTREAM_SCRIPT, args, bare
                )
            out["sync_1"] = p3_run(out["p3_rounds"])
            out["gateway_rss_kib"] = {"after_warmup": rss_before, "after_runs": tree_rss_kib(pid)}
            if args.soak:
                out["soak"] = await soak(base, script, pid, args.soak)
    return out


async def soak(base: str, script: Path, pid: int, seconds: float) -> dict[str, Any]:
    """Drive sync jobs for ``seconds`` at 16 connections, sampling the gateway's RSS."""
    say(f"soak: {seconds:.0f} s of sync jobs, RSS every {SOAK_STEP:.0f} s")
    samples: list[int] = [tree_rss_kib(pid)]
    jobs = bad = 0
    for n in range(max(1, int(seconds // SOAK_STEP))):
        r = run_wrk(base, script, connections=16, duration=SOAK_STEP, prefix=f"soak{n}")
        jobs, bad = jobs + r["ok"], bad + r["bad"] + r["socket_errors"]
        samples.append(tree_rss_kib(pid))
        say(f"  {(n + 1) * SOAK_STEP:.0f} s: RSS {samples[-1] // 1024} MiB, {jobs} jobs")
    return {"seconds": seconds, "jobs": jobs, "bad": bad, "rss_kib": samples}


async def run_peer(peer: peers.Peer, upstream: str, work: Path, seconds: float) -> dict[str, Any]:
    """Measure one peer at 16 connections and at 1; a peer that cannot run is reported.

    A virtualenv that cannot be built, a database that cannot be created or a process
    that never answers ends this peer with ``{"error": ...}``, not the comparison.
    """
    out: dict[str, Any] = {"title": peer.title, "requirements": list(peer.requirements)}
    job = {"contract": CONTRACT, "input": INPUT}
    try:
        async with contextlib.AsyncExitStack() as stack:
            say(f"[{peer.name}] {peer.title}, 1 worker")
            peers.ensure_venv(peer)
            if peer is peers.LITELLM:
                chat = json.dumps(peers.chat_request(INPUT))
                load = wrk.chat_completions(chat, key=peers.LITELLM_KEY)
                base, pid = await stack.enter_async_context(peers.litellm_proxy(upstream, work))
            else:
                load = wrk.peer_jobs(json.dumps(job))
                url = libpq(stack.enter_context(database("postgresql", work)))
                base, pid = await stack.enter_async_context(peers.dbos_app(upstream, url, work))
            script = wrk.write(work / f"{peer.name}.lua", load)
            run_wrk(base, script, connections=4, duration=2, prefix="warm")
            for connections, run in at_16_and_1(
                base, script, seconds, pid, label=f"[{peer.name}]", prefix=peer.name
            ):
                out[f"load_{connections}"] = run
    except SystemExit as exc:
        if not isinstance(exc.code, str):  # SIGTERM or Ctrl-C, not a peer's failure
            raise
        out["error"] = exc.code
    except (peers.PeerUnavailable, OSError, subprocess.CalledProcessError) as exc:
        out["error"] = str(exc)
    if "error" in out:
        out = {k: v for k, v in out.items() if not k.startswith("load_")}
        say(f"[{peer.name}] not measured: {out['error']}")
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run everything and return the report."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    report: dict[str, Any] = {
        "commit": commit(),
        "duration_s": args.duration,
        "workers_requested": args.workers,
        "runners": args.runners,
        "loadavg_at_start": os.getloadavg(),
        "machine": {**interpreter(), "cpus": os.cpu_count()},
        "databases": [],
    }
    machine = report["machine"]
    say(f"python {machine['python']} from {machine['python_home']}, {machine['cpus']} CPUs")
    with tempfile.TemporaryDirectory(prefix="onejob-compare-") as tmp:
        work = Path(tmp)
        port = free_port()
        upstream = f"http://127.0.0.1:{port}"
        log = work / "upstream.log"
        with child(["-m", UPSTREAM_MODULE, "--port", str(port)], log) as proc:
            await listening(port, proc, log, "the upstream")
            script = upstream_script(work)
            say("upstream alone, 16 connections and 1")
            report["upstream_16"] = run_wrk(
                upstream, script, connections=16, duration=args.duration, prefix="u"
            )
            report["upstream_1"] = run_wrk(
                upstream, script, connections=1, duration=args.duration, prefix="u"
            )
            u16, u1 = report["upstream_16"], report["upstream_1"]
            say(f"  {u16['rps']} req/s; p50 at 1 connection {u1['p50_ms']} ms")
            for kind in args.databases.split(","):
                report["databases"].append(await run_database(kind, args, upstream, work))
            if args.peers:
                report["peers"] = {
                    peer.name: await run_peer(peer, upstream, work, args.duration)
                    for peer in peers.PEERS
                }
            assert proc.poll() is None, "the upstream died"
    report["loadavg_at_end"] = os.getloadavg()
    report["ratios"] = ratios(report)
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the comparison, print the summary, write the JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--databases", default="postgresql,sqlite")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="gateway worker processes (default 0: the gateway sizes them as it does by "
        "default; here, beside the database, one per two CPUs on PostgreSQL, 1 on SQLite)",
    )
    parser.add_argument("--runners", type=int, default=16)
    parser.add_argument(
        "--rounds",
        type=odd_count,
        default=3,
        help="alternated rounds of creation, replay (and pgbench at 16) for P1's ratios,"
        " and of sync jobs and the upstream alone at 1 connection for P3 (odd: each median"
        " is then one round's figure)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="P4: seed this many jobs, then measure creation again"
    )
    parser.add_argument(
        "--soak", type=float, default=0, help="seconds of sync load sampling RSS (5 min: 300)"
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="also measure LiteLLM's proxy and a DBOS app (virtualenvs built in .peers/)",
    )
    parser.add_argument("--out", default=str(ROOT / "reports/out/compare.json"))
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = asyncio.run(run(args))
    print(summary(report))
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
