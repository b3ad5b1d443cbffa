"""P3: sync jobs at one connection beside the upstream alone, in rounds; the bare floor.

P3 is the median of the rounds' differences of p50 (the gateway's sync jobs less the
upstream's). On PostgreSQL the bare server (``bench.processes.bare_server``: the store's
two statements and the call, nothing else) runs in the same rounds, and onejob's P3 over
its floor is the share of P3 that is onejob's own, whatever the host's speed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.lib import wrk
from bench.lib.children import child, free_port, listening, say
from bench.lib.databases import database, libpq, prepare
from bench.lib.loads import CONTRACT, INPUT
from bench.lib.measure import measure
from bench.lib.rounds import alternated_rounds
from bench.lib.wrk import run_wrk

#: The bare server (``bench/processes/bare_server.py``).
BARE_SERVER_MODULE = "bench.processes.bare_server"


@contextlib.asynccontextmanager
async def bare_server(upstream: str, work: Path) -> AsyncIterator[tuple[str, Path]]:
    """Run the bare server (``bench.processes.bare_server``) on a migrated PostgreSQL
    database of its own, calling ``upstream``, warmed; yield its base URL and its wrk
    script (sync jobs)."""
    with database("postgresql", work) as url:
        await prepare(url)
        port = free_port()
        log = work / "bare.log"
        cmd = ["-m", BARE_SERVER_MODULE, str(port), libpq(url), upstream]
        with child(cmd, log) as proc:
            await listening(port, proc, log, "the bare server")
            base = f"http://127.0.0.1:{port}"
            payload = json.dumps({"contract": CONTRACT, "input": INPUT})
            script = wrk.write(work / "bare.lua", wrk.create_jobs("unused", payload, wait=30))
            run_wrk(base, script, connections=1, duration=2, prefix="warm-bare")
            yield base, script


def p3_rounds(
    kind: str,
    gateway_side: tuple[str, Path, int],
    upstream: str,
    upstream_script: Path,
    args: argparse.Namespace,
    bare: tuple[str, Path] | None = None,
) -> list[dict[str, Any]]:
    """Measure sync jobs at one connection beside the upstream alone at one connection,
    in ``--rounds`` alternated rounds (``alternated_rounds``); P3 is the median of the
    rounds' differences of p50 (``bench.lib.goals.ratios``). With ``bare`` (its base URL
    and wrk script: ``bare_server``), the bare server at one connection in the same
    rounds: the floor beside P3 (``p3_floor``).

    Until the fifteenth session P3 was one gateway run set against the upstream's run
    at the very start, minutes earlier: one run at one commit, on one host, gave 2.825
    and 3.265 ms in two invocations, the second right after P4's million-row seeding.
    """
    base, script, pid = gateway_side
    seconds = args.duration
    runs = {
        "upstream": lambda n: run_wrk(
            upstream, upstream_script, connections=1, duration=seconds, prefix=f"u1-{n}"
        ),
        "sync": lambda n: measure(
            base, script, connections=1, duration=seconds, prefix=f"s1-{n}", pid=pid
        ),
    }
    if bare is not None:
        bare_base, bare_script = bare
        runs["bare"] = lambda n: run_wrk(
            bare_base, bare_script, connections=1, duration=seconds, prefix=f"b1-{n}"
        )
    rounds = alternated_rounds(kind, runs, args.rounds, connections=1)
    floors = p3_above(rounds, "bare") if bare is not None else [None] * len(rounds)
    for n, (figures, above, bare_above) in enumerate(
        zip(rounds, p3_above(rounds), floors, strict=True), start=1
    ):
        up, sync = figures["upstream"], figures["sync"]
        floor = "" if bare_above is None else f"; the bare floor {bare_above:.3f} ms"
        say(
            f"[{kind}] P3 round {n}: sync p50 {sync['p50_ms']} ms (p99 {sync['p99_ms']}),"
            f" upstream alone {up['p50_ms']} ms: {above:.3f} ms above{floor}"
        )
    return rounds


def p3_above(rounds: list[dict[str, Any]], side: str = "sync") -> list[float]:
    """Return each P3 round's p50 of ``side`` (the gateway's sync jobs, or ``bare``) less
    its upstream's (ms)."""
    return [r[side]["p50_ms"] - r["upstream"]["p50_ms"] for r in rounds]


def p3_floor(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the bare floor beside P3 (rounds with a ``bare`` run): each side's p50 above the
    upstream's per round, their medians, and onejob's over the floor's (the median of the
    rounds' ratios, each round's two runs minutes apart at most).

    A bare or sync run with an answer that was not a succeeded job, or none at all,
    measured something else: it is refused (``SystemExit``) rather than reported.
    """
    for n, r in enumerate(rounds, start=1):
        for side in ("bare", "sync"):
            if r[side].get("bad") or not r[side].get("ok"):
                raise SystemExit(f"round {n}: {side} answered {r[side]}: not every job succeeded")
    above = {side: p3_above(rounds, side) for side in ("bare", "sync")}
    pairs = zip(above["sync"], above["bare"], strict=True)
    ratios = [s / b if b > 0 else float("nan") for s, b in pairs]
    return {
        "above_upstream_ms": {k: [round(x, 3) for x in v] for k, v in above.items()},
        "bare_p3_ms": round(statistics.median(above["bare"]), 3),
        "onejob_p3_ms": round(statistics.median(above["sync"]), 3),
        "onejob_over_bare": round(statistics.median(ratios), 3),
        "rounds_onejob_over_bare": [round(x, 3) for x in ratios],
    }


def p3_run(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the sync run of the round whose difference is P3 (the median one), with
    every round's p50 beside it: the p99 reported beside P3 is that round's.

    The median sync run by its own p50 can be another round than P3's: in a slow
    phase the gateway's p50 and the upstream's both rise.
    """
    above = p3_above(rounds)
    ranked = sorted(range(len(rounds)), key=above.__getitem__)
    chosen = ranked[(len(ranked) - 1) // 2]  # ``--rounds`` is odd: the median itself
    return {**rounds[chosen]["sync"], "rounds_p50_ms": [r["sync"]["p50_ms"] for r in rounds]}
