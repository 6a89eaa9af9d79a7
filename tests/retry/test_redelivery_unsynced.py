"""Redelivery's outcomes when a store write reached the store but not the disk (its WAL sync failed:
storage.errors.UnsyncedError). The store holds the write and nothing makes it again (an acknowledged
message is gone, a buried one's hook fired, a rescheduled one waits under its next rung), so its outcome
is what the write stands for, never "store_error"; the loop still pauses on the error until a probe
writes again (rocksidecar_replays_total follows the outcomes)."""

from __future__ import annotations

import asyncio
from collections import Counter

from rocksidecar.retry.keys import PENDING_CF, pending_key
from rocksidecar.retry.policy import DEFAULT_LADDER_S
from rocksidecar.retry.redelivery import DEAD, DELIVERED, QUARANTINED, RESCHEDULED
from rocksidecar.retry.replay import STORE_ERROR
from rocksidecar.storage.kv import Put
from tests.retry.conftest import Final, Harness, Redeliverable, record

FSYNC_EIO = "EIO on fsync"


async def _replayed_while_syncs_fail(h: Harness, outcomes: int, **loop: object) -> None:
    """Start the replay; once its first delivery is under way, WAL syncs fail: until ``outcomes``."""
    h.gate = asyncio.Event()
    await h.start_loop(**loop).start()
    await h.until(lambda: len(h.attempts) == 1)
    h.kv.sync_fault = FSYNC_EIO
    h.gate.set()
    await h.until(lambda: len(h.outcomes) == outcomes)


async def _syncs_again(h: Harness, after_s: float = 120) -> None:
    """The disk syncs again: the loop's probe writes and replay resumes."""
    h.kv.sync_fault = None
    await h.advance(after_s)


async def test_a_delivery_whose_ack_is_in_the_store_but_not_synced_is_reported_delivered(h: Harness) -> None:
    await h.store.spool(record("a"))
    await _replayed_while_syncs_fail(h, 1)
    assert h.store.pending_count == 0  # the store holds the ack: the message is not pending any more
    assert not h.store.healthy  # replay pauses all the same
    await _syncs_again(h)  # nothing is left to send
    assert h.store.healthy
    assert h.delivered == ["a"]
    assert [id_ for id_, _ in h.attempts] == ["a"]  # sent once, never again
    assert h.outcomes == [DELIVERED]


async def test_a_burial_in_the_store_but_not_synced_is_reported_dead(h: Harness) -> None:
    h.fail_always["b"] = Final("message refused by the broker")
    await h.store.spool(record("b"))
    await _replayed_while_syncs_fail(h, 1)
    assert h.store.pending_count == 0 and h.store.dead_count == 1
    assert [d.id for d in h.dead] == ["b"]  # the hook heard of it
    await _syncs_again(h)
    assert h.outcomes == [DEAD]


async def test_a_reschedule_in_the_store_but_not_synced_is_reported_rescheduled(h: Harness) -> None:
    h.script["c"] = [Redeliverable("SystemBusy")]
    await h.store.spool(record("c"))
    await _replayed_while_syncs_fail(h, 1)
    status = h.store.get("c")
    assert status is not None and status.attempts == 1  # under its next rung, not sent again before it
    await _syncs_again(h, DEFAULT_LADDER_S[1] - 1)
    assert len(h.attempts) == 1
    await h.advance(1)
    assert h.delivered == ["c"]
    assert h.outcomes == [RESCHEDULED, DELIVERED]


async def test_a_quarantine_in_the_store_but_not_synced_is_reported_quarantined(h: Harness) -> None:
    bad = pending_key(h.store.now_ms(), 0, "orders", "BAD")
    h.kv.write([Put(PENDING_CF, bad, b"\x01\x00\x00\x00\x05{oops")], sync=True)  # behind the count's back
    h.kv.sync_fault = FSYNC_EIO  # nothing is delivered: the first write is the quarantine's
    await h.start_loop().start()
    await h.until(lambda: len(h.outcomes) == 1)
    assert h.kv.count(PENDING_CF) == 0 and [d.id for d in h.dead] == ["BAD"]
    await _syncs_again(h)
    assert h.outcomes == [QUARANTINED]


async def test_an_unsynced_ack_in_a_batch_leaves_the_rest_of_the_batch_to_a_later_attempt(h: Harness) -> None:
    # The ack of the delivered ones is in the store: they are delivered. The failed neighbour's reschedule
    # was not written (the batch stopped at the error): still pending at its key, handed out again once a
    # probe writes, and reported then.
    h.script["M2"] = [Redeliverable("SystemBusy")]
    await h.store.spool_many([record(f"M{i}") for i in range(3)])
    await _replayed_while_syncs_fail(h, 3, workers=1, deliver_batch=h.deliver_batch, batch_max=8)
    assert Counter(h.outcomes) == {DELIVERED: 2, STORE_ERROR: 1}
    status = h.store.get("M2")
    assert status is not None and status.attempts == 0
    await _syncs_again(h)
    assert h.outcomes[3:] == [DELIVERED]
    assert sorted(h.delivered) == ["M0", "M1", "M2"] and h.store.pending_count == 0
