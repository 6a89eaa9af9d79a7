"""The retry store's oldest-pending tally (retry/oldest.py) under load and cancellation: a message rescheduled
again and again does not grow its heap; a spool cancelled while its batch syncs is counted, as it is
stored all the same."""

from __future__ import annotations

from rocksidecar.retry.keys import COLUMN_FAMILIES
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.memory import MemoryKV


async def test_rescheduling_one_message_does_not_grow_the_oldest_heap_without_bound() -> None:
    now = [1_000_000]
    store = RetryStore(MemoryKV(COLUMN_FAMILIES), now_ms=lambda: now[0])
    rec = RetryRecord("M1", "orders", b"x", first_failure_ms=999_000, history=((999_000, "down"),))
    key = await store.spool(rec)
    for _ in range(2_000):
        now[0] += 1
        failed = rec.failed(now[0], "down")  # the same first failure: the same second every time
        key = await store.reschedule(key, failed, now[0] + 1_000, was=rec)
        rec = failed
    heap = store._oldest._heap  # one pending message, one second
    await store.close()
    assert len(heap) <= 64 + 2, f"{len(heap)} heap entries for one pending message"


async def test_a_spool_cancelled_while_its_batch_syncs_is_still_told_to_the_oldest() -> None:
    """spool_many tells OldestPending (and the pending count) after its awaited commit: a caller cancelled
    while the batch waits for its WAL sync (a gRPC client that cancels; grpc.aio cancels the handler)
    leaves a record stored and pending that OldestPending never heard of. Now every commit tells them in
    its ``then`` under a shield, as redrive and purge did."""
    import asyncio
    import threading

    class SlowSync(MemoryKV):
        def __init__(self) -> None:
            super().__init__(COLUMN_FAMILIES)
            self.syncing = threading.Event()
            self.release = threading.Event()

        def sync_wal(self) -> None:
            self.syncing.set()
            self.release.wait(5)

    kv = SlowSync()
    store = RetryStore(kv, now_ms=lambda: 2_000_000)
    rec = RetryRecord("M1", "orders", b"x", first_failure_ms=1_000_000, history=((1_000_000, "down"),))
    spool = asyncio.create_task(store.spool(rec))
    assert await asyncio.to_thread(kv.syncing.wait, 5)
    spool.cancel()  # the client went away while the batch was being synced
    await asyncio.gather(spool, return_exceptions=True)
    kv.release.set()
    await store.close()  # after the batch in flight: written
    stored = list(kv.iterate("retry_pending"))
    stats = store.stats()
    assert len(stored) == 1  # written and pending all the same: the replay will deliver it
    assert stats.oldest_first_failure_ms == 1_000_000, f"oldest pending unknown: {stats}"
