"""RecoveryReplay: when what pending messages wait for is healthy again (a broker answers, a topic's
route appears) or an operator asks, bring them forward and replay them now instead of at their rung.

A round walks the pending keys from the store's floor, in key order, and hands each message (of the
round's topics, or all) to the replay loop's workers at most ``rate_per_s`` per second. Each message is
tried at most once per round: one that fails again climbs the ladder as usual (its next rung's key may
sort ahead of the walk: the round finds it again and leaves it), and so does one the ladder tried first,
after the round started (its failure after the recovery is as recent as the round's would be). A round
stops early once its ``healthy`` check says the cause is back (e.g. the broker is isolated again).
Triggers that arrive during a round are merged into the next one.

"Tried since the round started" is read from the record itself, its last failure's time (history) on the
store clock, which never runs backwards: the round keeps nothing per message (a set of the ids it handed
out held ~160 bytes each, 1 GB and more for the 10 M messages a long outage leaves). A message that
failed in the very millisecond a round started counts as tried in it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field

from rocksidecar.storage.tasks import stop_task

from .keys import PENDING_CF
from .record import CorruptRecordError, decode_record
from .replay import ReplayLoop
from .store import RetryStore

log = logging.getLogger(__name__)

CHUNK = 256  # rows read per step (one synchronous scan)
RATE_PER_S = 50_000.0
# A route appearing for a new topic triggers a round, and clients choose topics: what one round holds of
# its triggers must not grow with them. It keeps the first MAX_REASONS reasons (the round's result, the
# log line) and counts the rest; past MAX_TOPICS topics it replays every topic (more than was asked,
# paced by the same rate, never a waiting message left out).
MAX_REASONS = 20
MAX_TOPICS = 1_000


@dataclass
class _Request:
    topics: set[str] | None = field(default_factory=set)  # None: every topic
    reasons: list[str] = field(default_factory=list)  # the first MAX_REASONS
    more_reasons: int = 0  # the others, only counted
    # The round stops when one of these is False; None once a trigger without a check (an operator's
    # "replay now", a route that appeared) joined: another trigger's check must not stop that one's round.
    checks: list[Callable[[], bool]] | None = field(default_factory=list)

    def merge(self, topic: str | None, reason: str, healthy: Callable[[], bool] | None) -> None:
        if topic is None or self.topics is None:
            self.topics = None
        elif topic in self.topics or len(self.topics) < MAX_TOPICS:
            self.topics.add(topic)
        else:
            self.topics = None
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(reason)
        else:
            self.more_reasons += 1
        if healthy is None:
            self.checks = None
        elif self.checks is not None:
            self.checks.append(healthy)

    def stopped(self) -> bool:
        return self.checks is not None and not all(check() for check in self.checks)

    def told(self) -> tuple[str, ...]:
        """The reasons kept, then how many more there were."""
        more = (f"and {self.more_reasons} more",) if self.more_reasons else ()
        return (*self.reasons, *more)


@dataclass(frozen=True, slots=True)
class RoundResult:
    handed_out: int
    scanned: int
    stopped_early: bool
    reasons: tuple[str, ...]


@dataclass(eq=False)
class RecoveryReplay:
    store: RetryStore
    loop: ReplayLoop
    _: KW_ONLY
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rate_per_s: float = RATE_PER_S
    chunk: int = CHUNK
    on_round: Callable[[RoundResult], None] | None = None
    rounds: list[RoundResult] = field(default_factory=list, init=False)  # the last few, newest last
    _next: _Request | None = field(default=None, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _done: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.rate_per_s <= 0 or self.chunk < 1:
            raise ValueError("rate_per_s must be > 0 and chunk >= 1")
        self._done.set()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def trigger(
        self, topic: str | None = None, *, reason: str = "", healthy: Callable[[], bool] | None = None
    ) -> None:
        """Replay the pending messages of ``topic`` (None: all) now. ``healthy()`` False stops the round."""
        if self._closed or self.store.pending_count <= 0:
            return  # closing, or nothing waits (the common case when a route appears for a new topic)
        if self._next is None:
            self._next = _Request()
        self._next.merge(topic, reason, healthy)
        self._done.clear()
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="retry-recovery")

    async def wait(self) -> None:
        """Return once no round is running or requested (tests, the admin API)."""
        await self._done.wait()

    async def close(self) -> None:
        self._closed = True  # a send that succeeds while the service stops must not start a round
        self._next = None
        await stop_task(self._task)
        self._task = None
        self._done.set()

    async def _run(self) -> None:
        try:
            while self._next is not None:
                request, self._next = self._next, None
                try:
                    result = await self._round(request)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("replay on recovery failed; the ladder still replays the messages")
                    continue
                self.rounds = [*self.rounds[-9:], result]
                if self.on_round is not None:
                    self.on_round(result)
        finally:
            self._done.set()

    async def _round(self, request: _Request) -> RoundResult:
        started_ms = self.store.now_ms()  # a record that failed since was tried in this round
        cursor = self.store.floor
        handed = scanned = 0
        budget_at = self.clock()  # token bucket: time at which the next message may go
        while True:
            if request.stopped():
                return RoundResult(handed, scanned, True, request.told())
            rows = self.store.kv.scan(PENDING_CF, lower=cursor, limit=self.chunk)
            if not rows:
                return RoundResult(handed, scanned, False, request.told())
            cursor = rows[-1][0] + b"\x00"
            scanned += len(rows)
            picked = [(key, raw) for key, raw in rows if _wanted(raw, request.topics, started_ms)]
            if picked:
                handed += await self.loop.offer(picked)  # no await between the scan and this claim
            if len(rows) < self.chunk:  # that was the end of the store
                return RoundResult(handed, scanned, False, request.told())
            if not picked:
                continue
            budget_at = max(budget_at, self.clock()) + len(picked) / self.rate_per_s
            wait = budget_at - self.clock()
            if wait > 0:
                await self.sleep(wait)


def _wanted(raw: bytes, topics: set[str] | None, started_ms: int) -> bool:
    """Whether a round that started at ``started_ms`` (store clock) takes this pending value: of its
    topics, and not tried since it started (by this round, or by the ladder first)."""
    try:
        record = decode_record(raw)
    except CorruptRecordError:
        # A round of every topic hands it out: the workers quarantine it (out of pending, never walked
        # again). A topic's round cannot tell its topic: the ladder hands it out when due.
        return topics is None
    if topics is not None and record.topic not in topics:
        return False
    # The newest failure is last (RetryRecord.failed appends; the history keeps the newest ones).
    return not record.history or record.history[-1][0] < started_ms
