"""Scenario 12: a fallback that starts disagreeing on production inputs is suspended by the
shadow checks (issue 38); no job fails over to it afterwards, and the failover matrix
(``GET /v1/certifications``), ``/metrics`` and ``onejob can-i-failover`` say why."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from typing import Any

from providers.simulator.control_client import SimulatorControl
from reports.lines import clipped
from scenarios.context import ScenarioContext, brief, listed
from scenarios.model import MarkKind, TimelineMark
from scenarios.registry import scenario
from scenarios.setup import SIM_ANTHROPIC, SIM_OPENAI
from scenarios.stage import Stage, create_watched_job, stage

NAME = "shadow-suspension"
THRESHOLD = 0.5  # the disagreement rate at which the pair is suspended ...
MIN_SAMPLES = 4  # ... once this many shadow checks were judged
SHADOW = {
    "sample_rate": 1.0,  # every succeeded job is re-run on the fallback
    "min_samples": MIN_SAMPLES,
    "threshold": THRESHOLD,
    "min_interval": 0.0,  # seconds between two shadow calls of the gateway
    "interval": 0.2,  # seconds between shadow passes
    "calls_per_hour": 60,
}
AGREEING_JOBS = 2  # succeeded jobs re-run while the fallback still answers faithfully
DISAGREEING_JOBS = 3  # ... and after it starts answering only the catalog's inputs right
SHADOW_WAIT = 20.0  # seconds the shadow checks get to judge the jobs (or suspend the pair)
SHADOW_KEY = "shadow-"  #: the prefix of a shadow check's own downstream key
#: The simulator profile of a model tuned on the published catalog: right on its inputs,
#: wrong on a must-agree field of any other (providers/simulator/profiles.py).
CATALOG_ONLY = "catalog-only"
#: can-i-failover's shadow line (docs/certification.md).
TALLY = re.compile(
    r"^shadow checks since \S+: (?P<judged>\d+) judged, (?P<disagreed>\d+) disagreed "
    r"\(\d+% disagreed, on (?P<fields>[^)]*)\)"
)


def production_input(ctx: ScenarioContext, contract: str, n: int) -> dict[str, Any]:
    """Return a valid input that is not one of the catalog's cases (a production ticket)."""
    body = ctx.job_body(contract, seed=n)
    ticket = dict(body["input"])
    ticket["ticket_id"] = f"PROD-{700_000 + n}"
    ticket["customer"] = {**ticket["customer"], "name": f"Customer {n} of the scenario"}
    body["input"] = ticket
    return body


async def pair_row(ctx: ScenarioContext, s: Stage) -> dict[str, Any]:
    """Return the failover matrix's row for (contract, sim-openai, sim-anthropic)."""
    response = await ctx.request(
        "GET", f"{s.gateway.base_url}/v1/certifications", key=s.key, record=False
    )
    rows = listed(response, "certifications")
    for row in rows:
        if (row.get("contract"), row.get("primary"), row.get("fallback")) == (
            s.contract,
            SIM_OPENAI,
            SIM_ANTHROPIC,
        ):
            return dict(row)
    ctx.expect(False, "the failover matrix has the pair's row", response.text[:300])
    return {}


async def wait_row(
    ctx: ScenarioContext, s: Stage, until: Any, timeout: float, what: str
) -> dict[str, Any]:
    """Poll ``GET /v1/certifications`` until the pair's row satisfies ``until``."""
    deadline = time.monotonic() + timeout
    row = await pair_row(ctx, s)
    while not until(row) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        row = await pair_row(ctx, s)
    ok = until(row)
    waited = "" if ok else f"not within {timeout:.0f} s; "
    ctx.expect(ok, what, f"{waited}the row: {brief_row(row)}")
    return row


def brief_row(row: dict[str, Any]) -> str:
    """Say the parts of a matrix row this scenario reads, in one line."""
    return (
        f"allowed={row.get('allowed')} reason={row.get('reason')!r} "
        f"suspended={row.get('suspended')} shadow={row.get('shadow')}"
    )


def judged(row: dict[str, Any]) -> int:
    """Return how many shadow checks the row says were judged (0 when off)."""
    return int((row.get("shadow") or {}).get("checks") or 0)


async def succeed_jobs(ctx: ScenarioContext, s: Stage, first: int, count: int, label: str) -> None:
    """Create ``count`` jobs on inputs off the catalog; each succeeds on the primary."""
    for n in range(first, first + count):
        job_id = await create_watched_job(
            ctx,
            s,
            f"shadow-{n}",
            production_input(ctx, s.contract, n),
            wait=10,
            what=f"job {n} is created",
            label=f"job {n} ({label})",
        )
        job = await ctx.wait_job(
            s.gateway,
            s.key,
            job_id,
            lambda j: j.get("status") == "succeeded",
            10.0,
            f"job {n} succeeds on the primary",
        )
        ctx.expect(
            len(job["attempts"]) == 1 and job["attempts"][0].get("provider") == SIM_OPENAI,
            f"job {n} has one attempt, on {SIM_OPENAI}",
            brief(job),
        )


@scenario(
    NAME,
    "A fallback that starts disagreeing on production inputs is suspended: no failover to it",
    order=12,
)
async def shadow_suspension(ctx: ScenarioContext) -> None:
    """Shadow checks agree, then disagree, suspend the pair; a failing primary stays alone."""
    s = await stage(ctx, certified=True, shadow=SHADOW)
    row = await pair_row(ctx, s)
    ctx.expect(
        row.get("allowed") is True and row.get("suspended") is None,
        "the certified pair is allowed before any shadow check",
        brief_row(row),
    )
    ctx.expect(
        isinstance(row.get("shadow"), dict) and row["shadow"].get("sample_rate") == 1.0,
        "the matrix shows the shadow checks on (sample_rate 1)",
        brief_row(row),
    )

    ctx.action(f"{AGREEING_JOBS} production jobs, fallback faithful")
    await succeed_jobs(ctx, s, 1, AGREEING_JOBS, "agreeing")
    row = await wait_row(
        ctx,
        s,
        lambda r: judged(r) >= AGREEING_JOBS,
        SHADOW_WAIT,
        f"the shadow checks judge the {AGREEING_JOBS} jobs on {SIM_ANTHROPIC}",
    )
    ctx.expect(
        row["shadow"].get("disagreements") == 0 and row.get("allowed") is True,
        "the faithful fallback agrees on every production input and stays allowed",
        brief_row(row),
    )

    ctx.action(f"{SIM_ANTHROPIC} answers only the catalog's inputs right ({CATALOG_ONLY})")
    await SimulatorControl(ctx.http, s.sim.base_url).profiles(**{SIM_ANTHROPIC: CATALOG_ONLY})
    await succeed_jobs(ctx, s, AGREEING_JOBS + 1, DISAGREEING_JOBS, "disagreeing")
    row = await wait_row(
        ctx,
        s,
        lambda r: r.get("suspended") is not None,
        SHADOW_WAIT,
        "the shadow checks suspend the pair",
    )
    suspended = row["suspended"]
    ctx.note(f"suspension: {suspended}")
    ctx.expect(
        row.get("allowed") is False and row.get("reason") == "suspended",
        "the matrix refuses the pair with reason 'suspended'",
        brief_row(row),
    )
    ctx.expect(
        suspended.get("checks", 0) >= MIN_SAMPLES
        and suspended.get("disagreement_rate", 0) >= THRESHOLD
        and suspended.get("threshold") == THRESHOLD
        and suspended.get("min_samples") == MIN_SAMPLES,
        f"suspended at the threshold ({THRESHOLD:.0%}) with at least {MIN_SAMPLES} judged",
        str(suspended),
    )
    ctx.expect(
        "category" in (suspended.get("fields") or {}),
        "the suspension names the must-agree field that disagreed (category), no values",
        str(suspended.get("fields")),
    )
    ctx.expect(
        (row.get("detail") or "").find("shadow") >= 0,
        "the matrix's detail says the shadow checks suspended it",
        str(row.get("detail")),
    )
    shadow_calls = await ctx.sim_calls(s.sim, SIM_ANTHROPIC)
    ctx.expect(
        bool(shadow_calls)
        and all(str(c.get("idempotency_key") or "").startswith(SHADOW_KEY) for c in shadow_calls),
        f"every call {SIM_ANTHROPIC} got so far is a shadow check with its own key",
        str([c.get("idempotency_key") for c in shadow_calls]),
    )

    mark_shadow_calls(ctx, shadow_calls)
    await primary_fails_without_failover(ctx, s, len(shadow_calls))
    await metrics_say_suspended(ctx, s)
    await can_i_failover_says_why(ctx, s)


def mark_shadow_calls(ctx: ScenarioContext, calls: list[dict[str, Any]]) -> None:
    """Put the shadow checks' calls on the timeline (no job's capture shows them)."""
    for n, call in enumerate(calls, start=1):
        lane = f"shadow call #{n} · {call.get('provider')}"
        key = str(call.get("idempotency_key") or "")
        ctx.timeline.append(
            TimelineMark(ctx.rel(float(call["received_at"])), lane, MarkKind.CALL_RECEIVED, key)
        )
        if call.get("finished_at") is not None:
            ended = ctx.rel(float(call["finished_at"]))
            ctx.timeline.append(
                TimelineMark(ended, lane, MarkKind.CALL_ENDED, str(call.get("outcome")))
            )


async def primary_fails_without_failover(ctx: ScenarioContext, s: Stage, before: int) -> None:
    """The primary answers 500: the job fails, the suspended fallback is never called."""
    await ctx.script(s.sim, SIM_OPENAI, [{"kind": "status", "code": 500}])
    job_id = await create_watched_job(
        ctx,
        s,
        "shadow-after",
        production_input(ctx, s.contract, 99),
        wait=15,
        what="the job after the suspension is created",
        label="after suspension",
    )
    job = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: j.get("status") == "failed",
        10.0,
        "the job whose primary fails ends failed",
    )
    ctx.expect(
        len(job["attempts"]) == 1 and job["attempts"][0].get("provider") == SIM_OPENAI,
        f"one attempt, on {SIM_OPENAI}: no failover to {SIM_ANTHROPIC}",
        brief(job),
    )
    events = listed(
        await ctx.request("GET", f"{s.gateway.base_url}/v1/jobs/{job_id}/events", key=s.key),
        "events",
    )
    skipped = [e.get("detail") or {} for e in events if e.get("kind") == "failover_skipped"]
    ctx.expect(
        any(d.get("fallback") == SIM_ANTHROPIC and d.get("reason") == "suspended" for d in skipped),
        f"the job's audit says {SIM_ANTHROPIC} was skipped: suspended",
        str(skipped or [e.get("kind") for e in events]),
    )
    button = await ctx.request(
        "POST",
        f"{s.gateway.base_url}/v1/jobs/{job_id}/attempts",
        key=s.key,
        json_body={"provider": SIM_ANTHROPIC},
    )
    ctx.expect(
        button.status_code == 422 and "suspended" in button.text,
        "the fallback button is refused, naming the suspension",
        f"status {button.status_code}: {button.text[:300]}",
    )
    await asyncio.sleep(0.5)  # a wrong failover or shadow call would have reached it by now
    calls = await ctx.sim_calls(s.sim, SIM_ANTHROPIC)
    ctx.expect(
        len(calls) == before,
        f"no call reached {SIM_ANTHROPIC} after the suspension",
        f"{len(calls) - before} new: {[c.get('idempotency_key') for c in calls[before:]]}",
    )


async def metrics_say_suspended(ctx: ScenarioContext, s: Stage) -> None:
    """``/metrics`` has the pair suspended and the shadow calls against their limit."""
    text = (await ctx.request("GET", f"{s.gateway.base_url}/metrics", record=False)).text
    labels = f'contract="{s.contract}",fallback="{SIM_ANTHROPIC}",primary="{SIM_OPENAI}"'
    suspended = [
        line for line in text.splitlines() if line.startswith("onejob_failover_suspended{")
    ]
    mine = [line for line in suspended if labels in line]
    ctx.expect(
        mine == [f"onejob_failover_suspended{{{labels}}} 1.0"],
        "/metrics: onejob_failover_suspended is 1 for the pair",
        str(suspended),
    )
    limit = [line for line in text.splitlines() if line.startswith("onejob_shadow_calls_per_hour")]
    ctx.expect(
        limit == [f"onejob_shadow_calls_per_hour_limit {float(SHADOW['calls_per_hour'])}"],
        "/metrics: the shadow calls' hourly limit is the configured one",
        str(limit),
    )


async def can_i_failover_says_why(ctx: ScenarioContext, s: Stage) -> None:
    """``onejob can-i-failover`` (a process of its own) says no, suspended, and the tally."""
    config = dataclasses.replace(s.config, database_url=s.database_url)
    cli_config = config.write(ctx.harness.work_dir / "cli.toml")
    ctx.action("onejob can-i-failover")
    code, out, err = await ctx.harness.run_cli(
        "can-i-failover",
        "--contract",
        s.contract,
        "--from",
        SIM_OPENAI,
        "--to",
        SIM_ANTHROPIC,
        "--config",
        str(cli_config),
        "--registry",
        str(s.config.certifications_path),
    )
    said = out + err
    ctx.note(f"can-i-failover (exit {code}):\n{said.strip()}")
    ctx.expect(
        code == 1 and said.startswith("no: suspended"),
        "can-i-failover says no: suspended",
        f"exit {code}: {clipped(said.strip(), 400)}",
    )
    tally = next((line for line in said.splitlines() if line.startswith("shadow checks")), "")
    counts = TALLY.search(tally)
    ctx.expect(
        counts is not None
        and int(counts["judged"]) >= MIN_SAMPLES
        and int(counts["disagreed"]) >= 1
        and "category" in counts["fields"],
        "can-i-failover gives the shadow checks' tally and the field that disagreed",
        tally or clipped(said.strip(), 400),
    )
