"""The creation batcher behind a statement that hangs (a silent network, a failover).

No database: a stand-in whose statements never answer before their deadline, so the
batcher's own timing is what is measured. What must hold: what queues behind a stuck
statement goes beside it every ``STUCK_AFTER``, every caller is answered by its deadline,
and the batcher's timer does not spin the event loop meanwhile (it fired at every turn
of the loop before: 290,048 times in 4.5 s of this test).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from gateway.store import creation_batches
from gateway.store.creation_batches import STUCK_AFTER, CreationBatcher

TIMEOUT = 3.0  # seconds: each creation's deadline


class Hanging:
    """A database whose statements hang until their timeout, then time out."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, int]] = []  # (loop time, jobs in the statement)

    async def alone(
        self, sql: str, params: Any, *, meanwhile: Any = None, timeout: float | None = None
    ) -> list[Any]:
        jobs = len(params[0]) if sql == creation_batches.CREATE_BY_KEY_BATCH else 1
        self.sent.append((asyncio.get_running_loop().time(), jobs))
        await asyncio.sleep(timeout or TIMEOUT)
        raise TimeoutError("no answer")


async def test_behind_a_hanging_statement_creations_go_beside_it_and_answer_in_time() -> None:
    db = Hanging()
    batcher = CreationBatcher(db, timeout=TIMEOUT)  # type: ignore[arg-type]
    looks = 0
    look = batcher._flush_beside

    def counted() -> None:
        nonlocal looks
        looks += 1
        look()

    batcher._flush_beside = counted  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    began = loop.time()

    async def create(n: int) -> float:
        called = loop.time()
        try:
            await batcher.create((f"job-{n}",) * creation_batches._PER_JOB + ([], [], []))
        except TimeoutError:
            pass
        return loop.time() - called

    callers = []
    for n in range(40):  # one creation every 50 ms for 2 s
        callers.append(asyncio.create_task(create(n)))
        await asyncio.sleep(0.05)
    waits = await asyncio.gather(*callers)

    # Every caller answered by its deadline (a busy test machine runs timers late).
    assert max(waits) < TIMEOUT + 0.5, max(waits)
    # A statement went out at once, then one beside the stuck ones every STUCK_AFTER
    # while creations queued (five over these two seconds; more if the loop lagged).
    times = [at - began for at, _ in db.sent]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap >= STUCK_AFTER - 0.01 for gap in gaps), gaps
    assert db.sent[0][1] == 1 and len(db.sent) >= 5, db.sent
    assert sum(jobs for _, jobs in db.sent) == 40, db.sent
    # The timer looked a handful of times, not at every turn of the loop.
    assert looks <= 3 * len(db.sent), looks
