"""What a serving process does once its app has started: freeze what startup built."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway import server
from gateway.app import settings_for_tests


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_a_worker_app_tunes_the_collector_after_its_other_startup_hooks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = settings_for_tests()
    monkeypatch.setenv(server.SETTINGS_ENV, settings.model_dump_json())
    app = server.worker_app()
    assert app.on_startup[-1] is server.tune_gc_after_startup


@pytest.mark.usefixtures("restored_gc")
def test_tuning_freezes_the_live_objects_and_raises_only_the_young_threshold() -> None:
    gc.unfreeze()
    _, gen1, gen2 = gc.get_threshold()
    server.tune_gc_after_startup()
    assert gc.get_freeze_count() > 1000  # the modules, the app, this test's objects
    assert gc.get_threshold() == (server.GC_GEN0_THRESHOLD, gen1, gen2)
