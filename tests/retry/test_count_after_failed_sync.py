"""The retry store's counts (pending, dead, the oldest pending message's first failure) and dead-letter hook
after a batch whose WAL sync failed: the group-commit writer applied it before the sync (SyncStrategy.SPLIT,
the default), so it is in the store (readable, replayed, and replayed from the WAL on reopen) although its
caller was told StorageError. The counts follow what the store holds, not what the caller was told."""

from __future__ import annotations

import pytest

from rocksidecar.retry.keys import DEAD_CF, PENDING_CF
from rocksidecar.retry.status import State
from rocksidecar.storage.errors import StorageError
from tests.retry.conftest import Harness, record

FSYNC_EIO = "fsync: input/output error"
FIRST_FAILURE_MS = 1_699_999_000_000


async def test_a_spool_whose_sync_failed_is_counted_and_its_ack_counts_it_out(h: Harness) -> None:
    h.kv.sync_fault = FSYNC_EIO
    with pytest.raises(StorageError):
        await h.store.spool(record("M1", first_failure_ms=FIRST_FAILURE_MS))
    h.kv.sync_fault = None
    status = h.store.get("M1")
    assert status is not None and status.state is State.SPOOLED  # it is in the store
    assert h.store.pending_count == h.kv.count(PENDING_CF) == 1
    assert h.store.stats().oldest_first_failure_ms == FIRST_FAILURE_MS
    await h.store.ack(status.key)
    assert h.store.pending_count == h.kv.count(PENDING_CF) == 0
    assert h.store.stats().oldest_first_failure_ms is None


async def test_an_ack_whose_sync_failed_is_counted_out(h: Harness) -> None:
    key = await h.store.spool(record("M1", first_failure_ms=FIRST_FAILURE_MS))
    h.kv.sync_fault = FSYNC_EIO
    with pytest.raises(StorageError):
        await h.store.ack(key)
    h.kv.sync_fault = None
    assert h.store.get("M1") is None  # deleted all the same
    assert h.store.pending_count == h.kv.count(PENDING_CF) == 0
    assert h.store.stats().oldest_first_failure_ms is None


async def test_a_burial_whose_sync_failed_is_counted_as_dead_and_told_to_the_hook(h: Harness) -> None:
    # The hook feeds the dead-letter metric and the webhook: the message is no longer pending, so nothing
    # buries it again, and a letter the hook missed was never counted or notified.
    rec = record("M1", first_failure_ms=FIRST_FAILURE_MS)
    key = await h.store.spool(rec)
    h.kv.sync_fault = FSYNC_EIO
    with pytest.raises(StorageError):
        await h.store.bury(key, rec, "final", was=rec)
    h.kv.sync_fault = None
    status = h.store.get("M1")
    assert status is not None and status.state is State.DEAD
    assert h.store.pending_count == h.kv.count(PENDING_CF) == 0
    assert h.store.dead_count == h.kv.count(DEAD_CF) == 1
    assert h.store.stats().oldest_first_failure_ms is None
    assert [letter.id for letter in h.dead] == ["M1"]


async def test_a_write_that_failed_before_it_was_applied_counts_nothing(h: Harness) -> None:
    h.kv.write_fault = "IO error: No space left on device"
    with pytest.raises(StorageError):
        await h.store.spool(record("M1", first_failure_ms=FIRST_FAILURE_MS))
    h.kv.write_fault = None
    assert h.store.get("M1") is None
    assert h.store.pending_count == h.kv.count(PENDING_CF) == 0
    assert h.store.stats().oldest_first_failure_ms is None
