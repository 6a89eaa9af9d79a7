"""ReplayLoop: finds due messages in the retry store and hands them to workers that redeliver them.

One seek task reads due keys (iterate upper bound = now) from a cursor that starts at the oldest key
(R6), and hands them through a bounded queue to N worker tasks, each running a Redelivery (deliver,
then acknowledge, reschedule or dead-letter). Seeking, waking and idleness are the due-queue engine's
(storage.due_loop); the keys handed out are claimed in the store's queue until they are finished, so
the floor never passes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from rocksidecar.storage.due_loop import MAX_IDLE_S, DueLoop, Sleep, observe
from rocksidecar.storage.errors import StorageError

from .redelivery import (
    DEAD,
    DELIVERED,
    QUARANTINED,
    RESCHEDULED,
    Deliver,
    DeliverBatch,
    PartlyStored,
    PolicyFor,
    Redelivery,
)
from .store import RetryStore

log = logging.getLogger(__name__)

STORE_RETRY_S = 1.0  # while the store fails writes (or reads), the first retry after this, then twice as long
BATCH_MAX = 32  # records per deliver_batch call
STORE_ERROR, ERROR = "store_error", "error"
OUTCOMES = (DELIVERED, RESCHEDULED, DEAD, QUARANTINED, STORE_ERROR, ERROR)


class ReplayLoop(DueLoop):
    """Redelivers due messages with ``workers`` concurrent calls to ``deliver``.

    ``deliver`` raises to report failure; an exception whose ``redeliverable`` attribute is False
    dead-letters the message at once, any other climbs the ladder of ``policy_for(record.type)``.
    With ``deliver_batch`` each worker takes up to ``batch_max`` queued messages per call instead
    (e.g. the producer's send_batch). The queue holds ``queue_size`` handed-out keys (default: two
    per worker slot). ``on_replayed(outcome)`` is called once per handled key with one of OUTCOMES.
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
        deliver_batch: DeliverBatch | None = None,
        batch_max: int = BATCH_MAX,
    ) -> None:
        if workers < 1 or batch_max < 1:
            raise ValueError("workers and batch_max must be >= 1")
        super().__init__(store.queue, "retry", sleep, read_retry_s=store_retry_s)
        self._store = store
        self._inflight = store.queue.claims  # queued or being delivered: never handed out twice
        self._redelivery = Redelivery(store, deliver, policy_for, deliver_batch)
        self._batch_max = batch_max if deliver_batch is not None else 1
        self._workers = workers
        self._queue_size = queue_size or 2 * workers * self._batch_max
        self._on_replayed = on_replayed
        self._store_retry_s = store_retry_s
        self._queue: asyncio.Queue[tuple[bytes, bytes]] = asyncio.Queue(self._queue_size)
        self._space = asyncio.Event()
        self._settled = asyncio.Event()
        self._closing = False
        self._paused = False  # the store failed writes and the seek loop hands nothing out
        self._pause_s = store_retry_s  # doubles per failed probe, up to MAX_IDLE_S
        self._worker_tasks: list[asyncio.Task[None]] = []

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def is_in_flight(self, key: bytes) -> bool:
        """A worker has ``key`` (or it is queued for one), or a purge is deleting it (its claim keeps the
        workers off it): a purge leaves it alone."""
        return key in self._inflight

    async def start(self) -> None:
        self._start_seek()  # from the floor (rocksdict holds the GIL while it iterates: no thread)
        self._worker_tasks = [
            asyncio.create_task(self._worker(), name=f"retry-worker-{i}") for i in range(self._workers)
        ]

    async def close(self, grace_s: float = 0.0) -> None:
        """Stop seeking; give deliveries in progress ``grace_s`` to finish, then cancel them.

        Keys not finished stay in the store and are replayed after the next start.
        """
        # From here on the floor stays put: the queued keys dropped below are not acknowledged, and a
        # worker finding _inflight empty must not move the floor past them (it is persisted on close).
        self._closing = True
        await self._stop_seek()
        while not self._queue.empty():
            key, _ = self._queue.get_nowait()
            self._inflight.release((key,))
        if grace_s > 0 and self._inflight:
            self._settled.clear()
            await self._race(self._settled, grace_s)
        for task in self._worker_tasks:
            task.cancel()
        await asyncio.gather(*self._worker_tasks, return_exceptions=True)
        self._inflight.clear()

    async def offer(self, rows: Sequence[tuple[bytes, bytes]]) -> int:
        """Hand out pending (key, value) rows now, whatever their due time (replay on recovery, replay
        now); rows already in flight are skipped. Waits for queue space. Returns how many were taken.

        The rows must have been read from the store in the same step that calls this (no await in
        between), so none of them was acknowledged meanwhile.
        """
        taken = [(key, raw) for key, raw in rows if self._inflight.take(key)]
        put = 0
        try:
            for item in taken:
                await self._queue.put(item)
                put += 1
        finally:
            self._inflight.release(key for key, _ in taken[put:])  # cancelled while waiting: give back
        return put

    # --- seeking ------------------------------------------------------------------------------
    def _busy(self) -> bool:
        return len(self._inflight) > 0

    async def _run(self) -> None:
        while True:
            if not self._store.healthy and not await self._probe():
                # Delivering now would send messages whose acks cannot be written, again and again
                # (a duplicate storm on a full disk): hand nothing out until a probe write succeeds.
                now = self._store.now_ms()
                await self._wait_until(now + round(self._pause_s * 1000), now)
                self._pause_s = min(self._pause_s * 2, MAX_IDLE_S)
                continue
            free = self._queue_size - self._queue.qsize()
            if free <= 0:
                self._space.clear()
                await self._space.wait()
                continue
            now = self._store.now_ms()
            rows = self._store.due(self._cursor, now, free)
            for key, raw in rows:
                if self._inflight.take(key):
                    self._queue.put_nowait((key, raw))
            if rows:
                self._cursor = rows[-1][0] + b"\x00"
            if len(rows) == free:
                continue  # the queue bound cut the pass short: more may be due
            self._store.queue.advance_floor(self._cursor)  # never past a key in flight
            await self._wait_until(self._next_due_ms(), now)

    async def _probe(self) -> bool:
        """Whether the store writes again; says once when replay pauses and once when it resumes."""
        try:
            await self._store.probe()
        except StorageError as exc:
            self._pause(exc)
            return False
        if self._paused:
            log.warning("retry store writes again, replay resumed")
        self._paused = False
        self._pause_s = self._store_retry_s
        return True

    def _pause(self, exc: StorageError) -> None:
        if not self._paused:  # once per outage, however many batches and probes fail
            self._paused = True
            log.error("retry store cannot write, replay paused until it can: %s", exc)

    # --- delivering ---------------------------------------------------------------------------
    async def _worker(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self._batch_max and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self._space.set()
            if not self._store.healthy:  # its ack could not be written: back to the store, untried
                self._inflight.release(key for key, _ in batch)
                self._on_new_key(min(key for key, _ in batch))
                self._maybe_idle()
                continue
            try:
                outcomes = await self._redelivery.run(batch)
            except StorageError as exc:
                self._pause(exc)  # the seek loop probes the store before handing them out again
                # What was stored before the failure stands (delivered and acknowledged: not sent again).
                done = exc.outcomes if isinstance(exc, PartlyStored) else []
                outcomes = done + [STORE_ERROR] * (len(batch) - len(done))
                self._inflight.release(key for key, _ in batch)
                self._on_new_key(min(key for key, _ in batch))  # rewind: they are handed out again
            except Exception:
                log.exception("replay failed unexpectedly; %d messages stay in the store", len(batch))
                outcomes = [ERROR] * len(batch)
                # Still in flight (the floor stays below them) for a pause, then handed out again.
                await self._sleep(self._store_retry_s)
                self._on_new_key(min(key for key, _ in batch))
            finally:
                self._inflight.release(key for key, _ in batch)
                if not self._inflight:
                    self._settled.set()
                    if not self._closing:  # everything handed out is done
                        self._store.queue.advance_floor(self._cursor)
                self._maybe_idle()
            for outcome in outcomes:
                self._report(outcome)

    def _report(self, outcome: str) -> None:
        observe(self._on_replayed, outcome, "on_replayed")
