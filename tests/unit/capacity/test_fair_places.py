"""Owners' fair places in the claim queue, and admission (issue 43)."""

from __future__ import annotations

from gateway.service.admission import HORIZON, SPACING, FairPlaces, QueueAdmission
from gateway.settings import AdmissionConfig


def test_one_owner_s_burst_is_spaced_and_another_owner_goes_between() -> None:
    places = FairPlaces()
    burst = [places.place("key-a", 100.0) for _ in range(300)]
    assert burst[:3] == [0.0, SPACING, 2 * SPACING]
    assert max(burst) <= HORIZON
    # Another owner's job, a second later, is placed ahead of all but the first two.
    other = places.place("key-b", 101.0)
    assert other == 0.0
    ahead = [d for d in burst if 100.0 + d <= 101.0 + other]
    assert len(ahead) == 2


def test_an_owner_s_keys_share_its_spacing_once_known() -> None:
    places = FairPlaces()
    places.place("key-1", 0.0)
    places.owner_is("key-1", "alice")
    places.owner_is("key-2", "alice")
    assert places.place("key-2", 0.0) == SPACING  # alice's second job, by another key
    assert places.place("key-3", 0.0) == 0.0  # a key whose owner is not known yet


def test_spacing_runs_out_with_time() -> None:
    places = FairPlaces()
    for _ in range(10):
        places.place("k", 0.0)
    assert places.place("k", 1000.0) == 0.0


def test_admission_refuses_past_the_limit_and_never_when_it_is_zero() -> None:
    admission = QueueAdmission(AdmissionConfig(max_queued=10))
    admission.counted({"p": {"starting": 6, "waiting": 3}})
    assert not admission.full and admission.depth == 9
    admission.counted({"p": {"starting": 6, "waiting": 4}})
    assert admission.full
    unlimited = QueueAdmission(AdmissionConfig(max_queued=0))
    unlimited.counted({"p": {"starting": 10**6}})
    assert not unlimited.full
