"""GroupCommitWriter: gathers concurrent writers into one WriteBatch and one WAL sync.

A caller's ``await write(ops)`` returns only after the batch holding its ops was written and synced;
a failed write or sync fails every caller of that batch and marks the writer unhealthy. A batch applied
before its sync failed fails them with UnsyncedError (in the store, not durable): what counts keys
follows it, what acknowledges does not.

``write(ops, lazy=True)`` is for writes nobody waits on for a due time (Rock-DMQ's drops of the other
replicas' copies): they are applied without a sync of their own, one lazy batch (at most max_batch_ops,
or one caller's ops) after each ordinary batch's write, and return with its WAL sync (which covers
everything written before it); with no ordinary write queued they are applied at once and sync alone
after ``ride_s`` if none comes. So a batch of drops neither takes a WAL sync of its own nor stands in
front of a "sent" record or a schedule: those are written first, and wait at most for one lazy batch's
write (no sync) before their own sync.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Callable, Sequence

from .errors import StorageError, UnsyncedError
from .kv import KV, Op, holds
from .reserve import DiskReserve

log = logging.getLogger(__name__)

# At about 1 µs per op inside rocksdict (GIL held), 2 048 ops keep one batch near 2 ms of
# event-loop stall while still amortising one WAL sync over thousands of messages.
MAX_BATCH_OPS = 2048
# A lazy write waits at most this long for an ordinary synced write to ride on, then syncs alone.
RIDE_S = 0.05


class SyncStrategy(enum.Enum):
    """Where the synced write runs. Measured on the project's 2-core machine (bench/RESULTS.md):

    rocksdict holds the GIL for all of ``Rdict.write`` (memtable insert *and* the fsync when
    sync=True), so running that write in a thread does not free the event loop; it only adds a
    thread hop. ``flush_wal(sync=True)`` does release the GIL. SPLIT therefore applies the batch
    inline without sync (CPU only) and runs the WAL sync in a thread: RocksDB documents Write()
    followed by SyncWAL() as durable, with the difference that the data is readable before the
    sync returns. Nobody is acknowledged before the sync, so that difference is harmless here.
    """

    SPLIT = "split"  # write(sync=False) inline, then sync_wal() in a thread (default)
    INLINE = "inline"  # write(sync=True) on the event loop
    THREAD = "thread"  # write(sync=True) in asyncio.to_thread


class GroupCommitWriter:
    """Durable writes for many concurrent callers at the cost of one sync per batch."""

    def __init__(
        self,
        kv: KV,
        *,
        max_batch_ops: int = MAX_BATCH_OPS,
        strategy: SyncStrategy = SyncStrategy.SPLIT,
        reserve: DiskReserve | None = None,
        ride_s: float = RIDE_S,
    ) -> None:
        self._kv = kv
        self.reserve = reserve  # drain mode on a full disk: admits only batches that drain
        self._max_batch_ops = max_batch_ops
        self._strategy = strategy
        self._queue: deque[tuple[Sequence[Op], asyncio.Future[None]]] = deque()
        self._lazy: deque[tuple[Sequence[Op], asyncio.Future[None]]] = deque()  # after every _queue item
        self._riding: list[asyncio.Future[None]] = []  # lazy writes applied, waiting for a WAL sync
        self._ride_s = ride_s
        self._ride_until = 0.0  # loop time: the riders sync alone then if no ordinary write came
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # A store opened read-only on a full disk (storage.rocks) starts unhealthy.
        reason: str | None = getattr(kv, "read_only_reason", None)
        self.healthy = reason is None
        self.last_error: str | None = reason
        self.batches = 0
        self.ops_written = 0

    async def write(self, ops: Sequence[Op], *, lazy: bool = False) -> None:
        """Apply ``ops`` atomically and durably; ``lazy``: after the ordinary writes queued, and with no
        WAL sync of its own unless none comes within ``ride_s`` (see the module's docstring).

        Raises:
            UnsyncedError: the batch holding these ops was applied, but its WAL sync failed.
            StorageError: the batch holding these ops was not written.
        """
        if self._closed:
            raise StorageError("the store is closed")
        if not ops:
            return
        if self.reserve is not None:
            self.reserve.check()
            if not self.reserve.admits(ops):
                raise self.reserve.refusal()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self._lazy if lazy else self._queue).append((ops, future))
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="group-commit")
            self._task.add_done_callback(self._on_task_done)
        await future

    async def close(self) -> None:
        """Finish every write already queued, then stop."""
        self._closed = True
        if self._task is not None:
            self._wake.set()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            if self._queue:  # ordinary writes first
                batch = self._refuse_new_work(self._take_batch(self._queue))
                if batch:
                    # The next lazy batch is applied after this one's write, before its sync, and rides on
                    # it: ordinary writes coming all the time never starve the lazy ones.
                    error = await self._commit(
                        [op for item_ops, _ in batch for op in item_ops], self._apply_lazy
                    )
                    riders, self._riding = self._riding, []
                    self._settle([future for _, future in batch], error)
                    self._settle(riders, _unsynced(error))
            elif self._lazy:
                self._apply_lazy()
            elif self._riding and not self._closed and self._loop_time() < self._ride_until:
                await self._sleep_for_work(self._ride_until - self._loop_time())
            elif self._riding:  # no ordinary write came in time (or closing): a sync of their own
                riders, self._riding = self._riding, []
                self._settle(riders, _unsynced(await self._commit([])))
            elif self._closed:
                return
            else:
                await self._sleep_for_work(None)

    def _apply_lazy(self) -> StorageError | None:
        """Write the next lazy batch (if any) without a sync; its callers return with the next sync. A
        failed write fails them, and is returned: it fails the ordinary batch it was to ride on too, as a
        failed write in one WriteBatch would (RocksDB takes no more writes until the store is reopened)."""
        if not self._lazy:
            return None
        batch = self._refuse_new_work(self._take_batch(self._lazy))
        if not batch:
            return None
        error = self._apply([op for item_ops, _ in batch for op in item_ops])
        futures = [future for _, future in batch]
        if error is not None:
            self._settle(futures, error)
            return error
        if not self._riding:
            self._ride_until = self._loop_time() + self._ride_s
        self._riding += futures
        return None

    async def _sleep_for_work(self, timeout_s: float | None) -> None:
        """Until a write is queued (or close), or ``timeout_s`` (None: no limit)."""
        self._wake.clear()
        if self._queue or self._lazy:
            return
        try:
            async with asyncio.timeout(timeout_s):
                await self._wake.wait()
        except TimeoutError:
            pass

    @staticmethod
    def _loop_time() -> float:
        return asyncio.get_running_loop().time()

    @staticmethod
    def _settle(futures: list[asyncio.Future[None]], error: StorageError | None) -> None:
        for future in futures:
            if future.done():  # the caller was cancelled; its ops were still written
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

    def _refuse_new_work(
        self, batch: list[tuple[Sequence[Op], asyncio.Future[None]]]
    ) -> list[tuple[Sequence[Op], asyncio.Future[None]]]:
        """Work queued before a write failed for lack of space must not take the reserve's room either."""
        reserve = self.reserve
        if reserve is None or not reserve.draining:
            return batch
        kept = []
        for ops, future in batch:
            if reserve.admits(ops):
                kept.append((ops, future))
            elif not future.done():
                future.set_exception(reserve.refusal())
        return kept

    def _take_batch(
        self, queue: deque[tuple[Sequence[Op], asyncio.Future[None]]]
    ) -> list[tuple[Sequence[Op], asyncio.Future[None]]]:
        batch = [queue.popleft()]
        size = len(batch[0][0])
        while queue and size + len(queue[0][0]) <= self._max_batch_ops:
            item = queue.popleft()
            batch.append(item)
            size += len(item[0])
        return batch

    async def _commit(
        self, ops: list[Op], before_sync: Callable[[], StorageError | None] | None = None
    ) -> StorageError | None:
        """Write ``ops`` (none: only the riders'), call ``before_sync``, sync the WAL; the error, if any
        (UnsyncedError: ``ops`` were applied)."""
        applied = synced_write = False
        try:
            no_slowdown = self._prepare()
            if self._strategy is SyncStrategy.SPLIT or not ops:
                if ops:
                    self._kv.write(ops, sync=False, no_slowdown=no_slowdown)
                applied = True  # readable from here on, whatever fails below
                if before_sync is not None and (lazy_error := before_sync()) is not None:
                    raise lazy_error  # it failed the batch it rode on, as in one WriteBatch
                if self._strategy is SyncStrategy.INLINE:
                    self._kv.sync_wal()
                else:
                    await asyncio.to_thread(self._kv.sync_wal)
            else:
                # Written before the synced write: its sync covers them too.
                if before_sync is not None and (lazy_error := before_sync()) is not None:
                    raise lazy_error
                synced_write = True
                if self._strategy is SyncStrategy.INLINE:
                    self._kv.write(ops, sync=True, no_slowdown=no_slowdown)
                else:
                    await asyncio.to_thread(self._kv.write, ops, sync=True, no_slowdown=no_slowdown)
        except Exception as exc:
            error = self._failed(exc)
            # A synced write (INLINE, THREAD) that raised may have been applied or not (its sync failed
            # after the apply, or the write was refused): read it now, before any other batch is written.
            return _unsynced(error) if applied or (synced_write and self._holds(ops)) else error
        self._succeeded()
        self.batches += 1
        self.ops_written += len(ops)
        return None

    def _holds(self, ops: list[Op]) -> bool:
        try:
            return holds(self._kv, ops)
        except Exception:  # unreadable too: say not applied, the failure's own error is raised
            return False

    def _apply(self, ops: list[Op]) -> StorageError | None:
        """Write ``ops`` without a sync (a lazy batch); the error, if any."""
        try:
            self._kv.write(ops, sync=False, no_slowdown=self._prepare())
        except Exception as exc:
            return self._failed(exc)
        self._succeeded()
        self.ops_written += len(ops)
        return None

    def _prepare(self) -> bool:
        """Before a write: reopen a store that failed writes; whether the write must not stall."""
        recover = getattr(self._kv, "recover", None)
        if not self.healthy and recover is not None:
            recover()  # a store that failed writes must be reopened before it takes any again
        # On a disk low on space a write stall may never end: fail it rather than freeze the loop.
        return self.reserve is not None and self.reserve.low_on_space()

    def _failed(self, exc: Exception) -> StorageError:
        error = exc if isinstance(exc, StorageError) else StorageError(f"write failed: {exc}")
        if error is not exc:
            error.__cause__ = exc
        if self.reserve is not None:
            self.reserve.on_write_failed(error)
        if self.healthy:
            log.error(
                "store write failed, refusing to acknowledge: %s",
                error,
                extra={"event": "store_unavailable", "error": str(error)},
            )
        self.healthy = False
        self.last_error = str(error)
        return error

    def _succeeded(self) -> None:
        if not self.healthy:
            log.warning(
                "store writes succeed again after: %s",
                self.last_error,
                extra={"event": "store_recovered", "error": self.last_error},
            )
        self.healthy = True

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            exc: BaseException = StorageError("the store writer stopped")
        else:
            exc = task.exception()  # type: ignore[assignment]
            log.error("store writer died", exc_info=exc)
            self.healthy = False
            self.last_error = f"store writer died: {exc}"
        left = [future for _, future in (*self._queue, *self._lazy)] + self._riding
        self._queue.clear()
        self._lazy.clear()
        self._riding = []
        for future in left:
            if not future.done():
                future.set_exception(StorageError(str(exc)))


def _unsynced(error: StorageError | None) -> StorageError | None:
    """``error`` for callers whose ops were applied before it (None: no error)."""
    if error is None or isinstance(error, UnsyncedError):
        return error
    unsynced = UnsyncedError(str(error))  # the same words, and the same cause (the KV's own exception)
    unsynced.__cause__ = error.__cause__ or error
    return unsynced
