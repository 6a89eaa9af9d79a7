"""The delay store's pending count (the ``delay_scheduled`` gauge, the admin page's and the CLI's
"scheduled") follows what the store holds: after a batch whose WAL sync failed once it was applied, and
when batches writing the same key are queued at once."""

from __future__ import annotations

import asyncio

import pytest

from rocksidecar.delay.keys import DUE_CF
from rocksidecar.delay.status import CancelOutcome, DelayState
from rocksidecar.storage.errors import StorageError
from tests.delay.conftest import Harness, message

FSYNC_EIO = "fsync: input/output error"


# --- a batch whose WAL sync fails is applied all the same (readable, published) but never counted -------


async def test_a_schedule_whose_sync_failed_is_published_and_the_count_goes_negative(h: Harness) -> None:
    # The group-commit writer applies the batch, then syncs the WAL (SyncStrategy.SPLIT, the default): a
    # failed sync leaves the message in the store, readable, and the scheduler publishes it. The caller
    # was told StorageError (5xx: fine, at least once), but the store's count never took the message in,
    # so its publish takes it out of a count that never had it.
    due = h.store.now_ms() + 100
    h.kv.sync_fault = FSYNC_EIO
    with pytest.raises(StorageError):
        await h.store.schedule(message("A", due))
    h.kv.sync_fault = None
    status = h.store.get("A")
    assert status is not None and status.state is DelayState.SCHEDULED  # it is in the store
    assert h.kv.count(DUE_CF) == 1
    await h.start().start()
    await h.advance(0.1)
    assert h.ids() == ["A"]  # published
    assert h.kv.count(DUE_CF) == 0
    assert h.store.stats().pending == 0  # today: -1


async def test_a_cancel_whose_sync_failed_removes_the_message_but_the_count_keeps_it(h: Harness) -> None:
    # The cancel's batch is applied before its sync fails: the message is gone from the schedule and its
    # CANCELLED marker is there, but the count still has it. The caller's retry of the cancel (it got a
    # 5xx) finds the marker and answers CANCELLED without touching the count: one "scheduled" message
    # in the gauge for good (until a restart recounts).
    await h.store.schedule(message("A", h.store.now_ms() + 60_000))
    h.kv.sync_fault = FSYNC_EIO
    with pytest.raises(StorageError):
        await h.store.cancel("A")
    h.kv.sync_fault = None
    assert await h.store.cancel("A") is CancelOutcome.CANCELLED  # the retried cancel
    assert h.kv.count(DUE_CF) == 0
    assert h.store.stats().pending == 0  # today: 1


# --- schedule_many decides what it adds from the KV before its batch is written ----------------------


async def test_the_same_message_scheduled_twice_at_once_is_counted_once(h: Harness) -> None:
    # "Scheduling the same id at the same due time again overwrites it (one message)": true one after the
    # other, but two at once (both batches queued before either is written) each find the key absent and
    # each count it. One key, a count of 2; after its publish the gauge says 1 with nothing scheduled.
    due = h.store.now_ms() + 100
    await asyncio.gather(h.store.schedule(message("A", due)), h.store.schedule(message("A", due)))
    assert h.kv.count(DUE_CF) == 1
    await h.start().start()
    await h.advance(0.1)
    assert h.ids() == ["A"]
    assert h.kv.count(DUE_CF) == 0
    assert h.store.stats().pending == 0  # today: 1


async def test_a_schedule_while_a_cancel_of_the_same_message_commits_is_counted(h: Harness) -> None:
    # The cancel's batch (delete) is queued, then a schedule of the same id and due time: it finds the
    # key still there, adds nothing to the count, and its put is written after the delete. The message
    # is scheduled again (right: the schedule came last) but not counted; its publish then drives the
    # gauge to -1.
    due = h.store.now_ms() + 100
    await h.store.schedule(message("A", due))
    outcome, _ = await asyncio.gather(h.store.cancel("A"), h.store.schedule(message("A", due)))
    assert outcome is CancelOutcome.CANCELLED
    status = h.store.get("A")
    assert status is not None and status.state is DelayState.SCHEDULED
    assert h.store.stats().pending == h.kv.count(DUE_CF) == 1  # today: 0 != 1
    await h.start().start()
    await h.advance(0.1)
    assert h.ids() == ["A"]
    assert h.store.stats().pending == 0
