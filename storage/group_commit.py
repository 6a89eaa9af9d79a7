"""GroupCommitWriter: gathers concurrent writers into one WriteBatch and one WAL sync.

A caller's ``await write(ops)`` returns only after the batch holding its ops was written and synced;
a failed write or sync fails every caller of that batch and marks the writer unhealthy.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Sequence

from .errors import StorageError
from .kv import KV, Op
from .reserve import DiskReserve

log = logging.getLogger(__name__)

# At about 1 µs per op inside rocksdict (GIL held), 2 048 ops keep one batch near 2 ms of
# event-loop stall while still amortising one WAL sync over thousands of messages.
MAX_BATCH_OPS = 2048


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
    ) -> None:
        self._kv = kv
        self.reserve = reserve  # drain mode on a full disk: admits only batches that drain
        self._max_batch_ops = max_batch_ops
        self._strategy = strategy
        self._queue: deque[tuple[Sequence[Op], asyncio.Future[None]]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # A store opened read-only on a full disk (storage.rocks) starts unhealthy.
        reason: str | None = getattr(kv, "read_only_reason", None)
        self.healthy = reason is None
        self.last_error: str | None = reason
        self.batches = 0
        self.ops_written = 0

    async def write(self, ops: Sequence[Op]) -> None:
        """Apply ``ops`` atomically and durably.

        Raises:
            StorageError: the batch holding these ops was not written or not synced.
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
        self._queue.append((ops, future))
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
            if not self._queue:
                if self._closed:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._refuse_new_work(self._take_batch())
            if not batch:
                continue
            ops = [op for item_ops, _ in batch for op in item_ops]
            error = await self._commit(ops)
            for _, future in batch:
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

    def _take_batch(self) -> list[tuple[Sequence[Op], asyncio.Future[None]]]:
        batch = [self._queue.popleft()]
        size = len(batch[0][0])
        while self._queue and size + len(self._queue[0][0]) <= self._max_batch_ops:
            item = self._queue.popleft()
            batch.append(item)
            size += len(item[0])
        return batch

    async def _commit(self, ops: list[Op]) -> StorageError | None:
        try:
            recover = getattr(self._kv, "recover", None)
            if not self.healthy and recover is not None:
                recover()  # a store that failed writes must be reopened before it takes any again
            # On a disk low on space a write stall may never end: fail it rather than freeze the loop.
            no_slowdown = self.reserve is not None and self.reserve.low_on_space()
            if self._strategy is SyncStrategy.SPLIT:
                self._kv.write(ops, sync=False, no_slowdown=no_slowdown)
                await asyncio.to_thread(self._kv.sync_wal)
            elif self._strategy is SyncStrategy.INLINE:
                self._kv.write(ops, sync=True, no_slowdown=no_slowdown)
            else:
                await asyncio.to_thread(self._kv.write, ops, sync=True, no_slowdown=no_slowdown)
        except Exception as exc:
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
        if not self.healthy:
            log.warning(
                "store writes succeed again after: %s",
                self.last_error,
                extra={"event": "store_recovered", "error": self.last_error},
            )
        self.healthy = True
        self.batches += 1
        self.ops_written += len(ops)
        return None

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            exc: BaseException = StorageError("the store writer stopped")
        else:
            exc = task.exception()  # type: ignore[assignment]
            log.error("store writer died", exc_info=exc)
            self.healthy = False
            self.last_error = f"store writer died: {exc}"
        while self._queue:
            _, future = self._queue.popleft()
            if not future.done():
                future.set_exception(StorageError(str(exc)))
