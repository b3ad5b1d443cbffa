"""What this process knows of its providers' capacity, and the one question it answers:
may a call to this provider go now, and if not, how long until it may (issue 43).

``Capacity`` holds, per provider, its pacing (``pacing.Pace``) and its circuit
(``breaker.Breaker``), learns from every outcome (an answer and the limits it announced, a
"not now" and the time it asked for, a failure), and keeps what the other processes must
hear (``news``) until the sharing loop (``sharing``) takes it. The dispatcher asks it
before each call (``admit``), and before it claims (``blocked``: the providers it cannot
call now, so a runner claims another provider's attempt rather than one it would have to
put back). Nothing here does I/O but two log lines: a circuit that opens (WARNING) and
one that closes (INFO), in this process.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence

from gateway.capacity.breaker import Breaker, Circuit
from gateway.capacity.pacing import Pace
from gateway.domain.capacity import CapacityNews, SharedCapacity, backoff
from gateway.settings import CapacityConfig
from providers.base import RateLimits
from providers.config import ProviderConfig

#: A pacing wait this short is slept by the runner that has the attempt (holding its slot
#: and lease for under a second) rather than written to the database as a wait.
SHORT_WAIT = 1.0

log = logging.getLogger("gateway.capacity")


@dataclasses.dataclass(frozen=True, slots=True)
class Admission:
    """May a call go now: ``wait`` 0 (it went: counted until ``Capacity.done``), or the
    seconds before it may, and why (``paced``, ``paused``, ``rate_limited``,
    ``overloaded``, ``circuit_open``, ``concurrency``)."""

    wait: float
    reason: str = ""
    probe: bool = False  #: the call is the probe of an open circuit


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderState:
    """One provider's capacity as this process sees it (metrics, ``/readyz``, the console)."""

    provider: str
    circuit: str
    circuit_until: dt.datetime | None
    paused_until: dt.datetime | None
    pause_reason: str | None
    requests_per_minute: float | None  #: this process's slice of the request limit
    tokens_per_minute: float | None
    share: float
    in_flight: int
    consecutive_failures: int


class Capacity:
    """Pacing and circuits of every configured provider, in this process."""

    def __init__(
        self,
        providers: Mapping[str, ProviderConfig],
        config: CapacityConfig,
        *,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.config = config
        self.clock = clock
        self.rand = rand
        now = clock()
        self.paces = {name: Pace(name, cfg.limits, now) for name, cfg in providers.items()}
        self.breakers = {
            name: Breaker(config.breaker_failures, config.breaker_open) for name in providers
        }
        #: What the other processes must hear, by provider (the sharing loop takes it).
        self.news: dict[str, CapacityNews] = {}
        #: Consecutive 429s that named no time, by provider (their backoff's exponent).
        self._unnamed: dict[str, int] = {}
        #: Unsent attempts per provider at the last count of the queue (every process);
        #: a provider missing here had none. None: never counted (assume some).
        self._queued: dict[str, int] | None = None

    # -- before a call ---------------------------------------------------------------------

    def admit(self, provider: str, tokens: int = 0) -> Admission:
        """Say whether a call costing ``tokens`` may go to ``provider`` now; if so it is
        counted (in flight, its share of the buckets) until ``done``."""
        pace = self.paces.get(provider)
        breaker = self.breakers.get(provider)
        if pace is None or breaker is None:
            return Admission(0.0)
        now = self.clock()
        wait, why = pace.wait(tokens, now)
        if wait > 0:
            return Admission(wait, why)
        was = breaker.state
        open_for = breaker.wait(now)
        if open_for > 0:
            return Admission(open_for, "circuit_open")
        pace.take(tokens, now)
        return Admission(0.0, probe=was is not Circuit.CLOSED)

    def done(self, provider: str) -> None:
        """A call ``admit`` let go is over (whatever its outcome)."""
        pace = self.paces.get(provider)
        if pace is not None:
            pace.release()

    def blocked(self) -> dict[str, float]:
        """The providers a call cannot go to now, with the seconds until one may: the ones
        a runner should not claim an attempt of."""
        now = self.clock()
        out: dict[str, float] = {}
        for name, pace in self.paces.items():
            wait = pace.wait(0, now)[0] if pace.limited or pace.paused_until > now else 0.0
            breaker = self.breakers[name]
            if breaker.state is Circuit.OPEN and breaker.until > now:
                wait = max(wait, breaker.until - now)
            elif breaker.state is Circuit.HALF_OPEN and breaker.until > now:
                wait = max(wait, breaker.until - now)  # its probe is out: wait for it
            if wait > 0:
                out[name] = wait
        return out

    def queue_counted(self, depth: Mapping[str, Mapping[str, int]]) -> None:
        """Take the last count of the queue: unsent attempts by provider and state."""
        self._queued = {name: sum(states.values()) for name, states in depth.items()}

    def _none_queued(self, provider: str) -> bool:
        return self._queued is not None and not self._queued.get(provider)

    def held(self, patience: float) -> dict[str, float]:
        """The providers whose queued attempts should stay in line now, with their waits:
        paced, short of concurrency, or paused for at most ``patience``. Not one whose
        circuit is open, nor one paused longer: their attempts are claimed, to fail over
        to a fallback or to be written as waits. Nor one with nothing in line at the last
        count: a runner would only look again for nothing (a limit that never binds is
        short of a call's worth for microseconds after each call)."""
        now = self.clock()
        out: dict[str, float] = {}
        for name, pace in self.paces.items():
            if not (pace.limited or pace.paused_until > now) or self._none_queued(name):
                continue
            if self.breakers[name].state is not Circuit.CLOSED:
                continue
            wait, why = pace.wait(0, now)
            if 0 < wait and (why in ("paced", "concurrency") or wait <= patience):
                out[name] = wait
        return out

    def free_flowing(self, provider: str) -> bool:
        """Say whether a new job's first attempt may go to ``provider`` at once, in the
        process that took it: no pause, the circuit closed, and no limit to pace by, or a
        limit with a call's worth now and nothing of the provider in line at the last
        count of the queue. Otherwise the job queues, in its owner's fair place: a paced
        provider's jobs go through the queue, in their owners' fair order."""
        pace = self.paces.get(provider)
        breaker = self.breakers.get(provider)
        if pace is None or breaker is None:
            return True
        now = self.clock()
        if pace.paused_until > now or breaker.state is not Circuit.CLOSED:
            return False
        if not pace.limited:
            return True
        return self._none_queued(provider) and pace.wait(0, now)[0] <= 0

    def tokens_counted(self, provider: str) -> bool:
        """Say whether a call's tokens must be estimated for ``admit`` (a token limit)."""
        pace = self.paces.get(provider)
        return pace is not None and pace.counts_tokens

    # -- after a call ----------------------------------------------------------------------

    def answered(self, provider: str, limits: RateLimits | None) -> None:
        """The provider answered (whatever the answer said of the contract)."""
        pace, breaker = self.paces.get(provider), self.breakers.get(provider)
        if pace is None or breaker is None:
            return
        now = self.clock()
        pace.answered(now)
        self._unnamed.pop(provider, None)
        if limits is not None:
            self._learn(provider, pace, limits, now)
        if breaker.succeeded():
            log.info("circuit closed", extra={"provider": provider})
            self._tell(provider, circuit="closed")

    def refused(
        self,
        provider: str,
        capacity: str,
        retry_after: float | None,
        limits: RateLimits | None,
        *,
        waits: int = 0,
    ) -> float:
        """The provider said not now (``capacity``: ``rate_limited`` or ``overloaded``);
        return the seconds the attempt waits before it is sent again: what it asked for
        (at most ``max_wait``), or a jittered backoff after ``waits`` earlier waits."""
        pace, breaker = self.paces.get(provider), self.breakers.get(provider)
        now = self.clock()
        config = self.config
        if retry_after is not None:
            wait = min(max(retry_after, 0.0), config.max_wait)
        else:
            wait = backoff(waits, base=config.backoff_base, cap=config.backoff_max, rand=self.rand)
        if pace is None or breaker is None:
            return wait
        if limits is not None:
            self._learn(provider, pace, limits, now)
        if capacity == "rate_limited":
            if retry_after is None:
                # No time named: the whole provider backs off, and paces by a halved rate.
                n = self._unnamed.get(provider, 0)
                self._unnamed[provider] = n + 1
                pause = backoff(n, base=config.backoff_base, cap=config.backoff_max, rand=self.rand)
                if not pace.limited or pace.known.estimated_rps is not None:
                    pace.refused_unannounced(now)
                wait = max(wait, pause)
            self._pause(provider, pace, now + wait, capacity)
        elif retry_after is not None:
            self._pause(provider, pace, now + wait, capacity)
        if capacity in config.breaker_counts and breaker.failed(now):
            self._opened(provider, breaker, capacity)
        return wait

    def failed(self, provider: str, kind: str) -> None:
        """A call failed (``kind``: ``failure`` or ``timeout``): the breaker counts it if
        ``breaker_counts`` says so; any other definite failure (a refused request, a
        contract violation) is no sign of the provider's health and resets nothing."""
        breaker = self.breakers.get(provider)
        if breaker is None or kind not in self.config.breaker_counts:
            return
        now = self.clock()
        if breaker.failed(now):
            self._opened(provider, breaker, kind)

    # -- what the processes share ------------------------------------------------------

    def members(self) -> list[str]:
        """The providers this process paces by a known limit (it takes a slice of each)."""
        return [name for name, pace in self.paces.items() if pace.limited]

    def take_news(self) -> list[CapacityNews]:
        """What the others must hear since the last look (the sharing loop sends it)."""
        news, self.news = list(self.news.values()), {}
        return news

    def requeue(self, news: Sequence[CapacityNews]) -> None:
        """Keep news that could not be sent for the next look (newer news wins a field)."""
        for item in news:
            newer = self.news.get(item.provider)
            if newer is None:
                self.news[item.provider] = item
                continue
            fields = {
                f.name: getattr(item, f.name)
                for f in dataclasses.fields(item)
                if getattr(newer, f.name) is None
            }
            self.news[item.provider] = dataclasses.replace(newer, **fields)

    def shared(self, rows: Sequence[SharedCapacity]) -> None:
        """Take what every process knows: pauses, circuits, announced limits, slices."""
        now = self.clock()
        for row in rows:
            pace, breaker = self.paces.get(row.provider), self.breakers.get(row.provider)
            if pace is None or breaker is None:
                continue
            if row.paused_until is not None:
                pace.pause(row.paused_until.timestamp(), row.pause_reason or "paused")
            if row.circuit_until is not None:
                breaker.opened_elsewhere(row.circuit_until.timestamp(), now)
            elif row.provider not in self.news:
                breaker.closed_elsewhere()
            pace.learn(row.requests_per_minute, row.tokens_per_minute, now)
            pace.set_share(row.members if pace.limited else 1, now)

    def states(self) -> list[ProviderState]:
        """Every provider's capacity as this process sees it."""
        now = self.clock()
        out = []
        for name, pace in self.paces.items():
            breaker = self.breakers[name]
            is_open = breaker.state is not Circuit.CLOSED
            rps = pace.requests.rate if pace.requests is not None else None
            tps = pace.tokens.rate if pace.tokens is not None else None
            out.append(
                ProviderState(
                    provider=name,
                    circuit=breaker.state.value,
                    circuit_until=_when(breaker.until) if is_open else None,
                    paused_until=_when(pace.paused_until) if pace.paused_until > now else None,
                    pause_reason=pace.pause_reason if pace.paused_until > now else None,
                    requests_per_minute=None if rps is None else round(rps * 60, 3),
                    tokens_per_minute=None if tps is None else round(tps * 60, 3),
                    share=pace.share,
                    in_flight=pace.in_flight,
                    consecutive_failures=breaker.failures,
                )
            )
        return out

    # -- inside ------------------------------------------------------------------------

    def _learn(self, provider: str, pace: Pace, limits: RateLimits, now: float) -> None:
        if pace.announced(limits, now):
            self._tell(
                provider,
                requests_per_minute=limits.requests_limit,
                tokens_per_minute=limits.tokens_limit,
            )
        spent = [
            reset
            for remaining, reset in (
                (limits.requests_remaining, limits.requests_reset_s),
                (limits.tokens_remaining, limits.tokens_reset_s),
            )
            if remaining == 0 and reset
        ]
        if spent:
            # The bucket is empty: nothing goes until it has one call's worth again.
            rps = pace.known.requests_per_s(now)
            until = now + min(min(spent), 1.0 / rps if rps else min(spent))
            pace.pause(until, "paced")

    def _pause(self, provider: str, pace: Pace, until: float, reason: str) -> None:
        if pace.pause(until, reason):
            self._tell(provider, paused_until=_when(until), pause_reason=reason)

    def _opened(self, provider: str, breaker: Breaker, kind: str) -> None:
        """This process's breaker opened ``provider``'s circuit: say so, and tell the others."""
        log.warning(
            "circuit opened",
            extra={
                "provider": provider,
                "failures": breaker.failures,
                "last": kind,
                "until": _when(breaker.until).isoformat(),
            },
        )
        self._tell(provider, circuit="open", until=breaker.until)

    def _tell(self, provider: str, **news: object) -> None:
        """Merge ``news`` into what the others will hear of ``provider``."""
        before = self.news.get(provider) or CapacityNews(provider)
        merged = {k: v for k, v in news.items() if v is not None}
        if "until" in merged:
            merged["circuit_until"] = merged.pop("until")
        self.news[provider] = dataclasses.replace(before, **merged)  # type: ignore[arg-type]


def _when(at: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(at, dt.UTC)
