"""DelayStore: durable scheduling, status by id, cancel (including its race with publishing), stats and
the retention of done markers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from rocksidecar.delay.keys import COLUMN_FAMILIES, DONE_CF, DUE_CF, EXPIRY_CF, INDEX_CF, due_key
from rocksidecar.delay.status import CancelOutcome, DelayState
from rocksidecar.delay.store import DelayStore
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Delete, Op
from rocksidecar.storage.memory import MemoryKV
from rocksidecar.storage.rocks import RocksKV
from tests.delay.conftest import SETTLE_S, START_MS, Harness, make_harness, message
from tests.fakes import FaultyKV


async def test_status_follows_a_message_from_scheduled_to_sent(h: Harness) -> None:
    due = h.store.now_ms() + 60_000
    assert h.store.get("A") is None
    await h.store.schedule(message("A", due, topic="payments"))
    status = h.store.get("A")
    assert status is not None
    assert (status.state, status.due_ms, status.topic, status.at_ms) == (
        DelayState.SCHEDULED,
        due,
        "payments",
        None,
    )
    await h.start().start()
    await h.advance(60.0)
    status = h.store.get("A")
    assert status is not None and (status.state, status.at_ms) == (DelayState.SENT, due)
    assert (status.due_ms, status.topic) == (due, "payments")  # kept past the schedule


async def test_a_refused_write_schedules_nothing(h: Harness) -> None:
    h.kv.write_fault = "IO error: no space"  # refused, not applied (a failed sync is: test_pending_count)
    with pytest.raises(StorageError):
        await h.store.schedule(message("A", h.store.now_ms() + 10))
    assert h.store.stats().pending == 0 and not h.store.healthy
    h.kv.write_fault = None
    await h.store.schedule(message("B", h.store.now_ms() + 10))
    assert h.store.stats().pending == 1 and h.store.healthy


async def test_schedule_is_synced_before_it_returns(h: Harness) -> None:
    syncs = h.kv.syncs
    await asyncio.gather(*(h.store.schedule(message(f"M{i}", h.store.now_ms() + i)) for i in range(50)))
    assert h.kv.syncs > syncs  # group commit: one sync may cover many callers
    assert h.kv.count(DUE_CF) == h.kv.count(INDEX_CF) == 50


async def test_cancel_before_due_and_the_answers_after(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule_many([message("A", now + 1000), message("B", now + 1000)])
    await h.start().start()
    assert await h.store.cancel("A") is CancelOutcome.CANCELLED
    assert await h.store.cancel("A") is CancelOutcome.CANCELLED  # asking again changes nothing
    assert await h.store.cancel("NOPE") is CancelOutcome.NOT_FOUND
    status = h.store.get("A")
    assert status is not None and (status.state, status.at_ms) == (DelayState.CANCELLED, now)
    await h.advance(1.0)
    assert h.ids() == ["B"]
    assert await h.store.cancel("B") is CancelOutcome.ALREADY_SENT
    assert h.store.stats().pending == 0


async def test_drop_published_many_answers_each_id_as_drop_published_and_writes_once(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule_many([message(i, now + 1000 * (1 + (i == "B"))) for i in ("A", "B", "C")])
    assert await h.store.drop_published("C") is CancelOutcome.CANCELLED
    await h.start().start()
    writes = h.kv.writes
    got = await h.store.drop_published_many(["A", "NEW", "C", "B", "A"])
    assert got == [CancelOutcome.CANCELLED, CancelOutcome.NOT_FOUND, CancelOutcome.ALREADY_SENT,
                   CancelOutcome.CANCELLED, CancelOutcome.CANCELLED]  # fmt: skip
    assert h.kv.writes - writes <= 2  # the copies' batch and the markers' batch, not one per id
    for id_ in ("A", "B", "NEW"):  # dropped, or remembered as sent so a late copy is a duplicate
        status = h.store.get(id_)
        assert status is not None and status.state is DelayState.SENT and status.sent_to is None
    assert h.store.stats().pending == 0
    await h.advance(3.0)
    assert h.ids() == []  # none of them published


class ScanCountingKV(FaultyKV):
    """FaultyKV that counts the range scans of the index column family (one per id the drops look up)."""

    def __init__(self, inner: MemoryKV) -> None:
        super().__init__(inner)
        self.index_scans = 0

    def scan(
        self, cf: str, *, lower: bytes | None = None, upper: bytes | None = None, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        self.index_scans += cf == INDEX_CF
        return self.inner.scan(cf, lower=lower, upper=upper, limit=limit)


def _scan_counting_store() -> tuple[ScanCountingKV, GroupCommitWriter, DelayStore]:
    kv = ScanCountingKV(MemoryKV(COLUMN_FAMILIES))
    writer = GroupCommitWriter(kv)
    return kv, writer, DelayStore(kv, writer, now_ms=lambda: START_MS)


async def test_drops_at_the_marked_due_are_point_reads_not_index_scans() -> None:
    kv, writer, store = _scan_counting_store()
    removed: list[list[bytes]] = []
    store.add_removed_listener(removed.append)
    now = store.now_ms()
    ids = [f"C{i}" for i in range(200)]
    await store.schedule_many([message(id_, now + 60_000 + i) for i, id_ in enumerate(ids)])
    scans = kv.index_scans
    got = await store.drop_published_many(ids, [now + 60_000 + i for i in range(len(ids))])
    assert got == [CancelOutcome.CANCELLED] * len(ids)
    assert kv.index_scans == scans  # none: one multi-get found every copy at its due
    assert store.drop_lookups == {"point": len(ids), "scan": 0}
    # the scheduler forgets them
    assert removed == [[due_key(now + 60_000 + i, id_) for i, id_ in enumerate(ids)]]
    assert store.pending_count == 0 and kv.count(DUE_CF) == kv.count(INDEX_CF) == 0
    status = store.get("C7")
    assert status is not None and status.state is DelayState.SENT and status.sent_to is None
    await store.close()
    await writer.close()


async def test_a_drop_whose_marked_due_misses_falls_back_to_the_scan_and_answers_the_same() -> None:
    """Every kind of miss (another due, unknown, already sent, cancelled, a bad due) gives the outcome
    and the store state the scan path gives, and only the missed ids are scanned."""

    async def run(with_dues: bool) -> tuple[list[CancelOutcome], list[object], int]:
        kv, writer, store = _scan_counting_store()
        now = store.now_ms()
        await store.schedule_many([message(i, now + 1000) for i in ("HIT", "OTHER", "SENT", "GONE")])
        assert await store.drop_published("SENT") is CancelOutcome.CANCELLED  # done: SENT
        assert await store.cancel("GONE") is CancelOutcome.CANCELLED  # done: CANCELLED
        ids = ["HIT", "OTHER", "NEW", "SENT", "GONE", "HIT", "OTHER"]
        dues = [now + 1000, now + 999, now + 1000, now + 1000, now + 1000, now + 1000, -1]
        scans = kv.index_scans
        got = await store.drop_published_many(ids, dues if with_dues else None)
        scanned = kv.index_scans - scans
        assert store.drop_lookups == {"point": 1 if with_dues else 0, "scan": 4 if with_dues else 5}
        states = [(s.state, s.at_ms, s.due_ms) if (s := store.get(i)) else None for i in sorted(set(ids))]
        states.append(store.pending_count)
        await store.close()
        await writer.close()
        return got, states, scanned

    got, states, scanned = await run(with_dues=True)
    assert (got, states) == (await run(with_dues=False))[:2]
    c, a, n = CancelOutcome.CANCELLED, CancelOutcome.ALREADY_SENT, CancelOutcome.NOT_FOUND
    assert got == [c, c, n, a, c, c, c]
    assert scanned == 4  # OTHER, NEW, SENT, GONE: not HIT


@pytest.mark.parametrize("at_dues", [False, True])  # the scan way, a v2 mark's point reads
async def test_drop_published_many_waits_for_a_publish_in_progress(h: Harness, at_dues: bool) -> None:
    now = h.store.now_ms()
    await h.store.schedule_many([message("A", now), message("B", now + 1000)])
    h.gate = asyncio.Event()
    await h.start().start()
    await asyncio.wait_for(h.entered.wait(), SETTLE_S)  # A is being published
    drop = asyncio.create_task(
        h.store.drop_published_many(["B", "A"], [now + 1000, now] if at_dues else None)
    )
    h.gate.set()
    assert await asyncio.wait_for(drop, SETTLE_S) == [CancelOutcome.CANCELLED, CancelOutcome.ALREADY_SENT]
    assert h.ids() == ["A"]


async def test_cancel_of_an_unknown_id_can_leave_a_tombstone(h: Harness) -> None:
    now = h.store.now_ms()
    assert await h.store.cancel("EARLY", remember_unknown=True) is CancelOutcome.NOT_FOUND
    status = h.store.get("EARLY")
    assert status is not None and (status.state, status.at_ms) == (DelayState.CANCELLED, now)
    assert await h.store.cancel("OTHER") is CancelOutcome.NOT_FOUND
    assert h.store.get("OTHER") is None  # without remember_unknown nothing is written


async def test_cancel_while_publishing_waits_and_answers_already_sent(h: Harness) -> None:
    await h.store.schedule(message("A", h.store.now_ms()))
    h.gate = asyncio.Event()
    await h.start().start()
    await asyncio.wait_for(h.entered.wait(), SETTLE_S)  # A is being published
    cancel = asyncio.create_task(h.store.cancel("A"))
    h.gate.set()
    assert await asyncio.wait_for(cancel, SETTLE_S) is CancelOutcome.ALREADY_SENT
    status = h.store.get("A")
    assert status is not None and status.state is DelayState.SENT
    assert h.ids() == ["A"]


async def test_cancel_while_a_publish_fails_cancels_and_it_is_never_published(h: Harness) -> None:
    await h.store.schedule(message("A", h.store.now_ms()))
    h.gate = asyncio.Event()
    h.refuse.add("A")
    await h.start(retry_s=0.1).start()
    await asyncio.wait_for(h.entered.wait(), SETTLE_S)
    cancel = asyncio.create_task(h.store.cancel("A"))
    h.gate.set()
    assert await asyncio.wait_for(cancel, SETTLE_S) is CancelOutcome.CANCELLED
    h.refuse.clear()
    await h.advance(5.0)  # the retry finds nothing to publish
    assert h.ids() == [] and h.calls == [1]
    status = h.store.get("A")
    assert status is not None and status.state is DelayState.CANCELLED
    assert h.store.stats().pending == 0


async def test_a_cancel_that_cannot_be_stored_leaves_the_message_scheduled(h: Harness) -> None:
    due = h.store.now_ms() + 100
    await h.store.schedule(message("A", due))
    await h.start().start()
    await h.settle()
    h.kv.write_fault = "disk full"
    with pytest.raises(StorageError):
        await h.store.cancel("A")
    h.kv.write_fault = None
    status = h.store.get("A")
    assert status is not None and status.state is DelayState.SCHEDULED
    await h.advance(0.1)
    assert h.ids() == ["A"]


async def test_the_same_id_scheduled_twice_is_cancelled_as_one(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule(message("A", now + 5000))
    await h.store.schedule(message("A", now + 5000))  # a repeated request: one message
    await h.store.schedule(message("A", now + 9000))
    assert h.store.stats().pending == 2
    status = h.store.get("A")
    assert status is not None and status.due_ms == now + 5000
    assert await h.store.cancel("A") is CancelOutcome.CANCELLED
    assert h.store.stats().pending == 0 and h.kv.count(INDEX_CF) == 0


async def test_an_id_that_is_a_prefix_of_another_does_not_see_its_entries(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule(message("a\x00" + "1" * 12, now + 1))
    assert h.store.get("a") is None
    assert await h.store.cancel("a") is CancelOutcome.NOT_FOUND
    assert h.store.stats().pending == 1


async def test_stats_count_pending_and_name_the_next_due_time(h: Harness) -> None:
    now = h.store.now_ms()
    assert h.store.stats().next_due_ms is None
    await h.store.schedule_many([message("A", now + 300), message("B", now + 100), message("C", now + 200)])
    stats = h.store.stats()
    assert (stats.pending, stats.next_due_ms, stats.healthy, stats.last_error) == (3, now + 100, True, None)
    await h.store.cancel("B")
    assert (h.store.stats().pending, h.store.stats().next_due_ms) == (2, now + 200)


async def test_purge_keeps_a_later_outcome_of_a_reused_id() -> None:
    h = make_harness(retention_s=10.0)
    now = h.store.now_ms()
    await h.store.schedule(message("A", now + 1))
    await h.store.cancel("A")
    h.clock.advance(5.0)
    await h.store.schedule(message("A", now + 6000))
    await h.store.cancel("A")  # the marker now says: cancelled at now + 5 s
    h.clock.advance(6.0)
    assert await h.store.purge() == 1  # the first marker's expiry entry
    status = h.store.get("A")
    assert status is not None and (status.state, status.at_ms) == (DelayState.CANCELLED, now + 5000)
    h.clock.advance(5.0)
    assert await h.store.purge() == 1
    assert h.store.get("A") is None and h.kv.count(DONE_CF) == h.kv.count(EXPIRY_CF) == 0
    await h.store.close()
    await h.writer.close()


async def test_rocksdb_reopen_keeps_schedules_counts_and_done_markers(tmp_path: Path) -> None:
    kv = RocksKV.open(tmp_path / "db", COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer)
    now = store.now_ms()
    await store.schedule_many([message(f"M{i}", now + 60_000 + i) for i in range(10)])
    await store.cancel("M3")
    await store.close()
    await writer.close()
    kv.close()
    kv = RocksKV.open(tmp_path / "db", COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer)
    try:
        assert store.stats().pending == 9 and store.stats().next_due_ms == now + 60_000
        status = store.get("M3")
        assert status is not None and status.state is DelayState.CANCELLED
        status = store.get("M4")
        assert status is not None and status.due_ms == now + 60_004
    finally:
        await store.close()
        await writer.close()
        kv.close()


class GatedKV(FaultyKV):
    """WAL syncs (run in a thread by the writer) wait for ``gate``; ``syncing`` is set when one starts."""

    def __init__(self, inner: MemoryKV) -> None:
        super().__init__(inner)
        self.gate = threading.Event()
        self.gate.set()
        self.syncing = asyncio.Event()
        self.loop = asyncio.get_running_loop()

    def sync_wal(self) -> None:
        self.loop.call_soon_threadsafe(self.syncing.set)
        self.gate.wait(SETTLE_S)
        super().sync_wal()


async def test_a_caller_cancelled_during_the_write_still_settles_the_store() -> None:
    kv = GatedKV(MemoryKV(COLUMN_FAMILIES))
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer)
    now = store.now_ms()
    await store.schedule(message("A", now + 60_000))
    kv.gate.clear()
    kv.syncing.clear()
    cancel = asyncio.create_task(store.cancel("A"))
    await asyncio.wait_for(kv.syncing.wait(), SETTLE_S)  # the cancel's batch is being synced
    cancel.cancel()  # e.g. the HTTP client went away
    kv.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await cancel
    await store.schedule(message("B", now + 60_000))  # a later batch: the earlier one has settled
    assert len(store.queue.claims) == 0  # the cancel's claim is not left behind
    assert store.stats().pending == 1
    status = store.get("A")
    assert status is not None and status.state is DelayState.CANCELLED
    await store.close()
    await writer.close()


async def test_messages_sent_by_another_path_are_remembered_as_sent(h: Harness) -> None:
    # The retry store's replay delivered these; the delay store keeps the outcome like its own.
    await h.store.record_sent(["R1", "R2"])
    status = h.store.get("R1")
    assert status is not None and status.state is DelayState.SENT and status.at_ms == h.store.now_ms()
    assert await h.store.cancel("R2") is CancelOutcome.ALREADY_SENT
    assert h.store.get("unknown") is None
    h.kv.sync_fault = "IO error: no space"
    with pytest.raises(StorageError):
        await h.store.record_sent(["R3"])


class OrderKV(GatedKV):
    """GatedKV that keeps each write's ops, in the order the writer applied them."""

    def __init__(self, inner: MemoryKV) -> None:
        super().__init__(inner)
        self.applied: list[list[Op]] = []

    def write(self, ops: Sequence[Op], *, sync: bool, no_slowdown: bool = False) -> None:
        self.applied.append(list(ops))
        super().write(ops, sync=sync, no_slowdown=no_slowdown)

    def first_write_deleting(self, key: bytes) -> int:
        return next(i for i, ops in enumerate(self.applied) if Delete(DUE_CF, key) in ops)


async def _copies_and_a_claimed_due_message(store: DelayStore, copies: int) -> tuple[list[str], bytes, bytes]:
    """``copies`` scheduled copies (another replica's marks drop them) and one due message, claimed as
    the scheduler does before it publishes it: the copies' ids, the first copy's key, the message's key."""
    now = store.now_ms()
    ids = [f"C{i}" for i in range(copies)]
    await store.schedule_many([message(id_, now + 60_000 + i) for i, id_ in enumerate(ids)])
    await store.schedule(message("P", now - 1))
    key = due_key(now - 1, "P")
    assert store.queue.claim(key)
    return ids, due_key(now + 60_000, ids[0]), key


async def test_a_sent_record_queued_behind_a_mark_batch_of_drops_is_written_first() -> None:
    kv = OrderKV(MemoryKV(COLUMN_FAMILIES))
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer)
    ids, copy, key = await _copies_and_a_claimed_due_message(store, 500)  # a mark's 500 ids: ~2 000 ops
    kv.gate.clear()
    kv.syncing.clear()
    blocker = asyncio.create_task(store.schedule(message("X", store.now_ms() + 90_000)))
    await asyncio.wait_for(kv.syncing.wait(), SETTLE_S)  # the writer is busy: what follows queues
    drops = asyncio.create_task(store.drop_published_many(ids))
    await asyncio.sleep(0)
    record = asyncio.create_task(store.mark_sent([key], store.now_ms()))
    await asyncio.sleep(0)
    kv.gate.set()
    outcomes = await asyncio.wait_for(drops, SETTLE_S)
    await asyncio.wait_for(asyncio.gather(blocker, record), SETTLE_S)
    assert outcomes == [CancelOutcome.CANCELLED] * len(ids)
    # The due path's write does not wait behind the drops (a whole writer batch and its WAL sync).
    assert kv.first_write_deleting(key) < kv.first_write_deleting(copy)
    assert store.pending_count == 1  # X
    await store.close()
    await writer.close()


async def test_a_mark_batch_of_drops_rides_on_the_next_records_wal_sync() -> None:
    kv = OrderKV(MemoryKV(COLUMN_FAMILIES))
    writer = GroupCommitWriter(kv, ride_s=SETTLE_S * 6)  # never alone within the test
    store = DelayStore(kv, writer)
    ids, copy, key = await _copies_and_a_claimed_due_message(store, 100)
    syncs = kv.syncs
    drops = asyncio.create_task(store.drop_published_many(ids))
    for _ in range(20):
        await asyncio.sleep(0)
    assert store.due_value(copy) is None  # applied ...
    assert not drops.done() and kv.syncs == syncs  # ... not synced: the drop has not returned
    await asyncio.wait_for(store.mark_sent([key], store.now_ms()), SETTLE_S)
    assert await asyncio.wait_for(drops, SETTLE_S) == [CancelOutcome.CANCELLED] * len(ids)
    assert kv.syncs == syncs + 1  # one WAL sync for the record and the drops
    assert store.pending_count == 0
    await store.close()
    await writer.close()
