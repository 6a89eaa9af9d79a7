"""A sharding key's messages keep their order through the retry store: per-key FIFO lanes.

A lane is a (topic, sharding key). Its first message spooled is pending (its head) and is replayed on the
ladder as any other; the ones spooled after it wait in retry_waiting, in their order, and the next takes
the head's place (due now) only once the head left pending: delivered, dead-lettered, purged or withdrawn.
Messages without a sharding key are what they were.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from rocksidecar.retry import admin
from rocksidecar.retry.keys import (
    COLUMN_FAMILIES,
    DEAD_CF,
    INDEX_CF,
    LANES_CF,
    META_CF,
    PENDING,
    PENDING_CF,
    WAITING,
    WAITING_CF,
    decode_lane,
    index_key,
    lane_key,
    parse_pending_key,
    pending_key,
    split_index_key,
    split_waiting_key,
)
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord, decode_record, encode_record
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.status import State
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.kv import KV, Put
from rocksidecar.storage.memory import MemoryKV
from rocksidecar.storage.query import Filter
from rocksidecar.storage.rocks import RocksKV
from tests.fakes import FakeWallClock
from tests.retry.conftest import Final, GatedWrites, Harness, Redeliverable, record

KEY = "customer-7"


def keyed(id_: str, key: str = KEY, topic: str = "orders", **kw: object) -> RetryRecord:
    return record(id_, topic, sharding_key=key, **kw)


async def _run(h: Harness, seconds: float, step: float = 0.5) -> None:
    """Let the ladder run for ``seconds`` of the fake clock."""
    for _ in range(round(seconds / step)):
        await h.advance(step)


# --- order ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [False, True], ids=["one-by-one", "batch-delivery"])
async def test_a_keys_messages_are_replayed_in_spool_order_while_its_head_fails_and_is_rescheduled(
    h: Harness, batch: bool
) -> None:
    """The head fails twice and climbs the ladder (3 s, then 30 s); the later ones of its key, due at
    once, wait for it: 8 workers, with and without batch delivery, never send them ahead of it. An
    unkeyed message and another key's are not held back."""
    for id_ in ("A", "B", "C"):
        await h.store.spool(keyed(id_))
    await h.store.spool(record("U"))
    await h.store.spool(keyed("X", key="other"))
    h.script["A"] = [Redeliverable("busy"), Redeliverable("busy")]
    extra = {"deliver_batch": h.deliver_batch, "batch_max": 32} if batch else {}
    await h.start_loop(workers=8, **extra).start()
    await h.settle()
    assert sorted(h.delivered) == ["U", "X"], "only the head of the key was tried, and it failed"
    await _run(h, 40)
    assert h.delivered[2:] == ["A", "B", "C"]
    first_b = next(at for id_, at in h.attempts if id_ == "B")
    assert first_b >= max(at for id_, at in h.attempts if id_ == "A")
    assert h.store.pending_count == 0 and h.store.lanes_open == 0


async def test_a_keys_messages_spooled_in_one_millisecond_are_replayed_in_spool_order(h: Harness) -> None:
    """ack=spool: one batch of a key, one due time; its ids sort against the request's order here. The
    pending keys' order (due:count:type:id) used to decide; now the lane's does."""
    ids = ["Z", "Y", "X", "W"]
    await h.store.spool_many([keyed(i) for i in ids])
    await h.start_loop(workers=8, deliver_batch=h.deliver_batch, batch_max=32).start()
    await h.settle()
    assert h.delivered == ids


async def test_a_later_spool_of_the_key_waits_behind_its_head_and_says_when(h: Harness) -> None:
    """Spooled due at once, a message of a key whose head is due in 10 s waits for it; its status says
    SPOOLED with the head's due time, and it counts as pending."""
    now = h.store.now_ms()
    head_key = await h.store.spool(keyed("A"), now + 10_000)
    assert h.store.lane_head_due("orders", KEY) == now + 10_000
    await h.store.spool(keyed("B", first_failure_ms=now), now)
    await h.start_loop(workers=8).start()
    await h.settle()
    assert h.attempts == []
    status = h.store.get("B")
    assert status is not None and status.state is State.SPOOLED
    assert status.next_attempt_at_ms == now + 10_000
    assert h.store.pending_count == 2 and h.store.stats().pending == 2
    assert h.store.stats().oldest_first_failure_ms == now  # B's, a waiting record
    assert parse_pending_key(head_key).due_ms == now + 10_000
    await h.advance(10)
    assert h.delivered == ["A", "B"]
    assert h.store.get("B") is None and h.store.pending_count == 0


async def test_another_topic_with_the_same_key_is_another_lane(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.spool(keyed("A", topic="t1"), now + 10_000)
    await h.store.spool(keyed("B", topic="t2"), now)
    await h.start_loop().start()
    await h.settle()
    assert h.delivered == ["B"]


# --- the head leaves: dead letter, purge, withdraw; redrive -------------------------------------------


async def test_a_head_dead_lettered_after_its_retries_lets_the_next_go(h: Harness) -> None:
    h.policies["orders"] = RetryPolicy((1.0,), max_retries=2)
    h.fail_always["A"] = Redeliverable("busy")
    await h.store.spool(keyed("A"))
    await h.store.spool(keyed("B"))
    await h.start_loop(workers=8).start()
    await h.settle()
    await _run(h, 3)
    assert [d.id for d in h.dead] == ["A"]
    assert h.delivered == ["B"]
    first_b = next(at for id_, at in h.attempts if id_ == "B")
    assert first_b >= max(at for id_, at in h.attempts if id_ == "A")
    assert h.store.lanes_open == 0


async def test_a_head_refused_for_good_lets_the_next_go_at_once(h: Harness) -> None:
    h.fail_always["A"] = Final("MessageIllegal")
    for id_ in ("A", "B", "C"):
        await h.store.spool(keyed(id_))
    await h.start_loop(workers=8).start()
    await h.settle()
    assert [d.id for d in h.dead] == ["A"]
    assert h.delivered == ["B", "C"]


async def test_a_corrupt_head_is_quarantined_and_the_next_goes(h: Harness) -> None:
    head = await h.store.spool(keyed("A"), h.store.now_ms() + 60_000)
    await h.store.spool(keyed("B"))
    await h.store.writer.write([Put(PENDING_CF, head, b"not a record")])
    h.clock.advance(60)
    await h.start_loop().start()
    await h.settle()
    assert [d.id for d in h.dead] == ["A"] and h.dead[0].record is None
    assert h.delivered == ["B"]
    assert h.store.lanes_open == 0


async def test_purging_the_head_promotes_the_next_due_now_and_purging_a_waiting_one_leaves_the_lane(
    h: Harness,
) -> None:
    now = h.store.now_ms()
    head = await h.store.spool(keyed("A"), now + 60_000)
    b, c, d = [await h.store.spool(keyed(i)) for i in ("B", "C", "D")]
    assert await h.store.purge(waiting=[c]) == 1
    assert h.store.get("C") is None
    assert h.store.pending_count == 3
    assert await h.store.purge(pending=[head]) == 1
    await h.start_loop(workers=8).start()
    await h.settle()
    assert h.delivered == ["B", "D"]  # at once: B took A's place due now, D followed it
    assert b != d and h.store.pending_count == 0 and h.store.lanes_open == 0


async def test_purging_a_head_and_the_next_in_one_call_promotes_the_one_after(h: Harness) -> None:
    now = h.store.now_ms()
    head = await h.store.spool(keyed("A"), now + 60_000)
    b = await h.store.spool(keyed("B"))
    await h.store.spool(keyed("C"))
    assert await h.store.purge(pending=[head], waiting=[b]) == 2
    await h.start_loop().start()
    await h.settle()
    assert h.delivered == ["C"]
    assert h.store.pending_count == 0


async def test_withdrawing_the_head_or_a_waiting_message(h: Harness) -> None:
    """A cancel (Rock-DMQ's withdraw) of the head lets the next go; of a waiting one, removes it only."""
    now = h.store.now_ms()
    await h.store.spool(keyed("A"), now + 60_000)
    for id_ in ("B", "C", "D"):
        await h.store.spool(keyed(id_))
    assert await h.store.withdraw("C")
    assert await h.store.withdraw("A")
    assert not await h.store.withdraw("A")
    await h.start_loop().start()
    await h.settle()
    assert h.delivered == ["B", "D"]


async def test_a_redriven_dead_letter_of_a_key_joins_the_tail_of_its_lane(h: Harness) -> None:
    h.fail_always["A"] = Final("refused")
    await h.store.spool(keyed("A"))
    await h.start_loop(workers=8).start()
    await h.settle()
    [letter] = h.dead
    del h.fail_always["A"]
    now = h.store.now_ms()
    await h.store.spool(keyed("H"), now + 5_000)  # the lane's head now, due later
    await h.store.spool(keyed("W"))
    await h.store.redrive(letter.key)
    status = h.store.get("A")
    assert status is not None and status.next_attempt_at_ms == now + 5_000
    await h.settle()
    assert h.delivered == []
    await h.advance(5)
    assert h.delivered == ["H", "W", "A"]


async def test_a_redriven_dead_letter_of_a_key_with_no_lane_is_its_head(h: Harness) -> None:
    h.fail_always["A"] = Final("refused")
    await h.store.spool(keyed("A"))
    await h.start_loop().start()
    await h.settle()
    del h.fail_always["A"]
    await h.store.redrive(h.dead[0].key)
    await h.store.spool(keyed("B"))
    await h.settle()
    assert h.delivered == ["A", "B"]


# --- counts, status, admin-facing reads -----------------------------------------------------------


async def test_counts_and_oldest_are_exact_with_waiting_records_and_after_a_reopen(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.spool(keyed("A", first_failure_ms=now - 1_000), now + 60_000)
    await h.store.spool_many([keyed("B", first_failure_ms=now - 5_000), keyed("C")])
    await h.store.spool(record("U"))
    assert h.store.pending_count == 4
    stats = h.store.stats()
    assert (stats.pending, stats.oldest_first_failure_ms) == (4, now - 5_000)  # B waits; it is the oldest
    reopened = RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic)
    assert reopened.pending_count == 4 and reopened.lanes_open == 1
    assert reopened.stats().oldest_first_failure_ms == now - 5_000
    await reopened.close()


async def test_spool_new_finds_a_waiting_message(h: Harness) -> None:
    await h.store.spool(keyed("A"), h.store.now_ms() + 60_000)
    assert await h.store.spool_new(keyed("B")) is not None
    assert await h.store.spool_new(keyed("B")) is None
    assert h.store.pending_count == 2


async def test_pending_record_reads_a_waiting_one(h: Harness) -> None:
    await h.store.spool(keyed("A"), h.store.now_ms() + 60_000)
    await h.store.spool(keyed("B"))
    status = h.store.get("B")
    assert status is not None
    found = h.store.pending_record(status.key)
    assert found is not None and found.id == "B"


# --- concurrency ---------------------------------------------------------------------------------


async def test_a_spool_waits_for_the_lane_decision_of_one_being_written(h: Harness) -> None:
    """The group commit writes a batch after its ops were built: a second spool of the key must not read
    the lane before the first's batch lands (both would become heads, replayed in any order)."""
    gate = GatedWrites(h.store.writer)
    h.store.writer.write = gate  # type: ignore[method-assign]
    first = asyncio.create_task(h.store.spool(keyed("Z"), h.store.now_ms() + 1_000))
    await gate.until_arrived(1)
    second = asyncio.create_task(h.store.spool(keyed("A")))
    unkeyed = asyncio.create_task(h.store.spool(record("U")))
    await gate.until_arrived(2)  # the unkeyed one is not held back by the lane
    gate.gate.set()
    await asyncio.gather(first, second, unkeyed)
    status = h.store.get("A")
    assert status is not None and status.next_attempt_at_ms == h.store.now_ms() + 1_000
    assert len(h.kv.scan(PENDING_CF)) == 2 and len(h.kv.scan(WAITING_CF)) == 1


async def test_spools_of_one_key_at_once_keep_their_call_order(h: Harness) -> None:
    ids = [f"m{i:02d}" for i in range(20)]
    await asyncio.gather(*(h.store.spool(keyed(i)) for i in reversed(ids)))
    await h.start_loop(workers=8, deliver_batch=h.deliver_batch, batch_max=32).start()
    await h.settle()
    assert h.delivered == list(reversed(ids))


async def test_a_cancelled_spool_still_releases_its_lane(h: Harness) -> None:
    gate = GatedWrites(h.store.writer)
    h.store.writer.write = gate  # type: ignore[method-assign]
    task = asyncio.create_task(h.store.spool(keyed("A")))
    await gate.until_arrived(1)
    task.cancel()
    gate.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    await h.store.spool(keyed("B"))  # does not hang on A's lock
    assert len(h.store._lane_locks) == 0
    assert h.store.pending_count == 2


async def test_unkeyed_spools_take_no_lane_lock(h: Harness) -> None:
    gate = GatedWrites(h.store.writer)
    h.store.writer.write = gate  # type: ignore[method-assign]
    task = asyncio.create_task(h.store.spool_many([record("U1"), record("U2")]))
    await gate.until_arrived(1)
    assert len(h.store._lane_locks) == 0
    gate.gate.set()
    await task


# --- crash safety ---------------------------------------------------------------------------------


def _check(kv: KV, expected: dict[str, str]) -> None:
    """What a store reopened on ``kv`` holds: each id of ``expected`` once, pending or waiting as said
    ("p"/"w"), its index entry pointing at it, each lane's entry at its head, the lane's waiting keys
    after it, the counts exact."""
    clock = FakeWallClock()
    store = RetryStore(kv, now_ms=clock.now_ms, clock=clock.monotonic)
    where: dict[str, str] = {}
    for key, raw in kv.iterate(PENDING_CF):
        id_ = decode_record(raw).id
        assert id_ not in where, f"{id_} twice"
        where[id_] = "p"
        assert kv.get(INDEX_CF, index_key(id_, PENDING, key)) is not None
    for key, raw in kv.iterate(WAITING_CF):
        id_ = decode_record(raw).id
        assert id_ not in where, f"{id_} twice"
        where[id_] = "w"
        assert kv.get(INDEX_CF, index_key(id_, WAITING, key)) is not None
        lane, seq, _ = split_waiting_key(key)
        entry = kv.get(LANES_CF, lane)
        assert entry is not None, f"{id_} waits in a lane without an entry"
        assert decode_lane(entry).head_seq < seq <= decode_lane(entry).tail_seq
    for lane, raw in kv.iterate(LANES_CF):
        assert kv.get(PENDING_CF, decode_lane(raw).head) is not None, f"lane {lane!r}'s head is gone"
    index = [split_index_key(k) for k, _ in kv.iterate(INDEX_CF)]
    assert len(index) == len(where) + len(list(kv.iterate(DEAD_CF)))
    assert where == expected
    assert store.pending_count == len(expected)
    assert store.lanes_open == len(list(kv.iterate(LANES_CF)))


Restart = Callable[[RetryStore, dict[str, str]], Awaitable[RetryStore]]


async def _steps(store: RetryStore, clock: FakeWallClock, restart: Restart) -> RetryStore:
    """A lane through every change, the store restarted after each and checked as a restart finds it."""
    now = clock.now_ms()
    a = await store.spool(keyed("A"), now + 60_000)
    store = await restart(store, {"A": "p"})
    await store.spool_many([keyed("B"), keyed("C"), keyed("D"), record("U")])
    store = await restart(store, {"A": "p", "B": "w", "C": "w", "D": "w", "U": "p"})
    a2 = await store.reschedule(a, keyed("A").failed(now, "busy"), now + 90_000)
    store = await restart(store, {"A": "p", "B": "w", "C": "w", "D": "w", "U": "p"})
    await store.ack(a2)
    store = await restart(store, {"B": "p", "C": "w", "D": "w", "U": "p"})
    b = store.get("B")
    assert b is not None
    await store.bury(b.key, keyed("B"), "refused")
    store = await restart(store, {"C": "p", "D": "w", "U": "p"})
    assert await store.withdraw("D")
    store = await restart(store, {"C": "p", "U": "p"})
    [letter] = store.dead.page()
    await store.redrive(letter.key)
    store = await restart(store, {"C": "p", "B": "w", "U": "p"})
    c = store.get("C")
    assert c is not None
    await store.purge(pending=[c.key])
    return await restart(store, {"B": "p", "U": "p"})


async def test_every_lane_change_is_one_batch_a_reopened_memory_store_finds_whole() -> None:
    clock = FakeWallClock()
    kv = MemoryKV(COLUMN_FAMILIES)

    async def restart(store: RetryStore, expected: dict[str, str]) -> RetryStore:
        await store.close()
        _check(kv, expected)
        return RetryStore(kv, now_ms=clock.now_ms, clock=clock.monotonic)

    store = await _steps(RetryStore(kv, now_ms=clock.now_ms, clock=clock.monotonic), clock, restart)
    await store.close()


async def test_every_lane_change_survives_a_rocksdb_reopen(tmp_path: Path) -> None:
    clock = FakeWallClock()
    path = tmp_path / "store"

    async def restart(store: RetryStore, expected: dict[str, str]) -> RetryStore:
        await store.close()
        kv = RocksKV.open(path, COLUMN_FAMILIES)
        try:
            _check(kv, expected)
        finally:
            kv.close()
        return RetryStore.open(path, now_ms=clock.now_ms, clock=clock.monotonic)

    store = await _steps(RetryStore.open(path, now_ms=clock.now_ms, clock=clock.monotonic), clock, restart)
    await store.close()


async def test_a_failed_write_changes_no_lane(h: Harness) -> None:
    now = h.store.now_ms()
    head = await h.store.spool(keyed("A"), now + 60_000)
    await h.store.spool(keyed("B"))
    h.kv.write_fault = "disk on fire"
    with pytest.raises(StorageError):
        await h.store.ack(head)
    with pytest.raises(StorageError):
        await h.store.spool(keyed("C"))
    h.kv.write_fault = None
    _check(h.kv.inner, {"A": "p", "B": "w"})
    assert h.store.pending_count == 2 and h.store.lanes_open == 1
    await h.store.spool(keyed("C"))  # the lock was let go, the tail not moved by the failed batch
    _check(h.kv.inner, {"A": "p", "B": "w", "C": "w"})


OLD_FAMILIES = (PENDING_CF, INDEX_CF, DEAD_CF, META_CF)  # the previous version's


def _old_spool(kv: KV, rec: RetryRecord, due_ms: int) -> None:
    key = pending_key(due_ms, rec.retry_count, rec.type, rec.id)
    kv.write(
        [Put(PENDING_CF, key, encode_record(rec)), Put(INDEX_CF, index_key(rec.id, PENDING, key), b"")],
        sync=True,
    )


async def test_a_store_of_the_previous_version_opens_and_its_keyed_records_are_delivered(
    tmp_path: Path,
) -> None:
    """No lanes column families, keyed records pending as the previous version wrote them (no lane entry):
    handled as before (each on its own), and a new message of the key is a lane of its own."""
    clock = FakeWallClock()
    path = tmp_path / "store"
    old = RocksKV.open(path, OLD_FAMILIES)
    now = clock.now_ms()
    _old_spool(old, keyed("OLD1"), now)
    _old_spool(old, keyed("OLD2"), now + 1)
    old.close()
    store = RetryStore.open(path, now_ms=clock.now_ms, clock=clock.monotonic)
    assert store.pending_count == 2 and store.lanes_open == 0
    await store.spool(keyed("NEW"), now + 2)
    delivered: list[str] = []

    async def deliver(rec: RetryRecord) -> None:
        delivered.append(rec.id)

    loop = ReplayLoop(store, deliver, lambda _t: RetryPolicy(), sleep=clock.sleep)
    await loop.start()
    clock.advance(1)
    await asyncio.wait_for(loop.wait_idle(), 10)
    await loop.close()
    assert sorted(delivered) == ["NEW", "OLD1", "OLD2"]
    assert store.pending_count == 0 and store.lanes_open == 0
    assert store.kv.get(LANES_CF, lane_key("orders", KEY)) is None
    await store.close()


async def test_an_ack_of_an_older_versions_record_leaves_the_lane_alone(h: Harness) -> None:
    """A keyed pending record with no lane entry (spooled by an older version) is not a head: its ack,
    reschedule or burial moves nobody."""
    now = h.store.now_ms()
    _old_spool(h.kv, keyed("OLD"), now + 60_000)
    head = await h.store.spool(keyed("A"), now + 30_000)  # a lane of its own: OLD has no entry
    await h.store.spool(keyed("B"))
    old = pending_key(now + 60_000, 0, "orders", "OLD")
    await h.store.ack(old)
    status = h.store.get("B")
    assert status is not None and h.kv.get(WAITING_CF, status.key) is not None
    await h.store.ack(head)
    status = h.store.get("B")
    assert status is not None and parse_pending_key(status.key).due_ms == h.store.now_ms()


# --- the admin's listing and purge ------------------------------------------------------------------


async def test_the_pending_listing_shows_waiting_messages_after_the_pending_ones(h: Harness) -> None:
    """By next attempt: the pending ones, then those waiting behind their lane's head (in lane order),
    each with its head's next attempt and marked waiting; pages and filters cover both."""
    now = h.store.now_ms()
    await h.store.spool(keyed("A"), now + 60_000)
    await h.store.spool_many([keyed("B"), keyed("C"), record("U", topic="other")])
    items = admin.pending_page(h.store, Filter()).items
    assert [(i.id, i.due_ms, i.waiting) for i in items] == [
        ("U", now, False), ("A", now + 60_000, False), ("B", now + 60_000, True), ("C", now + 60_000, True),
    ]  # fmt: skip
    assert all(i.record is not None and i.record.body == b"" and i.body_bytes > 0 for i in items)
    seen: list[str] = []
    cursor = None
    while True:
        page = admin.pending_page(h.store, Filter(), cursor=cursor, limit=1)
        seen += [i.id for i in page.items]
        if page.cursor is None:
            break
        cursor = page.cursor
    assert seen == ["U", "A", "B", "C"]
    assert [i.id for i in admin.pending_page(h.store, Filter(topic="orders")).items] == ["A", "B", "C"]
    assert [i.id for i in admin.pending_page(h.store, Filter(topic="other")).items] == ["U"]
    late = Filter(due_after_ms=now + 1)
    assert [i.id for i in admin.pending_page(h.store, late).items] == ["A", "B", "C"]
    early = Filter(due_before_ms=now + 1)
    assert [i.id for i in admin.pending_page(h.store, early).items] == ["U"]


async def test_purge_by_filter_takes_waiting_messages_too(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.spool(keyed("A"), now + 60_000)
    await h.store.spool_many([keyed("B"), keyed("C"), record("U", topic="other")])
    assert await admin.purge(h.store, "pending", Filter(topic="orders"), in_flight=lambda _k: False) == (3, 0)
    assert h.store.pending_count == 1 and h.store.lanes_open == 0
    assert len(h.kv.scan(WAITING_CF)) == 0 and len(h.kv.scan(LANES_CF)) == 0


async def test_the_listing_pages_through_waiting_messages_of_the_longest_sharding_key(h: Harness) -> None:
    """A page's cursor is the last key read: a waiting key holds its sharding key (1 024 characters, here
    of 3 UTF-8 bytes each, escaped '%' among them)."""
    key = "€%" * 512
    await h.store.spool(keyed("A", key=key), h.store.now_ms() + 60_000)
    for id_ in ("B", "C", "D"):
        await h.store.spool(keyed(id_, key=key))
    seen: list[str] = []
    cursor = None
    while True:
        page = admin.pending_page(h.store, Filter(), cursor=cursor, limit=1)
        seen += [i.id for i in page.items]
        if page.cursor is None:
            break
        cursor = page.cursor
    assert seen == ["A", "B", "C", "D"]
