"""ReplayLoop with an injected clock: ladder timing, per-type limits, dead letters, wake-ups,
restart from the oldest key, clock steps, bounded hand-out, corrupt values and store failures."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from itertools import accumulate

import pytest

from rocksidecar.retry import admin
from rocksidecar.retry.keys import META_CF, PENDING_CF, pending_key
from rocksidecar.retry.policy import DEFAULT_LADDER_S, RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.redelivery import DEAD, DELIVERED, QUARANTINED, RESCHEDULED
from rocksidecar.retry.replay import ERROR, STORE_ERROR
from rocksidecar.retry.status import State
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.kv import Put
from rocksidecar.storage.progress import FLOOR_KEY
from rocksidecar.storage.query import Filter
from tests.retry.conftest import Final, GatedWrites, Harness, Redeliverable, record


async def test_due_now_spool_is_delivered_without_time_passing(h: Harness) -> None:
    await h.start_loop(workers=2).start()
    await h.settle()
    await h.store.spool(record("M1"))  # the service's ack=spool mode: due now
    await h.settle()
    assert h.delivered == ["M1"]
    assert h.outcomes == [DELIVERED]
    assert h.store.get("M1") is None
    assert h.store.stats().pending == 0


async def test_ladder_timing_then_dead_letter(h: Harness) -> None:
    """Every retry happens exactly one rung after the previous attempt; after max_retries, R4."""
    t0 = h.store.now_ms()
    h.fail_always["M1"] = Redeliverable("SystemBusy")
    await h.store.spool(record("M1", first_failure_ms=t0), t0 + 3000)  # rung 0 after the failed send
    await h.start_loop().start()
    await h.settle()
    assert h.attempts == []
    for delay in DEFAULT_LADDER_S:
        await h.advance(delay - 0.001)
        attempts = len(h.attempts)
        await h.advance(0.001)
        assert len(h.attempts) == attempts + 1, f"no attempt exactly {delay}s after the previous one"
    expected = [t0 + round(1000 * s) for s in accumulate(DEFAULT_LADDER_S)]
    assert [at for _, at in h.attempts] == expected
    assert h.outcomes == [RESCHEDULED] * 9 + [DEAD]
    [letter] = h.dead
    assert letter.record is not None
    assert letter.record.retry_count == 10
    assert len(letter.record.history) == 10
    assert letter.record.first_failure_ms == t0
    assert letter.reason.startswith("retries exhausted after 10: Redeliverable: SystemBusy")
    status = h.store.get("M1")
    assert status is not None and status.state is State.DEAD


async def test_per_type_ladders_and_limits(h: Harness) -> None:
    h.policies["fast"] = RetryPolicy(ladder_s=(1.0,), max_retries=2)
    h.policies["slow"] = RetryPolicy(ladder_s=(10.0, 20.0), max_retries=4)
    h.fail_always = {"F": Redeliverable("x"), "S": Redeliverable("x")}
    now = h.store.now_ms()
    await h.store.spool(record("F", topic="t1", type="fast"), now + 1_000)  # rung 0 after the send
    await h.store.spool(record("S", topic="t2", type="slow"), now + 10_000)
    await h.start_loop().start()
    for _ in range(100):
        await h.advance(1.0)
    assert Counter(id_ for id_, _ in h.attempts) == {"F": 2, "S": 4}  # max_retries replays each
    slow_times = [at - now for id_, at in h.attempts if id_ == "S"]
    assert slow_times == [10_000, 30_000, 50_000, 70_000]  # the last rung repeats
    assert sorted(d.id for d in h.dead) == ["F", "S"]
    assert all(d.record is not None and len(d.record.history) == d.record.retry_count for d in h.dead)


async def test_topic_is_the_default_type(h: Harness) -> None:
    h.policies["orders"] = RetryPolicy(max_retries=0)
    h.fail_always["M1"] = Redeliverable("x")
    await h.store.spool(record("M1", topic="orders"))
    await h.start_loop().start()
    await h.settle()
    assert [d.id for d in h.dead] == ["M1"]


async def test_non_redeliverable_error_is_dead_lettered_at_once(h: Harness) -> None:
    h.fail_always["M1"] = Final("MessageIllegal: body too large")
    await h.store.spool(record("M1"))
    await h.start_loop().start()
    await h.settle()
    assert len(h.attempts) == 1
    assert h.dead[0].reason == "not redeliverable: Final: MessageIllegal: body too large"


async def test_success_after_failures_acks(h: Harness) -> None:
    h.script["M1"] = [Redeliverable("a"), Redeliverable("b")]
    await h.store.spool(record("M1"))
    await h.start_loop().start()
    await h.settle()
    await h.advance(5)
    await h.advance(30)
    assert h.delivered == ["M1"]
    assert h.outcomes == [RESCHEDULED, RESCHEDULED, DELIVERED]
    assert h.store.stats().pending == 0


async def test_an_earlier_spool_wakes_a_loop_sleeping_until_a_later_key(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.spool(record("LATE"), now + 600_000)
    await h.start_loop().start()
    await h.settle()
    await h.store.spool(record("SOON"), now + 2_000)
    await h.advance(2.0)
    assert h.delivered == ["SOON"]
    await h.advance(598.0)
    assert h.delivered == ["SOON", "LATE"]


async def test_same_millisecond_key_behind_the_cursor_is_not_missed(h: Harness) -> None:
    """A key that sorts before the last handed-out key (same ms, smaller type) rewinds the cursor."""
    h.gate = asyncio.Event()
    await h.store.spool(record("B", topic="zzz"))
    await h.start_loop().start()
    await h.until(lambda: len(h.attempts) == 1)
    await h.store.spool(record("A", topic="aaa"))  # same due ms, sorts before "zzz"
    h.gate.set()
    await h.settle()
    assert sorted(h.delivered) == ["A", "B"]


async def test_restart_replays_keys_that_were_due_before_the_crash(h: Harness) -> None:
    """R6: the seed restarted its cursor at now; ours starts at the oldest key."""
    now = h.store.now_ms()
    for i, age_s in enumerate((3600, 600, 5)):
        await h.store.spool(record(f"OLD{i}"), now - age_s * 1000)
    await h.store.spool(record("FUTURE"), now + 10_000)
    await h.start_loop().start()
    await h.settle()
    assert h.delivered == ["OLD0", "OLD1", "OLD2"]
    await h.advance(10)
    assert h.delivered[-1] == "FUTURE"


async def test_clock_rollback_neither_loses_nor_stalls_nor_collapses_the_ladder(h: Harness) -> None:
    now = h.store.now_ms()
    h.script["R"] = [Redeliverable("x")]
    await h.store.spool(record("DUE"), now + 1_000)
    await h.store.spool(record("R"), now + 2_000)
    await h.start_loop().start()
    await h.settle()
    h.clock.step_wall(-3_600_000)  # NTP steps the wall clock back an hour
    await h.advance(1.0)
    assert h.delivered == ["DUE"]  # due a second later on the monotonic scale, not an hour later
    await h.advance(1.0)
    assert [id_ for id_, _ in h.attempts] == ["DUE", "R"]
    await h.store.spool(record("NEW"))  # spooled "due now" during the rollback
    await h.settle()
    assert h.delivered == ["DUE", "NEW"]
    await h.advance(4.9)  # R's next rung is 5 s after its failed attempt, rollback or not
    assert "R" not in h.delivered
    await h.advance(0.1)
    assert h.delivered == ["DUE", "NEW", "R"]


async def test_forward_jump_hands_out_no_more_than_the_bound(h: Harness) -> None:
    now = h.store.now_ms()
    for i in range(100):
        await h.store.spool(record(f"M{i:03d}"), now + 3_600_000 + i)
    h.gate = asyncio.Event()
    loop = h.start_loop(workers=4, queue_size=6)
    await loop.start()
    await h.settle()
    h.clock.step_wall(7_200_000)  # the wall clock jumps two hours ahead
    h.clock.advance(31)  # the loop notices within its longest sleep
    await h.until(lambda: len(h.attempts) == 4)
    h.gate.set()
    await h.settle()
    # never more than four delivering plus six queued; the rest waited in the store
    assert 4 < max(h.in_flight_seen) <= 4 + 6
    assert sorted(h.delivered) == [f"M{i:03d}" for i in range(100)]
    assert Counter(id_ for id_, _ in h.attempts).most_common(1)[0][1] == 1  # none handed out twice


async def test_no_key_is_handed_out_twice_while_in_flight(h: Harness) -> None:
    h.gate = asyncio.Event()
    for i in range(20):
        await h.store.spool(record(f"M{i}"))
    await h.start_loop(workers=3, queue_size=50).start()
    await h.until(lambda: len(h.attempts) == 3)
    for i in range(20, 40):  # each spool wakes the loop and rewinds nothing past in-flight keys
        await h.store.spool(record(f"M{i}"))
    h.gate.set()
    await h.settle()
    assert Counter(id_ for id_, _ in h.attempts) == Counter(f"M{i}" for i in range(40))


async def test_corrupt_value_is_quarantined_and_the_loop_goes_on(h: Harness) -> None:
    now = h.store.now_ms()
    bad = pending_key(now - 10, 0, "orders", "BAD")
    h.kv.write([Put(PENDING_CF, bad, b"\x01\x00\x00\x00\x05{oops")], sync=True)
    await h.store.spool(record("GOOD"))
    await h.start_loop().start()
    await h.settle()
    assert h.delivered == ["GOOD"]
    assert sorted(h.outcomes) == sorted([QUARANTINED, DELIVERED])
    [letter] = h.dead
    assert (letter.id, letter.record, letter.raw) == ("BAD", None, b"\x01\x00\x00\x00\x05{oops")
    assert letter.reason.startswith("corrupt value")


async def test_store_failure_during_ack_keeps_the_message_and_retries(h: Harness) -> None:
    await h.start_loop(store_retry_s=2.0).start()
    await h.settle()
    await h.store.spool(record("M1"))
    h.kv.write_fault = "IO error: No space left on device"
    await h.until(lambda: STORE_ERROR in h.outcomes)
    assert not h.store.healthy
    assert h.store.get("M1") is not None  # delivered but not acknowledged: still stored
    h.kv.write_fault = None
    await h.advance(2.0)
    assert h.delivered == ["M1", "M1"]  # at-least-once: delivered again, then acknowledged
    assert h.store.healthy
    assert h.store.get("M1") is None


async def test_a_store_that_cannot_write_acks_pauses_replay_instead_of_a_duplicate_storm(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 11 item 3: with the disk full the loop delivered, failed to record the ack, rewound and
    sent again every second. Now it hands nothing out until a probe write succeeds, and says so once."""
    ids = [f"M{i:02d}" for i in range(32)]
    await h.store.spool_many([record(i) for i in ids])
    h.kv.write_fault = "IO error: No space left on device"
    with caplog.at_level(logging.WARNING, logger="rocksidecar.retry.replay"):
        await h.start_loop(workers=4, store_retry_s=1.0).start()
        await h.until(lambda: STORE_ERROR in h.outcomes)
        await h.settle()
        during = len(h.attempts)
        for _ in range(30):
            await h.advance(1.0)
        assert len(h.attempts) == during, "messages were delivered again while acks could not be written"
        h.kv.write_fault = None
        await h.advance(30.0)  # the probe interval grew to its cap
    assert h.store.stats().pending == 0 and h.store.healthy
    assert set(h.delivered) == set(ids)
    assert max(Counter(h.delivered).values()) == 2  # at least once: those whose ack failed, once more
    assert caplog.text.count("replay paused") == 1 and caplog.text.count("replay resumed") == 1


async def test_close_with_grace_lets_deliveries_finish(h: Harness) -> None:
    h.gate = asyncio.Event()
    await h.store.spool(record("M1"))
    loop = h.start_loop()
    await loop.start()
    await h.until(lambda: len(h.attempts) == 1)
    closing = asyncio.create_task(loop.close(grace_s=5))
    await asyncio.sleep(0)
    h.gate.set()
    await closing
    assert h.delivered == ["M1"]
    assert h.store.get("M1") is None
    h.loop = None


async def test_close_without_grace_leaves_unfinished_keys_in_the_store(h: Harness) -> None:
    h.gate = asyncio.Event()
    await h.store.spool(record("M1"))
    loop = h.start_loop()
    await loop.start()
    await h.until(lambda: len(h.attempts) == 1)
    await loop.close()
    h.loop = None
    assert h.store.get("M1") is not None
    restarted = RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic)
    assert restarted.pending_count == 1


def restarted(h: Harness) -> RetryStore:
    """A new store over the same data, as after a crash (MemoryKV keeps what was written)."""
    return RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic)


async def test_the_floor_is_persisted_and_a_restart_seeks_from_it(h: Harness) -> None:
    now = h.store.now_ms()
    for i in range(10):
        await h.store.spool(record(f"OLD{i}"), now - 1000 + i)
    await h.store.spool(record("LATER"), now + 60_000)
    loop = h.start_loop()
    await loop.start()
    await h.settle()
    await loop.close()
    h.loop = None
    h.clock.advance(1.0)  # a raised floor rides on the next batch written a second later
    await h.store.spool(record("NEXT"), now + 120_000)
    store = restarted(h)
    assert store.floor > pending_key(now - 1000 + 9, 0, "orders", "OLD9")  # past the delivered ones
    assert store.floor <= pending_key(now + 60_000, 0, "orders", "LATER")
    h.store = store
    await h.start_loop().start()
    await h.advance(120)
    assert h.delivered[-2:] == ["LATER", "NEXT"]


async def test_a_key_written_below_the_floor_lowers_it_in_the_same_batch(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.spool(record("A"), now)
    await h.start_loop().start()
    await h.settle()
    h.clock.advance(2.0)
    await h.store.spool(record("B"))  # persists the raised floor
    await h.settle()
    await h.loop.close()  # type: ignore[union-attr]
    h.loop = None
    assert restarted(h).floor > pending_key(now, 0, "orders", "A")
    h.kv.write_fault = "disk full"  # a failed batch leaves the floor on disk in doubt ...
    with pytest.raises(StorageError):
        await h.store.spool(record("LOST"), now - 5_000)
    h.kv.write_fault = None
    await h.store.spool(record("BEHIND"), now - 5_000)  # ... so the next batch writes it again
    store = restarted(h)
    assert store.floor <= pending_key(now - 5_000, 0, "orders", "BEHIND")
    h.store = store
    h.delivered.clear()
    await h.start_loop().start()
    await h.settle()
    assert h.delivered == ["BEHIND"]


async def test_a_clean_close_saves_the_exact_floor(h: Harness) -> None:
    for i in range(5):
        await h.store.spool(record(f"M{i}"))
    await h.start_loop().start()
    await h.settle()
    await h.loop.close()  # type: ignore[union-attr]
    h.loop = None
    floor = h.store.floor
    assert floor > pending_key(h.store.now_ms(), 0, "orders", "M4")
    await h.store.close()
    assert restarted(h).floor == floor


def floor_on_disk(h: Harness) -> bytes:
    return h.kv.get(META_CF, FLOOR_KEY) or b""


async def test_close_never_moves_the_floor_past_queued_keys(h: Harness) -> None:
    """Issue 11 item 1: close() dropped the queued keys from _inflight, a delivery finishing during the
    grace period found _inflight empty and moved the floor past them; the store persisted that floor and
    the next start never sought them again (1 024 acknowledged messages stranded after a SIGTERM)."""
    h.gate = asyncio.Event()
    await h.store.spool_many([record(f"M{i:02d}") for i in range(20)])
    loop = h.start_loop(workers=2)
    await loop.start()
    await h.until(lambda: len(h.attempts) == 2)  # two being delivered, four more queued
    closing = asyncio.create_task(loop.close(grace_s=5))
    await asyncio.sleep(0)
    h.gate.set()  # the two in flight finish during the grace period
    await closing
    h.loop = None
    await h.store.close()  # SIGTERM: the floor is persisted
    lowest = h.kv.scan(PENDING_CF, limit=1)[0][0]
    assert floor_on_disk(h) <= lowest, "the persisted floor is above an unacknowledged key"
    h.store = restarted(h)
    h.gate = None
    await h.start_loop().start()
    await h.settle()
    assert sorted(set(h.delivered)) == [f"M{i:02d}" for i in range(20)]
    assert h.store.stats().pending == 0


async def test_a_key_below_the_persisted_floor_is_logged_and_replayed(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    now = h.store.now_ms()
    await h.store.spool(record("STRANDED"), now - 1000)
    h.kv.write([Put(META_CF, FLOOR_KEY, pending_key(now, 0, "orders", "X"))], sync=True)  # a floor bug
    with caplog.at_level(logging.ERROR, logger="rocksidecar.storage.progress"):
        h.store = restarted(h)
    assert "is above the live key" in caplog.text
    assert h.store.floor == pending_key(now - 1000, 0, "orders", "STRANDED")
    assert h.store.stats().oldest_due_ms == now - 1000  # the oldest-age metric sees it again
    await h.start_loop().start()
    await h.settle()
    assert h.delivered == ["STRANDED"]


async def test_an_unexpected_replay_error_hands_the_batch_out_again_after_a_pause(h: Harness) -> None:
    await h.start_loop(store_retry_s=2.0).start()
    await h.settle()
    h.fail_always["M1"] = Final("x")
    bury = h.store.bury
    calls: list[bytes] = []

    async def bury_failing_once(
        key: bytes, rec: RetryRecord, reason: str, *, was: RetryRecord | None = None
    ) -> bytes:
        calls.append(key)
        h.changed.set()
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return await bury(key, rec, reason, was=was)

    h.store.bury = bury_failing_once  # type: ignore[method-assign]
    await h.store.spool(record("M1"))
    await h.until(lambda: len(calls) == 1)
    assert h.store.floor <= calls[0]  # held in flight during the pause: the floor stays below it
    await h.advance(2.0)
    assert h.outcomes == [ERROR, DEAD]
    assert [d.id for d in h.dead] == ["M1"]


async def test_deliver_batch_groups_due_messages_and_handles_each_outcome(h: Harness) -> None:
    h.script = {"M3": [Redeliverable("busy")], "M7": [Final("illegal")]}
    await h.store.spool_many([record(f"M{i}") for i in range(40)])
    writes = h.kv.writes
    await h.start_loop(workers=2, queue_size=64, deliver_batch=h.deliver_batch, batch_max=16).start()
    await h.settle()
    assert max(h.batch_sizes) > 1 and max(h.batch_sizes) <= 16
    assert sum(h.batch_sizes) == 40
    assert Counter(h.outcomes) == {DELIVERED: 38, RESCHEDULED: 1, DEAD: 1}
    assert h.kv.writes - writes <= len(h.batch_sizes) + 2  # one ack batch per call, plus the two failures
    await h.advance(5)
    assert sorted(h.delivered) == sorted(f"M{i}" for i in range(40) if i != 7)
    assert [d.id for d in h.dead] == ["M7"]


async def test_a_raising_or_miscounting_deliver_batch_fails_the_whole_batch(h: Harness) -> None:
    calls = 0

    async def flaky(records: object) -> list[object]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise Redeliverable("connection reset")
        if calls == 2:
            return []  # a bug in the adapter: no outcome per record
        return [None] * len(records)  # type: ignore[arg-type]

    await h.store.spool_many([record(f"M{i}") for i in range(3)])
    await h.start_loop(workers=1, deliver_batch=flaky).start()
    await h.settle()
    assert h.outcomes == [RESCHEDULED] * 3
    await h.advance(5)
    assert h.outcomes[3:] == [RESCHEDULED] * 3
    status = h.store.get("M0")
    assert status is not None and "outcomes for 3 records" in status.last_error
    await h.advance(30)
    assert h.outcomes[6:] == [DELIVERED] * 3
    assert h.store.stats().pending == 0


async def test_delivered_messages_count_as_delivered_when_a_neighbours_reschedule_fails(h: Harness) -> None:
    h.script = {"M9": [Redeliverable("busy")]}
    await h.store.spool_many([record(f"M{i}") for i in range(10)])
    reschedule = h.store.reschedule

    async def failing(key: bytes, rec: RetryRecord, due_ms: int, *, was: RetryRecord | None = None) -> bytes:
        if rec.id == "M9" and rec.retry_count == 1:
            raise StorageError("IO error: fsync failed")
        return await reschedule(key, rec, due_ms, was=was)

    h.store.reschedule = failing  # type: ignore[method-assign]
    await h.start_loop(workers=1, deliver_batch=h.deliver_batch, batch_max=16).start()
    await h.until(lambda: len(h.outcomes) >= 10)
    # M0..M8 were delivered and their acks written before M9's reschedule failed: gone for good
    assert all(h.store.get(f"M{i}") is None for i in range(9))
    assert Counter(h.outcomes[:10]) == {DELIVERED: 9, STORE_ERROR: 1}, Counter(h.outcomes)
    await h.settle()  # M9, still stored, handed out again: its delivery works now
    assert h.outcomes[10:] == [DELIVERED]
    assert h.store.pending_count == 0 and h.store.get("M9") is None


async def test_a_purged_pending_message_is_not_handed_out_while_its_purge_commits(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A purge claims its keys: one falling due while the purge's batch waits for its WAL sync used to
    go to a worker, whose reschedule wrote it back (stored, counted 0) or whose ack counted it down
    again."""
    now = h.store.now_ms()
    key = await h.store.spool(record("M1"), now + 3000)
    h.fail_always["M1"] = Redeliverable("SystemBusy")
    loop = h.start_loop(workers=1)
    await loop.start()
    await h.settle()
    due = h.store.due
    scanned: list[int] = []  # the due bound of each pass

    def seen(start: bytes, now_ms: int, limit: int) -> list[tuple[bytes, bytes]]:
        scanned.append(now_ms)
        h.changed.set()
        return due(start, now_ms, limit)

    h.store.due = seen  # type: ignore[method-assign]
    gated = GatedWrites(h.store.writer)
    monkeypatch.setattr(h.store.writer, "write", gated)
    # the admin API's purge: M1 is not in flight when it is checked
    purge = asyncio.create_task(admin.purge(h.store, "pending", Filter(), in_flight=loop.is_in_flight))
    await gated.until_arrived(1)  # its batch waits behind a WAL sync
    h.clock.advance(3)  # M1 falls due meanwhile: a pass reads it
    await h.until(lambda: any(bound >= now + 3000 for bound in scanned))
    gated.gate.set()
    assert await purge == (1, 0)
    await h.settle()
    assert (h.attempts, h.kv.scan(PENDING_CF), h.store.pending_count) == ([], [], 0)
    assert not loop.is_in_flight(key)


async def test_a_purge_skips_a_key_in_flight_and_the_replay_finishes_it(h: Harness) -> None:
    h.gate = asyncio.Event()
    await h.store.spool(record("M1"))
    loop = h.start_loop(workers=1)
    await loop.start()
    await h.until(lambda: len(h.attempts) == 1)  # being delivered
    assert await admin.purge(h.store, "pending", Filter(), in_flight=loop.is_in_flight) == (0, 1)
    h.gate.set()
    await h.settle()
    assert (h.outcomes, h.store.pending_count, h.kv.scan(PENDING_CF)) == ([DELIVERED], 0, [])


class _Reads:
    """Wraps the store's due-key scan: fails while ``fault`` is set, and tells when it was called."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.inner = h.store.due
        self.fault: str | None = None
        self.calls: list[tuple[int, bool]] = []  # (store time, failed) per call

    def __call__(self, start: bytes, now_ms: int, limit: int) -> list[tuple[bytes, bytes]]:
        self.calls.append((self.h.store.now_ms(), self.fault is not None))
        self.h.changed.set()
        if self.fault is not None:
            raise StorageError(self.fault)
        return self.inner(start, now_ms, limit)


async def test_a_failed_read_pauses_replay_with_a_back_off_and_it_resumes(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A StorageError from a read (an EIO in an SST file) ended the seek task for good: spools were still
    answered 2xx and nothing was replayed until a restart."""
    reads = _Reads(h)
    h.store.due = reads  # type: ignore[method-assign]
    loop = h.start_loop(workers=1, store_retry_s=1.0)
    await loop.start()
    await h.settle()
    t0 = h.store.now_ms()
    reads.fault = "scan: IO error: While pread offset 0 len 4096: Input/output error"
    with caplog.at_level(logging.WARNING, logger="rocksidecar.storage.due_loop"):
        await h.store.spool(record("M1"))  # due now: wakes the loop, whose read fails
        for n, wait_s in enumerate((1.0, 2.0, 4.0), start=2):
            await h.until(lambda n=n: len(reads.calls) == n)  # type: ignore[misc]
            h.clock.advance(wait_s - 0.001)
            # not sooner than the back-off: a pass would come from the sleep ending or a new key
            await h.store.spool(record(f"X{n}"), t0 + 3_600_000)
            assert len(reads.calls) == n
            assert loop.failure is None, f"the seek loop died: {loop.failure!r}"
            h.clock.advance(0.001)
        await h.until(lambda: len(reads.calls) == 5)
        reads.fault = None
        h.clock.advance(8.0)
        await h.settle()
    assert loop.failure is None
    assert [t - t0 for t, _ in reads.calls[1:5]] == [0, 1000, 3000, 7000]  # 1 s, then twice as long
    assert h.delivered == ["M1"] and h.store.get("M1") is None
    assert caplog.text.count("cannot be read") == 1 and caplog.text.count("can be read again") == 1
