"""While the runtime runs, its thread tells sniffio that asyncio runs it
(``gateway.bootstrap.asyncio_named_for_sniffio``), so httpcore's and anyio's questions are
answered without ``asyncio.current_task()``; what the thread said before comes back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpcore._synchronization
import pytest
import sniffio

from gateway.app import settings_for_tests
from gateway.bootstrap import running
from gateway.metrics import Metrics
from gateway.notify import ChangeHub
from gateway.store import upgrade_database


async def test_the_running_runtime_names_asyncio_and_puts_back_what_was_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'n.db'}"
    await upgrade_database(url)
    settings = settings_for_tests(database_url=url)
    assert sniffio.thread_local.name is None
    async with running(settings, [], hub=ChangeHub(), metrics=Metrics()):
        assert sniffio.thread_local.name == "asyncio"
        sniffed: list[object] = []

        def current_task(loop: object = None) -> object:
            sniffed.append(loop)
            raise AssertionError("sniffio sniffed")

        with monkeypatch.context() as patch:
            patch.setattr(asyncio, "current_task", current_task)
            assert httpcore._synchronization.current_async_library() == "asyncio"
        assert sniffed == []
        await asyncio.sleep(0)  # other tasks of the thread see it too
        assert await asyncio.create_task(_name()) == "asyncio"
    assert sniffio.thread_local.name is None


async def _name() -> str | None:
    return sniffio.thread_local.name


async def test_runtimes_that_end_out_of_order_put_back_what_the_thread_said(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'o.db'}"
    await upgrade_database(url)
    settings = settings_for_tests(database_url=url)
    first = running(settings, [], hub=ChangeHub(), metrics=Metrics())
    second = running(settings, [], hub=ChangeHub(), metrics=Metrics())
    await first.__aenter__()
    await second.__aenter__()
    await first.__aexit__(None, None, None)  # the first ends first
    assert sniffio.thread_local.name == "asyncio"  # the second still runs
    await second.__aexit__(None, None, None)
    assert sniffio.thread_local.name is None
