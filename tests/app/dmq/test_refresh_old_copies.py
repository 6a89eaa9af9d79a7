"""Refresh of copies whose created_ms is no store time (app.dmq.refresh): d8c7baa made a Rock-DMQ copy's
created_ms the broker's store time of its inner message; a replica of an earlier version kept the
producer's born timestamp there, which may lie far in the future. Such a copy's age is unknown: it is
refreshed in the next round and its created_ms rewritten to the refresh's time (review, session 31; the
first test moved here from tests/storage/test_zz_review_upgrade.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from rocksidecar.app.dmq.inner import CLOCK_SLACK_MS
from rocksidecar.app.dmq.refresh import Refresher
from rocksidecar.delay import DelayedMessage, DelayState
from rocksidecar.delay.keys import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.delay.keys import DUE_CF
from rocksidecar.delay.message import decode_message
from rocksidecar.delay.store import DelayStore, stored_ops
from rocksidecar.rmq import Message
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Put
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FakeWallClock

# --- a Rock-DMQ copy an earlier replica stored keeps a created_ms that is no store time -------------
# 2e91284 (the parent of d8c7baa, 2026-11-29): its inner.parse set a copy's created_ms to the producer's
# born timestamp. For an inner message stored by the broker at COPY_STORED_MS, born (by a producer whose
# clock runs a year ahead) at COPY_STORED_MS + 365 d, due 30 d later, its DelayStore.schedule wrote:
COPY_STORED_MS = 1_764_000_000_000
COPY_ID = "0A0000010000000000000000000000EF"
COPY_DUE_KEY = b"1766592000000:" + COPY_ID.encode()
COPY_VALUE = bytes.fromhex(
    "01000000a17b226964223a223041303030303031303030303030303030303030303030303030303030304546222c2274"
    "6f706963223a226f7264657273222c2274616773223a6e756c6c2c226b657973223a5b5d2c2270726f7073223a7b7d"
    "2c22736b223a6e756c6c2c2274797065223a226f7264657273222c2263726561746564223a31373935353336303030"
    "3030302c22647565223a313736363539323030303030307d68656c6c6f"
)
COPY_ROWS = [
    Put("delay_due", COPY_DUE_KEY, COPY_VALUE),
    Put("delay_index", COPY_ID.encode() + b"\x00" + b"1766592000000", b""),
    Put("delay_meta", b"clock_high_water_ms", b"1764000000000"),
]
REFRESH_MS = 8_000  # rounds every second
ROUNDS = REFRESH_MS // 1000


class _InnerTopic:
    def __init__(self, during: Callable[[], Awaitable[object]] | None = None) -> None:
        self.sent: list[Message] = []
        self.during = during  # awaited inside each send: what happens while a refresh is in flight

    async def send(self, msg: Message, *, sharding_key: str | None = None) -> None:
        if self.during is not None:
            await self.during()
        self.sent.append(msg)


def _stored(kv: MemoryKV, key: bytes = COPY_DUE_KEY) -> DelayedMessage | None:
    raw = kv.get(DUE_CF, key)
    return None if raw is None else decode_message(raw)


async def test_an_old_replicas_copy_is_refreshed_on_the_inner_topic_after_the_upgrade() -> None:
    """d8c7baa made a copy's age count from the broker's store time, because a born timestamp in the
    future kept the copy from ever being refreshed (a replica losing its volume after the inner topic's
    retention could not rebuild it). Copies an earlier replica stored keep the born timestamp in
    created_ms, and today's Refresher reads it as a store time: this one, stored by the broker at
    COPY_STORED_MS and due 30 days later, is expected on the inner topic again once REFRESH_MS has passed
    (as the same message stored today is); actually it is not refreshed for a year, so after the
    retention its only copies are the replicas' volumes."""
    old = decode_message(COPY_VALUE)
    assert old.due_ms == COPY_STORED_MS + 30 * 86_400_000  # read as the old replica stored it
    clock = FakeWallClock(start_ms=COPY_STORED_MS)
    kv = MemoryKV(DELAY_CFS)
    kv.write(COPY_ROWS, sync=True)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic)
    topic = _InnerTopic()
    refresher = Refresher(store, topic, "inner", REFRESH_MS, lambda _m: True)  # type: ignore[arg-type]
    try:
        for _ in range(2 * REFRESH_MS // 1000):  # two refresh periods of rounds, one a second
            clock.advance(1.0)
            await refresher.round()
        assert [m.id for m in topic.sent][:1] == [COPY_ID]
    finally:
        await store.close()
        await writer.close()


async def test_an_old_copy_is_refreshed_at_once_then_on_the_marks_of_its_rewritten_created_ms() -> None:
    """The copy of unknown age is written again in the first round, its stored created_ms becomes that
    round's time (everything else as it was), and from then on it is refreshed every REFRESH_MS like any
    copy: not in every round for the year its born timestamp is ahead."""
    clock = FakeWallClock(start_ms=COPY_STORED_MS)
    kv = MemoryKV(DELAY_CFS)
    kv.write(COPY_ROWS, sync=True)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic)
    topic = _InnerTopic()
    refresher = Refresher(store, topic, "inner", REFRESH_MS, lambda _m: True)  # type: ignore[arg-type]
    try:
        sent_in: list[int] = []  # the rounds (1, 2, ...) that wrote the copy again
        refreshed_at = 0
        for n in range(1, 3 * ROUNDS + 1):
            clock.advance(1.0)
            if await refresher.round():
                sent_in.append(n)
                refreshed_at = refreshed_at or clock.now_ms()
        assert sent_in == [1, 1 + ROUNDS, 1 + 2 * ROUNDS]
        stored = _stored(kv)
        assert stored is not None
        assert stored.created_ms == refreshed_at == COPY_STORED_MS + 1000
        old = decode_message(COPY_VALUE)
        assert stored == dataclasses.replace(old, created_ms=refreshed_at)  # the rest as it was
    finally:
        await store.close()
        await writer.close()


async def test_a_copy_cancelled_while_its_refresh_is_in_flight_is_not_brought_back() -> None:
    """Rewriting created_ms writes the copy only where it is still stored as the round read it: a cancel
    (or a publish) in between wins, and the cancelled message is never stored, so never published."""
    clock = FakeWallClock(start_ms=COPY_STORED_MS)
    kv = MemoryKV(DELAY_CFS)
    kv.write(COPY_ROWS, sync=True)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic)
    topic = _InnerTopic(during=lambda: store.cancel(COPY_ID))
    refresher = Refresher(store, topic, "inner", REFRESH_MS, lambda _m: True)  # type: ignore[arg-type]
    try:
        clock.advance(1.0)
        assert await refresher.round() == 1
        assert _stored(kv) is None
        status = store.get(COPY_ID)
        assert status is not None and status.state is DelayState.CANCELLED
    finally:
        await store.close()
        await writer.close()


async def test_copies_of_known_age_are_not_rewritten_and_a_skew_within_the_slack_waits_for_its_mark() -> None:
    """A copy stored today is refreshed at its marks with no write to the store; one whose broker clock
    ran ahead within CLOCK_SLACK_MS is taken as a store time too (not refreshed at once)."""
    clock = FakeWallClock(start_ms=COPY_STORED_MS)
    kv = MemoryKV(DELAY_CFS)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic)
    due = COPY_STORED_MS + 30 * 86_400_000
    today = DelayedMessage("T", "orders", b"t", due_ms=due, created_ms=COPY_STORED_MS)
    ahead = DelayedMessage("A", "orders", b"a", due_ms=due, created_ms=COPY_STORED_MS + CLOCK_SLACK_MS)
    topic = _InnerTopic()
    refresher = Refresher(store, topic, "inner", REFRESH_MS, lambda _m: True)  # type: ignore[arg-type]
    try:
        await store.schedule_many([today, ahead])
        for _ in range(2 * ROUNDS):
            clock.advance(1.0)
            await refresher.round()
        assert [m.id for m in topic.sent] == ["T", "T"]
        assert _stored(kv, stored_ops(today)[0]) == today
        assert _stored(kv, stored_ops(ahead)[0]) == ahead
    finally:
        await store.close()
        await writer.close()
