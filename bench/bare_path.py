"""The floor of a durable sync job in Python: the gateway's two statements and its call, bare.

``python -m bench.bare_path [--duration 8] [--rounds 3]`` starts the zero-latency
upstream, onejob's gateway (one worker, dispatcher on, PostgreSQL) and the bare server
(``bench.processes.bare_server``) on a database of its own, and drives all three at one
connection in ``--rounds`` alternated rounds (``bench.lib.p3.p3_rounds``; ``bench.compare``
runs the same rounds on PostgreSQL). Per request the bare server does what a sync job
cannot do without, and nothing else, on uvloop with httptools and asyncpg as the gateway
does:

1. ``create.CREATE``: the job, its first attempt claimed, its events, one commit;
2. the upstream's Chat Completions call over a kept-alive connection, its answer decoded;
3. ``finalize.FINALIZE_ALONE``: the compare-and-swap decision, one commit;
4. a 201 with the decided job's status.

No API key, schema, fingerprint, prompt, lease timer, metric, log line or framework. The
gateway's P3 (sync p50 less the upstream's) over the bare server's is the share of P3
that is onejob's own on this host, whatever the host's speed: on a slow host both rise.
It prints each round and writes JSON (``--out``). A measurement, not a test; the bare
server keeps none of onejob's guarantees beyond what those two statements keep.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.lib.children import ROOT, say
from bench.lib.gateways import start_side, start_upstream
from bench.lib.loads import upstream_script
from bench.lib.p3 import bare_server, p3_floor, p3_rounds
from bench.lib.report import commit, write_report
from bench.lib.rounds import odd_count
from bench.lib.wrk import run_wrk
from bench.processes import bare_server as bare_process


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the upstream, the gateway and the bare server, run the rounds (those of
    ``bench.compare``'s P3, with the bare server in them); return the report."""
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bare-")))
        upstream = await start_upstream(stack, work)
        up_script = upstream_script(work)
        gw_args = argparse.Namespace(mode="sync", database="postgresql")
        pid, gateway, gw_script, _ = await start_side(stack, "new", ROOT, upstream, gw_args)
        run_wrk(gateway, gw_script, connections=1, duration=2, prefix="warm")
        async with bare_server(upstream, work) as bare:
            rounds = p3_rounds(
                "postgresql", (gateway, gw_script, pid), upstream, up_script, args, bare
            )
    return {"commit": commit(), "rounds": rounds, **p3_floor(rounds)}


def main(argv: list[str] | None = None) -> int:
    """Serve (``--serve PORT DSN UPSTREAM``, the child) or measure, print and write JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.bare_path")
    parser.add_argument(
        "--serve",
        nargs=3,
        metavar=("PORT", "DSN", "UPSTREAM"),
        help="run the bare server itself (as python -m bench.processes.bare_server does)",
    )
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per run")
    parser.add_argument("--rounds", type=odd_count, default=3, help="alternated rounds (odd)")
    parser.add_argument(
        "--out", default=str(ROOT / "reports/out/bare_path.json"), help="the JSON report"
    )
    args = parser.parse_args(argv)
    if args.serve:
        port, dsn, upstream = args.serve
        bare_process.serve(int(port), dsn, upstream)
        return 0
    out = asyncio.run(run(args))
    say(
        f"P3 at one connection: onejob {out['onejob_p3_ms']} ms, bare {out['bare_p3_ms']} ms"
        f" (rounds {out['above_upstream_ms']}); onejob / bare {out['onejob_over_bare']}x"
        f" (rounds {out['rounds_onejob_over_bare']})"
    )
    write_report(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
