"""wrk: the Lua scripts the benchmarks drive servers with, and running it.

Every script's ``done`` prints one JSON line (``WRK_RESULT {...}``) with the request count,
percentiles and how many answers were what the run expects, so the benchmark never counts
an error page as throughput. ``run_wrk`` reads that line.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from pathlib import Path
from typing import Any

from bench.lib.children import say

#: wrk's threads (at most one per connection): this host has two cores.
WRK_THREADS = 2

#: Shared by every script: thread ids, counters, and the JSON summary in ``done``.
_COMMON = r"""
local threads = {}
local next_tid = 0
function setup(thread)
  next_tid = next_tid + 1
  thread:set("tid", next_tid)
  table.insert(threads, thread)
end
function init(args)
  prefix = args[1] or "run"
  counter = 0
  ok = 0
  bad = 0
end
function response(status, headers, body)
  if status == EXPECT_STATUS_A or status == EXPECT_STATUS_B then
    if EXPECT_BODY == nil or string.find(body, EXPECT_BODY, 1, true) then
      ok = ok + 1
      return
    end
  end
  bad = bad + 1
  if bad <= 3 then
    io.stderr:write("unexpected answer " .. status .. ": " .. string.sub(body, 1, 300) .. "\n")
  end
end
function done(summary, latency, requests)
  local good, wrong = 0, 0
  for _, t in ipairs(threads) do
    good = good + (t:get("ok") or 0)
    wrong = wrong + (t:get("bad") or 0)
  end
  io.write(string.format(
    'WRK_RESULT {"requests": %d, "duration_us": %d, "ok": %d, "bad": %d, '
    .. '"socket_errors": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "mean_us": %.1f}\n',
    summary.requests, summary.duration, good, wrong,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean))
end
"""


def _script(body: str, *, statuses: tuple[int, int], expect_body: str | None) -> str:
    expect = "nil" if expect_body is None else json.dumps(expect_body)
    return (
        f"EXPECT_STATUS_A = {statuses[0]}\nEXPECT_STATUS_B = {statuses[1]}\n"
        f"EXPECT_BODY = {expect}\n" + _COMMON + body
    )


def create_jobs(key: str, payload: str, *, wait: int | None) -> str:
    """POST a new job per request (a unique Idempotency-Key per thread and counter)."""
    prefer = f'["Prefer"] = "wait={wait}",' if wait else ""
    body = f"""
function request()
  counter = counter + 1
  return wrk.format("POST", "/v1/jobs", {{
    ["Authorization"] = "Bearer {key}",
    ["Content-Type"] = "application/json",
    {prefer}
    ["Idempotency-Key"] = prefix .. "-" .. tid .. "-" .. counter,
  }}, {json.dumps(payload)})
end
"""
    if wait:
        return _script(body, statuses=(201, 201), expect_body='"status":"succeeded"')
    return _script(body, statuses=(201, 201), expect_body=None)


def get_ok(path: str, expect_body: str) -> str:
    """GET ``path`` again and again: only a 200 with ``expect_body`` in it counts."""
    body = f"""
function request()
  return wrk.format("GET", {json.dumps(path)})
end
"""
    return _script(body, statuses=(200, 200), expect_body=expect_body)


def replay_jobs(key: str, payload: str, keys: int) -> str:
    """POST the same requests again: every Idempotency-Key already names a job (200)."""
    body = f"""
function request()
  counter = counter + 1
  return wrk.format("POST", "/v1/jobs", {{
    ["Authorization"] = "Bearer {key}",
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = "replay-" .. (counter % {keys}),
  }}, {json.dumps(payload)})
end
"""
    return _script(body, statuses=(200, 200), expect_body=None)


def chat_completions(payload: str, *, key: str | None = None) -> str:
    """POST a Chat Completions request: to the upstream, or to LiteLLM's proxy with its key."""
    auth = f'["Authorization"] = "Bearer {key}",' if key else ""
    body = f"""
function request()
  return wrk.format("POST", "/v1/chat/completions",
    {{["Content-Type"] = "application/json", {auth}}}, {json.dumps(payload)})
end
"""
    return _script(body, statuses=(200, 200), expect_body="chat.completion")


def peer_jobs(payload: str) -> str:
    """POST a job to the DBOS peer: a fresh Idempotency-Key per request, 200 and ``succeeded``."""
    body = f"""
function request()
  counter = counter + 1
  return wrk.format("POST", "/jobs", {{
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = prefix .. "-" .. tid .. "-" .. counter,
  }}, {json.dumps(payload)})
end
"""
    return _script(body, statuses=(200, 200), expect_body='"status":"succeeded"')


def write(path: Path, text: str) -> Path:
    """Write a script and return its path."""
    path.write_text(text, encoding="utf-8")
    return path


def run_wrk(
    url: str, script: Path, *, connections: int, duration: float, prefix: str
) -> dict[str, Any]:
    """Run wrk and return its ``WRK_RESULT`` line as a dict (with ``rps``)."""
    prefix = f"{prefix}-{secrets.token_hex(3)}"  # every run makes new jobs
    threads = min(WRK_THREADS, connections)
    cmd = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{int(duration)}s",
        "--timeout",
        "40s",
        "-s",
        str(script),
        url,
        "--",
        prefix,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120, check=False)
    match = re.search(r"^WRK_RESULT (\{.*\})$", out.stdout, re.MULTILINE)
    if match is None:
        raise SystemExit(f"wrk gave no result:\n{out.stdout}\n{out.stderr}")
    result: dict[str, Any] = json.loads(match.group(1))
    seconds = result["duration_us"] / 1e6
    result["rps"] = round(result["ok"] / seconds, 1)
    result["p50_ms"] = round(result["p50_us"] / 1000, 3)
    result["p99_ms"] = round(result["p99_us"] / 1000, 3)
    if out.stderr.strip():
        say(out.stderr.strip()[:600])
    return result
