"""The attempt dispatcher: claim attempts, call providers, record each outcome (DESIGN R3-R7).

| module | what it holds |
|---|---|
| ``dispatcher`` | ``Dispatcher``: its lifecycle (start, stop) and ``run_once`` |
| ``state`` | what its parts share: dependencies, runner slots, the stop flag |
| ``runners`` | the runner loops and their claim baton |
| ``first_attempts`` | a new job's first attempt, run in-process (``reserve``, ``run_claimed``) |
| ``reaper`` | expired leases become ``unknown`` (``reap_once``) |
| ``attempt`` | one attempt's life: its call budget, its call, which outcome it gets |
| ``outcomes`` | writing that outcome: the compare-and-swap, a failure and failover, unknown |
| ``database_away`` | writing it while the database is away: retries, late answers |
| ``lease``, ``hedging`` | what runs beside a call in flight: lease renewal, the hedge |
| ``calling``, ``routing`` | one provider call, classified; where an attempt may go (R6) |

A process runs one through ``gateway.background.DispatcherService``.
"""
