"""ReplayLoop: finds due messages in the retry store and redelivers them through an injected callable.

One seek task reads due keys (iterate upper bound = now) from a cursor that starts at the oldest key
(R6), and hands them through a bounded queue to N worker tasks. A worker calls ``deliver(record)``:
success deletes the key; failure writes the next rung (or a dead letter) and deletes the old key in
one batch. The seek task sleeps until the earliest due key or until a spool brings an earlier one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType

from retry.keys import parse_pending_key
from retry.policy import RetryPolicy
from retry.record import CorruptRecordError, RetryRecord, decode_record
from retry.store import RetryStore
from storage.errors import StorageError

log = logging.getLogger(__name__)

Deliver = Callable[[RetryRecord], Awaitable[None]]
PolicyFor = Callable[[str], RetryPolicy]
Sleep = Callable[[float], Awaitable[None]]

MAX_IDLE_S = 30.0  # longest sleep: a wall-clock step forward is noticed within this
STORE_RETRY_S = 1.0  # while the store fails writes, one pass per this many seconds
ERROR_TEXT_LIMIT = 500

DELIVERED, RESCHEDULED, DEAD, QUARANTINED, STORE_ERROR, ERROR = (
    "delivered",
    "rescheduled",
    "dead",
    "quarantined",
    "store_error",
    "error",
)


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:ERROR_TEXT_LIMIT]


class ReplayLoop:
    """Redelivers due messages with ``workers`` concurrent calls to ``deliver``.

    ``deliver`` raises to report failure; an exception whose ``retriable`` attribute is False
    dead-letters the message at once, any other climbs the ladder of ``policy_for(record.type)``.
    ``on_replayed(outcome)`` is called once per handled key (delivered, rescheduled, dead,
    quarantined, store_error, error), for metrics.
    """

    def __init__(
        self,
        store: RetryStore,
        deliver: Deliver,
        policy_for: PolicyFor,
        *,
        workers: int = 8,
        queue_size: int | None = None,
        sleep: Sleep = asyncio.sleep,
        on_replayed: Callable[[str], None] | None = None,
        store_retry_s: float = STORE_RETRY_S,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self._store = store
        self._deliver = deliver
        self._policy_for = policy_for
        self._workers = workers
        self._queue_size = queue_size or 2 * workers
        self._sleep = sleep
        self._on_replayed = on_replayed
        self._store_retry_s = store_retry_s
        self._queue: asyncio.Queue[tuple[bytes, bytes]] = asyncio.Queue(self._queue_size)
        self._inflight: set[bytes] = set()  # queued or being delivered: never handed out twice
        self._scan_from = b""  # start() moves it to the store's floor
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._idle = asyncio.Event()
        self._settled = asyncio.Event()
        self._waiting = False
        self._sleep_until_ms: int | None = None
        self._seek_task: asyncio.Task[None] | None = None
        self._worker_tasks: list[asyncio.Task[None]] = []
        self.failure: BaseException | None = None

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    async def start(self) -> None:
        # R6: start at the oldest live key, not at "now" as the seed did. The store's persisted floor
        # is at or below it, so the first seek does not cross the tombstones of everything delivered
        # before a restart (rocksdict holds the GIL while it iterates: a thread would not help).
        self._scan_from = self._store.floor
        self._store.add_listener(self._on_new_key)
        self._seek_task = asyncio.create_task(self._run(), name="retry-seek")
        self._seek_task.add_done_callback(self._on_seek_done)
        self._worker_tasks = [
            asyncio.create_task(self._worker(), name=f"retry-worker-{i}") for i in range(self._workers)
        ]

    async def close(self, grace_s: float = 0.0) -> None:
        """Stop seeking; give deliveries in progress ``grace_s`` to finish, then cancel them.

        Keys not finished stay in the store and are replayed after the next start.
        """
        self._store.remove_listener(self._on_new_key)
        if self._seek_task is not None:
            self._seek_task.cancel()
            await asyncio.gather(self._seek_task, return_exceptions=True)
        while not self._queue.empty():
            key, _ = self._queue.get_nowait()
            self._inflight.discard(key)
        if grace_s > 0 and self._inflight:
            self._settled.clear()
            await self._race(self._settled, grace_s)
        for task in self._worker_tasks:
            task.cancel()
        await asyncio.gather(*self._worker_tasks, return_exceptions=True)
        self._inflight.clear()

    async def __aenter__(self) -> ReplayLoop:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def wait_idle(self) -> None:
        """Return once nothing is in flight and nothing in the store is due (tests, drain)."""
        while not self._is_idle():
            if self.failure is not None:
                raise RuntimeError("the replay loop died") from self.failure
            self._idle.clear()
            await self._idle.wait()

    # --- seeking ------------------------------------------------------------------------------
    def _on_new_key(self, key: bytes) -> None:
        """A key was committed (spool, reschedule, redrive, or rewound after a store error)."""
        # A key behind the cursor (same millisecond, a redrive, a rewind) moves the cursor back.
        self._scan_from = min(self._scan_from, key)
        if self._waiting and (
            self._sleep_until_ms is None or parse_pending_key(key).due_ms < self._sleep_until_ms
        ):
            self._wake.set()

    async def _run(self) -> None:
        while True:
            if not self._store.healthy:
                await self._sleep(self._store_retry_s)  # the next pass probes the store again
            free = self._queue_size - self._queue.qsize()
            if free <= 0:
                self._space.clear()
                await self._space.wait()
                continue
            self._wake.clear()
            now = self._store.now_ms()
            rows = self._store.due(self._scan_from, now, free)
            for key, raw in rows:
                if key not in self._inflight:
                    self._inflight.add(key)
                    self._queue.put_nowait((key, raw))
            if rows:
                self._scan_from = rows[-1][0] + b"\x00"
            if len(rows) == free:
                continue  # the queue bound cut the pass short: more may be due
            self._store.advance_floor(min([self._scan_from, *self._inflight]))
            await self._wait_until(self._next_due_ms(), now)

    def _next_due_ms(self) -> int | None:
        following = self._store.first_pending(self._scan_from)
        if following is None:
            return None
        try:
            return parse_pending_key(following).due_ms
        except ValueError:
            # Only this process writes pending keys, so this is damage: do not spin on it. Passes every
            # MAX_IDLE_S still hand it out (and quarantine it) once it sorts below the due bound.
            log.error("unparseable key %r in the retry store", following)
            return None

    async def _wait_until(self, due_ms: int | None, now: int) -> None:
        timeout = MAX_IDLE_S if due_ms is None else min(max(due_ms - now, 0) / 1000, MAX_IDLE_S)
        self._sleep_until_ms = due_ms
        self._waiting = True
        self._maybe_idle()
        try:
            await self._race(self._wake, timeout)
        finally:
            self._waiting = False

    async def _race(self, event: asyncio.Event, timeout_s: float) -> None:
        """Wait for ``event`` or for ``timeout_s`` on the injected sleep, whichever comes first."""
        if event.is_set():
            return
        waiter = asyncio.create_task(event.wait())
        sleeper = asyncio.ensure_future(self._sleep(timeout_s))
        try:
            await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            sleeper.cancel()

    def _is_idle(self) -> bool:
        if self.failure is not None:
            return False
        return (
            self._waiting
            and not self._inflight
            and not self._wake.is_set()
            and (self._sleep_until_ms is None or self._sleep_until_ms > self._store.now_ms())
        )

    def _maybe_idle(self) -> None:
        if self._is_idle():
            self._idle.set()

    def _on_seek_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.failure = task.exception()
            log.error("retry seek loop died; replay stopped", exc_info=self.failure)
        self._idle.set()  # wake wait_idle callers so they see the failure

    # --- delivering ---------------------------------------------------------------------------
    async def _worker(self) -> None:
        while True:
            key, raw = await self._queue.get()
            self._space.set()
            try:
                outcome = await self._replay(key, raw)
            except StorageError as exc:
                log.error("retry store write failed for %r, will retry: %s", key, exc)
                outcome = STORE_ERROR
                self._inflight.discard(key)
                self._on_new_key(key)  # rewind so the key is handed out again
            except Exception:
                log.exception("replay of %r failed unexpectedly; it stays in the store", key)
                outcome = ERROR
            finally:
                self._inflight.discard(key)
                if not self._inflight:
                    self._settled.set()
                    self._store.advance_floor(self._scan_from)  # everything handed out is done
                self._maybe_idle()
            self._report(outcome)

    async def _replay(self, key: bytes, raw: bytes) -> str:
        try:
            record = decode_record(raw)
        except CorruptRecordError as exc:
            await self._store.quarantine(key, raw, f"corrupt value: {exc}")  # R7
            return QUARANTINED
        try:
            await self._deliver(record)
        except Exception as exc:
            return await self._failed(key, record, exc)
        await self._store.ack(key)
        return DELIVERED

    async def _failed(self, key: bytes, record: RetryRecord, exc: Exception) -> str:
        policy = self._policy_for(record.type)
        now = self._store.now_ms()
        error = describe(exc)
        failed = record.failed(now, error)
        if not getattr(exc, "retriable", True):
            await self._store.bury(key, failed, f"not retriable: {error}")
            return DEAD
        if policy.exhausted(failed.retry_count):
            await self._store.bury(key, failed, f"retries exhausted after {failed.retry_count}: {error}")
            return DEAD
        await self._store.reschedule(key, failed, now + round(policy.delay_s(failed.retry_count) * 1000))
        return RESCHEDULED

    def _report(self, outcome: str) -> None:
        if self._on_replayed is not None:
            try:
                self._on_replayed(outcome)
            except Exception:
                log.exception("on_replayed hook failed")
