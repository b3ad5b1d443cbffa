"""bench.capacity's figures: the call log per second, the clients' outcomes, the targets."""

from __future__ import annotations

import argparse
from typing import Any

from bench import capacity
from bench.lib import limited


def call(at: float, status: int, key: str | None = "job_1/1") -> dict[str, Any]:
    behaviour = "rate_limited" if status == 429 else "ok"
    return {"received_at": at, "status": status, "behaviour": behaviour, "idempotency_key": key}


def test_the_call_log_counts_429s_per_second_from_the_start_and_calls_per_key() -> None:
    started = 1000.0
    calls = [
        call(1000.1, 200, "a/1"),
        call(1000.2, 429, "b/1"),
        call(1001.5, 200, "b/1"),
        call(1001.6, 429, "c/1"),
        call(1002.0, 200, None),
    ]
    log = limited.call_log(calls, started)
    assert log["calls"] == 5
    assert log["answered_429"] == 2
    assert log["share_429"] == 0.4
    assert log["statuses"] == {"200": 3, "429": 2}
    assert log["behaviours"] == {"ok": 3, "rate_limited": 2}
    assert (log["keys"], log["max_calls_per_key"], log["keys_sent_more_than_once"]) == (3, 2, 1)
    assert log["first_429_s"] == [0.2, 1.6]
    assert log["per_second"] == [
        {"s": 0, "calls": 2, "429": 1},
        {"s": 1, "calls": 2, "429": 1},
        {"s": 2, "calls": 1, "429": 0},
    ]
    assert limited.call_log([], started)["share_429"] is None


def test_outcomes_count_what_did_not_succeed_and_when_the_last_settled() -> None:
    run = limited.Run(started=0.0, began=0.0)
    run.outcomes = [
        limited.Outcome(0, "succeeded", 3.0, None, waits=2, attempts=1),
        limited.Outcome(1, "failed", 9.5, "job_deadline", waits=5, attempts=1),
        limited.Outcome(2, "succeeded", 4.0, None, waits=0, attempts=1),
    ]
    out = limited.outcomes_summary(run, 3)
    assert (out["succeeded"], out["not_succeeded"]) == (2, 1)
    assert out["reasons"] == {"failed:job_deadline": 1}
    assert out["all_settled_s"] == 9.5
    assert (out["jobs_that_waited"], out["waits"], out["max_waits_of_a_job"]) == (2, 7, 5)


def test_the_ideal_and_the_targets() -> None:
    args = argparse.Namespace(jobs=300, burst=5, rps=10.0)
    assert capacity.ideal_s(args) == 29.5
    good = {"not_succeeded": 0, "all_settled_s": 40.0, "upstream": {"share_429": 0.1}}
    assert capacity.verdict(good, 29.5) == "targets met"
    bad = {"not_succeeded": 3, "all_settled_s": 70.0, "upstream": {"share_429": 0.5}}
    assert (
        capacity.verdict(bad, 29.5) == "missed: 3 not succeeded, 429 share 50.0%, 70.0 s > 59.0 s"
    )


def test_litellm_keeps_its_own_retries_and_timeout() -> None:
    config = capacity.litellm_defaults("http://127.0.0.1:1/p/sim-openai")
    settings = config["litellm_settings"]
    assert isinstance(settings, dict)
    assert "num_retries" not in settings and "request_timeout" not in settings
    assert settings["callbacks"] == []


def test_the_litellm_request_carries_the_contracts_input_block() -> None:
    body = limited.contract_request(limited.inputs()[0])
    assert body["messages"][1]["content"].rstrip().endswith("</input>")
    assert '<input contract="ticket-triage@1">' in body["messages"][1]["content"]
