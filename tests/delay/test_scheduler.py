"""DelayScheduler with an injected clock: due-time order, wake-ups, batching, failed publishes, restarts
and clock steps. No test sleeps on real time."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rocksidecar.delay.keys import DUE_CF, due_key
from rocksidecar.delay.message import DELAY_DUE_AT, DELAY_PUBLISHED_AT
from rocksidecar.delay.status import CancelOutcome, DelayState
from rocksidecar.storage.kv import Put
from tests.delay.conftest import SETTLE_S, Harness, message


async def test_publishes_in_due_time_order_at_the_due_time_and_not_before(h: Harness) -> None:
    now = h.store.now_ms()
    for id_, delay_ms in [("M0", 5000), ("M1", 1000), ("M2", 3000), ("M3", 1000), ("M4", 20)]:
        await h.store.schedule(message(id_, now + delay_ms))
    await h.start().start()
    await h.settle()
    assert h.ids() == []
    await h.advance(0.019)
    assert h.ids() == []
    await h.advance(0.001)
    assert h.ids() == ["M4"]
    await h.advance(0.98)
    assert h.ids() == ["M4", "M1", "M3"]  # the same due millisecond: in id order
    await h.advance(1.999)
    assert h.ids() == ["M4", "M1", "M3"]
    await h.advance(0.001)
    await h.advance(2.0)
    assert h.ids() == ["M4", "M1", "M3", "M2", "M0"]
    assert h.published_at == [m.due_ms for m in h.published]  # to the millisecond
    assert h.lateness_s == [0.0] * 5
    assert h.store.stats().pending == 0


async def test_an_earlier_arrival_wakes_the_scheduler_from_a_long_sleep(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule(message("LATE", now + 3_600_000))
    await h.start().start()
    await h.settle()  # asleep until the hour is up (at most MAX_IDLE_S at a time)
    await h.store.schedule(message("SOON", now + 250))
    await h.store.schedule(message("OVERDUE", now - 10))  # already due: no clock move needed
    await h.settle()
    assert h.ids() == ["OVERDUE"]
    await h.advance(0.25)
    assert h.ids() == ["OVERDUE", "SOON"]
    assert h.lateness_s[1] == 0.0


async def test_a_due_message_keeps_its_id_and_carries_due_and_publish_times(h: Harness) -> None:
    due = h.store.now_ms() + 1500
    original = message("UNIQ-1", due, tags="T", keys=("k1",), properties={"app": "x"}, sharding_key="s")
    await h.store.schedule(original)
    await h.start().start()
    await h.advance(1.5)
    (sent,) = h.published
    assert (sent.id, sent.topic, sent.body, sent.tags, sent.keys, sent.sharding_key) == (
        "UNIQ-1", "orders", b"body of UNIQ-1", "T", ("k1",), "s",
    )  # fmt: skip
    assert sent.properties == {"app": "x", DELAY_DUE_AT: str(due), DELAY_PUBLISHED_AT: str(due)}
    status = h.store.get("UNIQ-1")
    assert status is not None and (status.state, status.at_ms) == (DelayState.SENT, due)


async def test_a_burst_goes_out_in_batches_with_bounded_calls_in_flight(h: Harness) -> None:
    due = h.store.now_ms() + 1000
    await h.store.schedule_many([message(f"B{i:04d}", due) for i in range(1234)])
    h.gate = asyncio.Event()
    await h.start(batch_max=500, max_in_flight=2).start()
    h.clock.advance(1.0)
    await h.until(lambda: len(h.calls) == 2)
    assert h.calls == [500, 500]  # the third batch waits for a free slot
    h.gate.set()
    await h.settle()
    assert h.calls == [500, 500, 234]
    assert h.max_concurrent == 2
    assert sorted(h.ids()) == [f"B{i:04d}" for i in range(1234)]
    assert h.store.stats().pending == 0


async def test_a_failed_publish_stays_scheduled_and_is_retried(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule_many([message("A", now + 10), message("B", now + 10)])
    h.refuse.add("A")
    await h.start(retry_s=1.0).start()
    await h.advance(0.01)
    assert h.ids() == ["B"]
    status = h.store.get("A")
    assert status is not None and (status.state, status.due_ms) == (DelayState.SCHEDULED, now + 10)
    await h.advance(0.999)
    assert h.calls == [2]
    await h.advance(0.001)  # the retry, retry_s after the failure: still refused
    assert h.ids() == ["B"] and h.calls == [2, 1]
    h.refuse.clear()
    await h.advance(0.999)
    assert h.ids() == ["B"]
    await h.advance(0.001)
    assert h.ids() == ["B", "A"]
    assert h.lateness_s == [0.0, 2.0]  # measured from the due time, not from the retry
    assert h.store.stats().pending == 0


async def test_a_publish_that_raises_or_miscounts_fails_the_whole_batch(h: Harness) -> None:
    calls: list[int] = []

    async def broken(msgs: list[object]) -> list[None]:
        calls.append(len(msgs))
        if len(calls) == 1:
            raise ConnectionError("producer closed")
        if len(calls) == 2:
            return [None]  # one outcome for two messages
        return [None] * len(msgs)

    now = h.store.now_ms()
    await h.store.schedule_many([message("A", now), message("B", now)])
    h.publish = broken  # type: ignore[assignment,method-assign]
    await h.start(retry_s=0.5).start()
    await h.settle()
    assert calls == [2] and h.store.stats().pending == 2
    await h.advance(0.5)
    assert calls == [2, 2] and h.store.stats().pending == 2
    await h.advance(0.5)
    assert calls == [2, 2, 2] and h.store.stats().pending == 0


async def test_restart_publishes_overdue_messages_first_in_due_order(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule_many([message(f"O{i}", now + 1000 * i) for i in (3, 1, 2)])
    await h.store.schedule(message("FUTURE", now + 7_200_000))
    h.gate = asyncio.Event()
    await h.start().start()
    h.clock.advance(1.0)
    await h.until(lambda: len(h.calls) == 1)  # O1 is being published when the process dies
    h.clock.advance(3600.0)  # down for an hour
    h.gate = None
    await h.restart()  # claims are lost with the process: O1 is published again (at least once)
    await h.settle()
    assert h.ids() == ["O1", "O2", "O3"]
    assert h.lateness_s == [3600.0, 3599.0, 3598.0]
    assert h.store.stats().pending == 1 and h.store.stats().next_due_ms == now + 7_200_000


async def test_a_wall_clock_step_back_neither_stalls_nor_loses_messages(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule(message("A", now + 2000))
    await h.start().start()
    await h.settle()
    h.clock.step_wall(-3_600_000)  # NTP sets the clock back an hour
    await h.advance(2.0)
    assert h.ids() == ["A"]  # after 2 s, not after an hour and 2 s
    await h.store.schedule(message("B", h.store.now_ms() + 500))  # due times come from the store clock
    await h.advance(0.5)
    assert h.ids() == ["A", "B"]


async def test_a_clock_set_back_across_a_restart_does_not_stall_due_messages(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule(message("A", now + 1000))
    await h.restart()  # the store was written at `now`: its clock high-water mark is persisted
    await h.scheduler.close()  # type: ignore[union-attr]
    h.clock.step_wall(-600_000)
    await h.restart()
    assert h.store.now_ms() >= now
    await h.advance(1.0)
    assert h.ids() == ["A"]


async def test_published_but_not_recorded_is_recorded_later_and_not_published_again(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule(message("A", now + 100))
    await h.start(store_retry_s=1.0).start()
    await h.settle()
    h.kv.write_fault = "disk full"
    await h.advance(0.1)  # published; the "sent" batch fails; the scheduler waits for the store
    assert h.ids() == ["A"] and not h.store.healthy
    status = h.store.get("A")
    assert status is not None and status.state is DelayState.SCHEDULED
    assert (await h.store.cancel("A")).value == "already_sent"  # never "cancelled": it went out
    h.kv.write_fault = None
    await h.advance(1.0)
    status = h.store.get("A")
    assert status is not None and (status.state, status.at_ms) == (DelayState.SENT, now + 100)
    assert h.ids() == ["A"] and h.store.stats().pending == 0


async def test_done_markers_are_purged_after_the_retention(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule_many([message("A", now + 10), message("B", now + 60_000)])
    await h.start(purge_every_s=60.0).start()
    await h.advance(0.01)
    assert (await h.store.cancel("B")).value == "cancelled"
    await h.advance(23 * 3600.0)
    assert {s.state for s in (h.store.get("A"), h.store.get("B")) if s} == {
        DelayState.SENT,
        DelayState.CANCELLED,
    }
    await h.advance(3600.0)
    assert h.store.get("A") is None and h.store.get("B") is None
    assert h.kv.count("delay_done") == 0 and h.kv.count("delay_done_expiry") == 0


async def test_the_floor_advances_so_a_restart_seeks_past_what_was_published(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule_many([message(f"P{i}", now + i) for i in range(5)])
    await h.store.schedule(message("LATER", now + 60_000))
    await h.start().start()
    await h.advance(0.005)
    await h.advance(1.0)  # a batch a second later carries the raised floor
    await h.store.schedule(message("X", now + 120_000))
    await h.restart()
    floor = h.store.floor
    assert floor > b"%013d:P4" % (now + 4)
    assert floor <= b"%013d:LATER" % (now + 60_000)
    await h.advance(59.0)
    assert h.ids() == ["P0", "P1", "P2", "P3", "P4", "LATER"]


async def test_an_unreadable_value_is_left_in_place_and_the_rest_goes_out(h: Harness) -> None:
    now = h.store.now_ms()
    h.kv.write([Put(DUE_CF, due_key(now + 5, "JUNK"), b"\x07not a message")], sync=True)
    await h.store.schedule_many([message("A", now + 1), message("B", now + 9)])
    await h.start().start()
    await h.advance(0.01)
    assert h.ids() == ["A", "B"]
    assert h.kv.get(DUE_CF, due_key(now + 5, "JUNK")) is not None  # kept for an operator to look at
    assert h.scheduler is not None and h.scheduler.failure is None


async def test_a_gate_holds_back_a_message_until_it_lets_it_through(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule_many([message("MINE", now + 10), message("THEIRS", now + 10)])
    allowed = {"MINE"}
    sent: list[str] = []
    await h.start(
        gate=lambda id_: id_ in allowed, gate_retry_s=0.5, on_sent=lambda ms: sent.extend(m.id for m in ms)
    ).start()
    await h.advance(0.01)
    assert h.ids() == ["MINE"] and sent == ["MINE"]
    await h.advance(0.5)  # asked again: still not its turn
    assert h.ids() == ["MINE"]
    allowed.add("THEIRS")  # a take-over
    await h.advance(0.499)
    assert h.ids() == ["MINE"]
    await h.advance(0.001)
    assert h.ids() == ["MINE", "THEIRS"] and sent == ["MINE", "THEIRS"]
    assert h.lateness_s == [0.0, 1.0]


async def test_a_held_back_copy_dropped_meanwhile_is_never_published(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule(message("COPY", now + 10))
    await h.start(gate=lambda _id: False, gate_retry_s=0.5).start()
    await h.advance(0.01)
    assert await h.store.drop_published("COPY") is CancelOutcome.CANCELLED  # another replica's mark
    assert h.scheduler is not None
    h.scheduler.gate = None
    await h.advance(1.0)
    assert h.ids() == []
    status = h.store.get("COPY")
    assert status is not None and status.state is DelayState.SENT and status.sent_to is None
    assert await h.store.drop_published("UNKNOWN") is CancelOutcome.NOT_FOUND  # remembered as sent
    later = h.store.get("UNKNOWN")
    assert later is not None and later.state is DelayState.SENT


async def test_a_turned_away_message_is_asked_about_again_on_regate_not_on_a_short_tick(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule_many([message("MINE", now + 10), message("THEIRS", now + 10)])
    allowed = {"MINE"}
    asked: list[str] = []

    def gate(id_: str) -> bool:
        asked.append(id_)
        return id_ in allowed

    scheduler = h.start(gate=gate, gate_retry_s=2.0)
    await scheduler.start()
    await h.advance(0.01)
    assert h.ids() == ["MINE"] and asked == ["MINE", "THEIRS"]
    await h.advance(1.0)  # no re-ask every 250 ms: nothing about the gate changed
    assert asked == ["MINE", "THEIRS"]
    allowed.add("THEIRS")  # a take-over: the live replicas changed
    scheduler.regate()
    await h.settle()
    assert h.ids() == ["MINE", "THEIRS"] and asked == ["MINE", "THEIRS", "THEIRS"]
    assert h.lateness_s == [0.0, 1.0]


async def test_a_turned_away_message_is_asked_again_after_the_gate_retry_at_the_latest(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule(message("THEIRS", now + 10))
    allowed: set[str] = set()
    scheduler = h.start(gate=lambda id_: id_ in allowed, gate_retry_s=2.0)
    await scheduler.start()
    await h.advance(0.01)
    allowed.add("THEIRS")  # changed without a regate (a missed signal): the retry still finds it
    await h.advance(1.999)
    assert h.ids() == []
    await h.advance(0.001)
    assert h.ids() == ["THEIRS"]


async def test_a_pass_over_many_turned_away_messages_gives_the_loop_back(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule_many([message(f"T{i:04d}", now + 10) for i in range(3000)])
    await h.store.schedule(message("ZMINE", now + 10))  # sorts after every turned-away copy
    asked = 0
    most_between_ticks = 0

    def gate(id_: str) -> bool:
        nonlocal asked, most_between_ticks
        asked += 1
        most_between_ticks = max(most_between_ticks, asked)
        return id_ == "ZMINE"

    async def ticker() -> None:  # another task of the loop (beats, marks): it runs between passes
        nonlocal asked
        while True:
            await asyncio.sleep(0)
            asked = 0

    beside = asyncio.create_task(ticker())
    try:
        await h.start(gate=gate, batch_max=100).start()
        await h.advance(0.01)
        assert h.ids() == ["ZMINE"]
        assert most_between_ticks <= 4 * 100  # not the 3 001 of one pass over every due key
    finally:
        beside.cancel()


async def test_held_copies_asked_again_do_not_delay_a_newly_due_message(h: Harness) -> None:
    """Re-asking turned-away copies at their hold's end is a point read each, bounded per pass: the
    cursor is not moved back over them, so a message falling due at that moment is asked about after at
    most one batch of re-asks, not after every copy waiting for its mark (issue 28: 2-copy picking)."""
    now = h.store.now_ms()
    await h.store.schedule_many([message(f"T{i:04d}", now + 10) for i in range(1000)])
    asked: list[str] = []

    def gate(id_: str) -> bool:
        asked.append(id_)
        return id_ == "MINE"

    scheduler = h.start(gate=gate, gate_retry_s=2.0, batch_max=100)
    await scheduler.start()
    await h.advance(0.01)
    assert len(asked) == 1000 and h.ids() == []
    await h.store.schedule(message("MINE", now + 2010))  # due as the copies' holds end
    asked.clear()
    await h.advance(2.0)
    assert h.ids() == ["MINE"]
    assert asked.index("MINE") <= 100  # at most one batch of re-asks ahead of it
    assert scheduler.counts.rescanned == 0 and scheduler.counts.reasked == 1000


async def test_the_floor_advances_up_to_a_held_copy_and_past_it_once_its_mark_dropped_it(h: Harness) -> None:
    now = h.store.now_ms()
    await h.store.schedule_many([message("COPY", now + 10), message("MINE", now + 20)])
    scheduler = h.start(gate=lambda id_: id_ == "MINE", gate_retry_s=2.0)
    await scheduler.start()
    await h.advance(0.02)
    assert h.ids() == ["MINE"]
    held = due_key(now + 10, "COPY")
    assert h.store.floor == held  # not left where it was while a copy is held; never past a live key
    assert await h.store.drop_published("COPY") is CancelOutcome.CANCELLED  # its publisher's mark
    await h.advance(2.0)  # asked again by key: gone
    assert h.store.floor > due_key(now + 20, "MINE") and h.ids() == ["MINE"]


async def test_copies_turned_away_past_the_cap_are_still_asked_again_and_the_floor_stays_below_them(
    h: Harness,
) -> None:
    """Past ``gate_held_max`` a turned-away key is not kept: the scheduler scans again from the lowest
    of those, as a correct fallback, and the floor never passes one of them."""
    now = h.store.now_ms()
    ids = [f"T{i}" for i in range(5)]
    await h.store.schedule_many([message(id_, now + 10) for id_ in ids])
    await h.store.schedule(message("MINE", now + 20))
    allowed = {"MINE"}
    scheduler = h.start(gate=lambda id_: id_ in allowed, gate_retry_s=2.0, gate_held_max=2)
    await scheduler.start()
    await h.advance(0.02)
    assert h.ids() == ["MINE"]
    assert h.store.floor <= due_key(now + 10, "T0")
    allowed.update(["T1", "T3"])  # a take-over of some, without a regate: the retry finds them
    await h.advance(2.0)
    assert sorted(h.ids()) == ["MINE", "T1", "T3"]
    assert h.store.floor <= due_key(now + 10, "T0")
    allowed.update(ids)
    scheduler.regate()
    await h.settle()
    assert sorted(h.ids()) == ["MINE", *ids]
    assert len(h.ids()) == len(set(h.ids()))  # none twice
    assert h.store.floor > due_key(now + 10, "T4")  # nothing held any more


async def test_a_held_copy_its_mark_dropped_is_forgotten_not_asked_about_again(h: Harness) -> None:
    """Issue 28: with two copies, half of what a replica reads is turned away and its publisher's mark
    drops it within milliseconds; the scheduler forgets it then, instead of a point read at its re-ask
    time 2 s later (and holding it meanwhile against the cap)."""
    now = h.store.now_ms()
    await h.store.schedule_many([message(f"T{i}", now + 10) for i in range(3)])
    asked: list[str] = []

    def gate(id_: str) -> bool:
        asked.append(id_)
        return False

    scheduler = h.start(gate=gate, gate_retry_s=2.0)
    await scheduler.start()
    await h.advance(0.01)
    assert asked == ["T0", "T1", "T2"]
    assert await h.store.drop_published_many(["T0", "T1"]) == [CancelOutcome.CANCELLED] * 2  # marks
    assert scheduler.counts.forgotten == 2
    await h.advance(2.0)
    assert asked == ["T0", "T1", "T2", "T2"]  # only the copy still waiting for its mark
    assert scheduler.counts.reasked == 1
    assert h.store.floor == due_key(now + 10, "T2")  # not past the one still held
    assert await h.store.cancel("T2") is CancelOutcome.CANCELLED  # a cancel forgets it too
    assert scheduler.counts.forgotten == 3
    await h.advance(2.0)
    assert asked == ["T0", "T1", "T2", "T2"] and h.ids() == []
    assert h.store.floor > due_key(now + 10, "T2")


async def test_a_copy_the_gate_still_turns_away_is_asked_again_without_a_read_or_a_claim(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28: a re-ask asks the gate with the id in the key first; a copy still turned away (most of
    them: after a regate every held copy is asked again at once) is held again without reading its
    message or taking its claim, so a drop holding that claim meanwhile keeps it."""
    now = h.store.now_ms()
    await h.store.schedule_many([message(f"T{i}", now + 10) for i in range(3)])
    allowed: set[str] = set()
    scheduler = h.start(gate=lambda id_: id_ in allowed, gate_retry_s=2.0)
    await scheduler.start()
    await h.advance(0.01)
    reads: list[bytes] = []
    due_value = h.store.due_value
    monkeypatch.setattr(h.store, "due_value", lambda key: reads.append(key) or due_value(key))
    dropping = due_key(now + 10, "T1")
    assert h.store.queue.claim(dropping)  # a mark's drop of T1 in flight holds its claim
    await h.advance(2.0)
    assert scheduler.counts.reasked == 3 and reads == [] and h.ids() == []
    assert h.store.queue.is_claimed(dropping)  # not given back by the scheduler: it never took it
    h.store.queue.release([dropping])
    allowed.add("T2")
    scheduler.regate()
    await h.settle()
    assert h.ids() == ["T2"] and reads == [due_key(now + 10, "T2")]  # read once the gate says yes


async def test_a_publish_slot_is_free_while_the_call_before_waits_for_its_sent_record(h: Harness) -> None:
    """Issue 28: the "sent" record of a publish call waits for the store's writer (behind the intake's
    and the other copies' drops' synced writes); the next due message must not wait for it too."""
    now = h.store.now_ms()
    await h.store.schedule_many([message("A", now + 10), message("B", now + 20)])
    syncing, release = threading.Event(), threading.Event()
    sync = h.kv.sync_wal

    def slow_sync() -> None:  # the writer's WAL sync runs in a thread
        syncing.set()
        release.wait(SETTLE_S)
        sync()

    scheduler = h.start(max_in_flight=1)
    await scheduler.start()
    h.kv.sync_wal = slow_sync  # type: ignore[method-assign]
    try:
        h.clock.advance(0.01)
        await h.until(lambda: h.ids() == ["A"])
        assert await asyncio.to_thread(syncing.wait, SETTLE_S)  # A's record is stuck in the writer
        h.clock.advance(0.01)
        await h.until(lambda: h.ids() == ["A", "B"])  # B published all the same, in the only slot
        assert h.store.queue.is_claimed(due_key(now + 10, "A"))  # its record is still not synced
    finally:
        release.set()
    await h.settle()
    assert [h.store.get(i).state for i in ("A", "B")] == [DelayState.SENT] * 2  # type: ignore[union-attr]
    assert h.max_concurrent == 1


def _stuck_sync(h: Harness) -> tuple[threading.Event, threading.Event]:
    """Make the store writer's WAL sync wait (in its thread) until the second event is set."""
    syncing, release = threading.Event(), threading.Event()
    sync = h.kv.sync_wal

    def slow_sync() -> None:
        syncing.set()
        release.wait(SETTLE_S)
        sync()

    h.kv.sync_wal = slow_sync  # type: ignore[method-assign]
    return syncing, release


async def test_small_calls_waiting_for_their_sent_records_do_not_stop_picking(h: Harness) -> None:
    """Issue 28: with a steady trickle each publish call carries a few messages; what waits for its "sent"
    record is bounded in messages (max_in_flight x 3 x batch_max), not in calls, so a slow WAL sync does
    not hold back the next due message once 3 calls a slot wait for theirs."""
    now = h.store.now_ms()
    ids = [f"S{i}" for i in range(6)]
    await h.store.schedule_many([message(id_, now + 10 * (i + 1)) for i, id_ in enumerate(ids)])
    scheduler = h.start(max_in_flight=1)
    await scheduler.start()
    syncing, release = _stuck_sync(h)
    try:
        for i in range(len(ids)):
            h.clock.advance(0.01)
            await h.until(lambda i=i: h.ids() == ids[: i + 1])  # on main: S3 waited for S0's record
        assert await asyncio.to_thread(syncing.wait, SETTLE_S)
        assert all(h.store.queue.is_claimed(due_key(now + 10 * (i + 1), id_)) for i, id_ in enumerate(ids))
    finally:
        release.set()
    await h.settle()
    assert all(h.store.get(id_).state is DelayState.SENT for id_ in ids)  # type: ignore[union-attr]


async def test_published_and_not_recorded_stays_bounded_in_messages(h: Harness) -> None:
    """What a kill can publish twice (README "Stored before committed"): at most max_in_flight x 3 x
    batch_max messages published whose "sent" record is not stored; the seek loop waits for records then
    (stage record_cap) and goes on once they are stored."""
    now = h.store.now_ms()
    ids = [f"K{i}" for i in range(9)]
    await h.store.schedule_many([message(id_, now + 10) for id_ in ids])
    stages: list[str] = []
    scheduler = h.start(max_in_flight=1, batch_max=2)
    scheduler.on_stage = lambda stage, _s: stages.append(stage)
    await scheduler.start()
    syncing, release = _stuck_sync(h)
    try:
        h.clock.advance(0.01)
        await h.until(lambda: len(h.ids()) == 6)
        assert await asyncio.to_thread(syncing.wait, SETTLE_S)
        for _ in range(100):  # a few loop turns: the seek loop comes to wait for a record
            if scheduler._for_slot:
                break
            await asyncio.sleep(0)
        assert scheduler._for_slot
        assert len(h.ids()) == 6  # 3 x 1 x 2: the seventh waits for a record
    finally:
        release.set()
    await h.settle()
    assert sorted(h.ids()) == ids
    assert "record_cap" in stages


async def test_a_read_that_fails_part_way_through_a_pass_gives_back_what_the_pass_claimed(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pass of two: A is owned elsewhere (a cancel under way), so B is claimed and the pass reads on,
    # and that read fails. Before, B stayed claimed: never published until a restart.
    from rocksidecar.storage.errors import StorageError

    now = h.store.now_ms()
    for id_ in ("A", "B", "C"):
        await h.store.schedule(message(id_, now - 10))
    a_key = due_key(now - 10, "A")
    assert h.store.queue.claim(a_key)
    real_due = h.store.due
    reads = 0
    failed = asyncio.Event()

    def due(start: bytes, now_ms: int, limit: int) -> list[tuple[bytes, bytes]]:
        nonlocal reads
        reads += 1
        if reads == 2:
            failed.set()
            raise StorageError("IO error: an SST file could not be read")
        return real_due(start, now_ms, limit)

    monkeypatch.setattr(h.store, "due", due)
    await h.start(batch_max=2).start()
    await asyncio.wait_for(failed.wait(), SETTLE_S)
    h.store.queue.release([a_key])  # the cancel gave it back, as DelayStore does
    h.store.queue.notify(a_key)
    await h.advance(1.0)  # the seek task's pause after the failed read
    await h.until(lambda: sorted(h.ids()) == ["A", "B", "C"])
