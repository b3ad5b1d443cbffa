"""What the retrying clients of the failover scenario make of their answers (no network)."""

from __future__ import annotations

from typing import Any

from scenarios.retrying_clients import UNAVAILABLE, Answer, RetryingClients


def answer(answered: float, status: int | None, key: str = "k", **fields: Any) -> Answer:
    """Return an answer to a request sent a tenth of a second before it came back."""
    return Answer(answered - 0.1, answered, 0, key, 0, status, **fields)


def clients_told(*answers: Answer) -> RetryingClients:
    """Return clients that were given these answers (never started)."""
    clients = RetryingClients(["http://gw"], "key", lambda seq: {})
    clients.answers.extend(answers)
    return clients


def test_a_stretch_without_a_201_belongs_to_the_fault_it_ended_in() -> None:
    told = clients_told(answer(1.0, 201), answer(2.0, 201), answer(9.0, 201), answer(10.0, 201))
    # The fault was recorded at 2.5, after the last 201 before its outage.
    assert told.longest_without_created(2.5, 20.0) == 7.0
    assert told.longest_without_created(0.0, 2.5) == 1.0


def test_a_stretch_with_no_201_at_all_lasts_until_it_ends() -> None:
    told = clients_told(answer(1.0, 201), answer(3.0, 503), answer(30.0, 201))
    assert told.longest_without_created(2.0, 12.0) == 11.0


def test_only_201_200_and_503_unavailable_with_retry_after_are_expected() -> None:
    told = clients_told(
        answer(1.0, 201, job_id="job_1"),
        answer(2.0, 503, problem=UNAVAILABLE, outcome="unknown", retry_after=1.0),
        answer(3.0, 500, problem="urn:onejob:internal-error"),
        answer(4.0, 503, problem=f"{UNAVAILABLE} without Retry-After"),
        answer(5.0, None, problem="ReadTimeout"),
    )
    assert [a.answered for a in told.unexpected()] == [3.0, 4.0]
    assert told.statuses() == {
        "201": 1,
        "503 unknown": 1,
        "500": 1,
        "503 urn:onejob:unavailable without Retry-After": 1,
        "no answer (ReadTimeout)": 1,
    }


def test_a_key_retried_until_acknowledged_names_the_job_ids_it_was_given() -> None:
    told = clients_told(
        answer(1.0, 503, "a", problem=UNAVAILABLE, outcome="unknown", retry_after=1.0),
        answer(2.0, 200, "a", job_id="job_1"),
        answer(3.0, 201, "b", job_id="job_2"),
        answer(4.0, 201, "c", job_id="job_3"),
        answer(5.0, 200, "c", job_id="job_4"),
    )
    assert told.acknowledged() == {"a": {"job_1"}, "b": {"job_2"}, "c": {"job_3", "job_4"}}
    assert told.first_created_after(2.5) == 3.0
