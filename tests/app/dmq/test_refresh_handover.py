"""Refresh across a hand-over (app.dmq.refresh ``Refresher.handed_over``, wired by Replication's
``_live_changed``): a copy whose refresh mark passed after its previous publisher's last round is
refreshed by the replica it passes to, in time; a copy that stays with its publisher is not refreshed
twice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rocksidecar.app.config import Settings
from rocksidecar.app.dmq import beats
from rocksidecar.app.dmq.options import DmqOptions
from rocksidecar.app.dmq.refresh import Refresher
from rocksidecar.app.dmq.service import DmqService
from rocksidecar.app.wiring import COLUMN_FAMILIES
from rocksidecar.delay.keys import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.delay.store import DelayStore
from rocksidecar.rmq import Message
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.delay.conftest import START_MS, message
from tests.fakes import FakeWallClock

NAMES = ("dmq-0", "dmq-1", "dmq-2")
REFRESH_MS = 8000  # rounds every 1 000 ms


class InnerTopic:
    """The producer's send as the refresher uses it: records what was written to the inner topic."""

    def __init__(self, clock: FakeWallClock) -> None:
        self.sent: list[tuple[int, Message]] = []  # (wall ms, message)
        self.clock = clock

    async def send(self, msg: Message, *, sharding_key: str | None = None) -> None:
        self.sent.append((self.clock.now_ms(), msg))

    def at(self) -> list[int]:
        """When each was written, from START_MS."""
        return [at - START_MS for at, _ in self.sent]


@pytest.fixture
def clock() -> FakeWallClock:
    return FakeWallClock(start_ms=START_MS)


@pytest.fixture
async def stores(clock: FakeWallClock) -> AsyncIterator[list[DelayStore]]:
    """Two delay stores (two replicas') on the test's clock."""
    made: list[tuple[DelayStore, GroupCommitWriter]] = []
    for _ in range(2):
        kv = MemoryKV(DELAY_CFS)
        writer = GroupCommitWriter(kv)
        made.append((DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic), writer))
    yield [s for s, _ in made]
    for s, w in made:
        await s.close()
        await w.close()


async def test_a_copy_whose_refresh_mark_passed_just_before_a_take_over_is_still_refreshed_in_time(
    clock: FakeWallClock, stores: list[DelayStore]
) -> None:
    """README ("Refresh"): the replica that publishes a message writes it to the inner topic again each
    refresh-after of its age, "so the inner topic always has every pending message written within that
    time". Each Refresher looks at the age marks crossed since its own last round, among the copies
    that are ``mine`` at that round: a mark crossed while the first holder was publishing, but after
    that holder's last round, was skipped by the second holder (not its turn then) and by the first
    (stopped or crashed before its next round), until its next mark: its newest inner copy up to twice
    refresh-after old (48 h refresh with 72 h retention: 24 h without any copy). Every stop of a replica
    (a rolling upgrade) did this to the copies whose mark fell in its last refresh interval. Now the
    hand-over (Replication tells the refresher when the live set changes) makes the next round look
    back to the previous publisher's last possible round. (Review, session 29.)"""
    store_a, store_b = stores
    topic = InnerTopic(clock)
    copy = message("M", START_MS + 10 * 86_400_000, created_ms=START_MS)  # the inner copy written at START
    await store_a.schedule(copy)
    await store_b.schedule(copy)
    a_live = [True]
    # "a" ranks first for M, "b" second: each refreshes M only while it would publish it
    refresher_a = Refresher(store_a, topic, "inner", REFRESH_MS, lambda _m: a_live[0])  # type: ignore[arg-type]
    refresher_b = Refresher(store_b, topic, "inner", REFRESH_MS, lambda _m: not a_live[0])  # type: ignore[arg-type]
    # b's rounds fall on whole seconds, a's half a second later (each replica's own Periodic)
    for _ in range(40):  # 20 s in steps of 500 ms
        clock.advance(0.5)
        at = clock.now_ms() - START_MS
        if at % 1000 == 0:
            await refresher_b.round()
        elif a_live[0]:
            await refresher_a.round()
        if at == 8000:
            # M's copy turned 8 s old at 8 000; a's next round would be at 8 500: a stops first
            # (SIGTERM for a rolling upgrade, or a crash), and b publishes (and refreshes) M now:
            # b's Replication sees the live set change (what b published before: not M)
            a_live[0] = False
            refresher_b.handed_over(lambda _m: False, clock.now_ms())
    # written again at the latest one scan after b took over (by 10 000): never older than
    # refresh-after plus a scan or two on the inner topic
    written = topic.at()
    assert written and written[0] <= REFRESH_MS + 2000, (
        f"M's only inner copy was {REFRESH_MS + 2000} ms old (refresh after {REFRESH_MS} ms) and "
        f"not written again; refreshed at {written} ms"
    )
    assert written == [9000, 16000]  # once per mark: at the hand-over's round, then at its next mark


async def test_a_copy_that_stays_with_its_publisher_across_a_hand_over_is_not_refreshed_twice(
    clock: FakeWallClock, stores: list[DelayStore]
) -> None:
    """The look-back is for the copies that were not this replica's before the hand-over: its own it
    refreshed in its own rounds already (each a duplicate write on the inner topic for every replica)."""
    store = stores[0]
    topic = InnerTopic(clock)
    await store.schedule(message("OWN", START_MS + 86_400_000, created_ms=START_MS))
    await store.schedule(message("NEW", START_MS + 86_400_000, created_ms=START_MS + 200))
    own = [True]  # NEW becomes this replica's at the hand-over
    refresher = Refresher(store, topic, "inner", REFRESH_MS, lambda m: m.id == "OWN" or not own[0])  # type: ignore[arg-type]
    clock.advance(7.5)
    await refresher.round()
    clock.advance(1.0)  # 8 500: OWN crossed its mark at 8 000, NEW at 8 200
    await refresher.round()
    assert [m.id for _, m in topic.sent] == ["OWN"]
    own[0] = False
    refresher.handed_over(lambda m: m.id == "OWN", clock.now_ms())
    clock.advance(1.0)
    await refresher.round()
    assert [m.id for _, m in topic.sent] == ["OWN", "NEW"]  # NEW once, OWN not again
    assert topic.at() == [8500, 9500]


async def test_a_round_that_fails_keeps_the_hand_over_for_the_next(
    clock: FakeWallClock, stores: list[DelayStore]
) -> None:
    store = stores[0]
    topic = InnerTopic(clock)
    await store.schedule(message("NEW", START_MS + 86_400_000, created_ms=START_MS))
    refresher = Refresher(store, topic, "inner", REFRESH_MS, lambda _m: True)  # type: ignore[arg-type]
    clock.advance(8.5)
    refresher._last_round_ms = clock.now_ms()  # its last round was after NEW's mark (not its own then)
    refresher.handed_over(lambda _m: False, clock.now_ms())
    clock.advance(1.0)
    real_due = store.due

    def failing(*_a: object) -> list[tuple[bytes, bytes]]:
        raise OSError("read failed")

    store.due = failing  # type: ignore[method-assign,assignment]
    with pytest.raises(OSError):
        await refresher.round()
    store.due = real_due  # type: ignore[method-assign]
    assert await refresher.round() == 1


async def test_replication_hands_over_to_the_refresher_when_a_publisher_goes(
    clock: FakeWallClock, stores: list[DelayStore], tmp_path: Path
) -> None:
    """The wiring: presence reports a change of the live set (here the first holder's beats go stale);
    Replication tells its refresher, with what this replica published before."""
    me = NAMES[1]
    options = DmqOptions(replicas=",".join(NAMES), instance_name=me, refresh_after_s=REFRESH_MS / 1000)
    settings = Settings(namesrv=("127.0.0.1:9",), data_dir=str(tmp_path / me))
    service = DmqService(settings, options, kv=MemoryKV(COLUMN_FAMILIES))
    rep = service.replication
    assert rep is not None
    first = NAMES[0]
    id_ = next(i for i in (f"id{n}" for n in range(1000)) if list(rep.replicas.holders(i)) == [first, me])
    store = stores[0]
    topic = InnerTopic(clock)
    rep.refresher.store, rep.refresher.producer = store, topic  # type: ignore[assignment]
    rep.beats._clock_ms = clock.now_ms
    rep.presence.joined = True
    rep.presence._others = frozenset({first})
    try:
        await store.schedule(message(id_, START_MS + 86_400_000, created_ms=START_MS))
        clock.advance(REFRESH_MS / 1000 - 1.9)  # the first holder's last beat, then it freezes
        rep.beats.heard(beats.Beat(first, clock.now_ms()))
        clock.advance(2.0)  # its copy crossed its mark at 8 000
        rep.beats.heard(beats.Beat(me, clock.now_ms()))
        rep.presence._report()  # both live: not this replica's turn
        await rep.refresher.round()
        assert topic.sent == []
        clock.advance(rep.beats.timeout_ms / 1000)
        rep.beats.heard(beats.Beat(me, clock.now_ms()))
        rep.presence._report()  # the first holder's beat went stale: the copy is this replica's now
        assert rep.presence.live == {me}
        clock.advance(1.0)
        await rep.refresher.round()
        assert [m.id for _, m in topic.sent] == [id_]
    finally:
        await service.delay.close()
        await service.writer.close()
