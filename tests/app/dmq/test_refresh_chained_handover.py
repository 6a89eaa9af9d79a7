"""Refresh across chained hand-overs (app.dmq.refresh ``Refresher.handed_over``): a copy handed from
publisher to publisher, each stopping before its first round as the publisher, is still refreshed in
time by the last one (review, session 31)."""

from __future__ import annotations

import functools

from rocksidecar.app.dmq.refresh import Refresher
from rocksidecar.delay.keys import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.delay.store import DelayStore
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.app.dmq.test_refresh_handover import REFRESH_MS, InnerTopic
from tests.delay.conftest import START_MS, message
from tests.fakes import FakeWallClock


def _was_mine(publisher: int, replica: int, _msg: object) -> bool:
    return publisher == replica


async def test_a_copy_handed_over_three_times_within_three_rounds_is_still_refreshed_in_time() -> None:
    """Rock-DMQ service mode (app.dmq.refresh): the replica that publishes a held message writes it to
    the inner topic again at each ``refresh_after`` of its age, so "recovery never reaches back further
    than refresh_after_ms plus one round". After a hand-over the next round looks back HANDOVER_ROUNDS
    (2) intervals before the earlier of its last round and the hand-over. Publishers A, B, C, D in that
    order for message M (created at 0, its mark at 8 000; rounds every 1 000, each replica's own
    phase; beats' timeout 0, the look-back's most favourable case). A's last round is at 7 950 (before
    the mark); A stops at 8 935, B at 9 925, C at 10 915, each just before its first round as the
    publisher, D's round just before each hand-over: nobody writes M again for its 8 000 mark, and D's
    round after its hand-over looks back only to 8 910. M's newest inner copy is then 2 x refresh_after
    old before the next mark refreshes it (with a 48 h refresh under a 72 h retention, which the README
    allows, the broker deletes it first: a replica rebuilding from the inner topic never gets M)."""
    clock = FakeWallClock(start_ms=START_MS)
    kv = MemoryKV(DELAY_CFS)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic)
    try:
        await store.schedule(message("M", START_MS + 10 * 86_400_000, created_ms=START_MS))
        topic = InnerTopic(clock)
        stage = [0]  # who publishes M: A (0), then B, C, D as each one before it stops
        refreshers = [
            Refresher(store, topic, "inner", REFRESH_MS, lambda _m, i=i: stage[0] == i)  # type: ignore[arg-type,misc]
            for i in range(4)
        ]
        phases = (950, 930, 920, 910)  # each replica's Periodic: its own phase in the 1 000 ms interval
        stops = {8935: 1, 9925: 2, 10915: 3}  # A, B, C stop (each just before its round), in turn
        for _ in range(20_000 // 5):
            clock.advance(0.005)
            at = clock.now_ms() - START_MS
            if at in stops:
                before = stage[0]
                stage[0] = stops[at]
                for i in range(stage[0], 4):  # the live ones see the live publishers change
                    refreshers[i].handed_over(functools.partial(_was_mine, before, i), clock.now_ms())
            for i, refresher in enumerate(refreshers):
                if i >= stage[0] and at % 1000 == phases[i]:
                    await refresher.round()
        written = topic.at()
        assert written and written[0] <= REFRESH_MS + 4000, (
            f"M's only inner copy (written at 0, refresh after {REFRESH_MS} ms) was not written again "
            f"for its {REFRESH_MS} ms mark; written again at {written} ms"
        )
    finally:
        await store.close()
        await writer.close()
