"""RecoveryReplay with an injected clock: pending messages brought forward when their cause recovers,
at a bounded rate, per topic or all; the ladder still governs those that fail again."""

from __future__ import annotations

import asyncio
import tracemalloc

from rocksidecar.retry.keys import PENDING_CF, pending_key
from rocksidecar.retry.policy import DEFAULT_LADDER_S, RetryPolicy
from rocksidecar.retry.recovery import MAX_REASONS, MAX_TOPICS, RecoveryReplay
from rocksidecar.storage.kv import Put
from tests.retry.conftest import Harness, Redeliverable, record

FAR_S = 600  # every message waits ten minutes for its rung


async def _spool(h: Harness, n: int, topic: str = "orders", prefix: str = "M") -> None:
    due = h.store.now_ms() + FAR_S * 1000
    for i in range(n):
        await h.store.spool(record(f"{prefix}{i}", topic, retry_count=3), due)


def _recovery(h: Harness, **kw: float) -> RecoveryReplay:
    assert h.loop is not None
    return RecoveryReplay(h.store, h.loop, clock=h.clock.monotonic, sleep=h.clock.sleep, **kw)  # type: ignore[arg-type]


async def _replayed(h: Harness, recovery: RecoveryReplay, topic: str | None = None, reason: str = "") -> None:
    """One round of an unpaced ``recovery`` for ``topic``, and the deliveries it started."""
    recovery.trigger(topic, reason=reason)
    await recovery.wait()
    await h.settle()


async def test_recovery_replays_waiting_messages_now_at_a_bounded_rate(h: Harness) -> None:
    await _spool(h, 100)
    await h.start_loop(workers=4).start()
    await h.settle()
    assert h.attempts == []  # their rung is ten minutes away
    recovery = _recovery(h, rate_per_s=50, chunk=10)
    started_ms = h.store.now_ms()
    recovery.trigger(reason="broker-a recovered")
    await h.until(lambda: len(h.delivered) == 10)  # the first chunk goes at once
    await h.settle()
    assert len(h.delivered) == 10  # the rest waits for the rate: 10 messages per 0.2 s
    for step in range(2, 11):
        h.clock.advance(0.2)
        await h.until(lambda step=step: len(h.delivered) == 10 * step)  # type: ignore[misc]
    h.clock.advance(0.2)  # the round's last pacing pause, then it finds nothing more
    await recovery.wait()
    await h.settle()  # the last deliveries' acks are written after the round ends
    assert sorted(h.delivered) == sorted(f"M{i}" for i in range(100))
    assert h.store.stats().pending == 0
    # 100 messages at 50/s, the first chunk at once: the last went 1.8 s later, not in a burst
    assert max(at for _, at in h.attempts) - started_ms == 1800
    assert all(at < started_ms + FAR_S * 1000 for _, at in h.attempts)
    [done] = recovery.rounds
    assert (done.handed_out, done.stopped_early, done.reasons) == (100, False, ("broker-a recovered",))


async def test_a_topic_trigger_replays_only_that_topic(h: Harness) -> None:
    await _spool(h, 5, "orders", "O")
    await _spool(h, 5, "payments", "P")
    await h.start_loop().start()
    await _replayed(h, _recovery(h), "payments", reason="route of payments appeared")
    assert sorted(h.delivered) == [f"P{i}" for i in range(5)]
    assert h.store.stats().pending == 5


async def test_messages_that_fail_again_climb_the_ladder_once_per_round(h: Harness) -> None:
    await _spool(h, 3)
    h.fail_always["M1"] = Redeliverable("SystemBusy")
    await h.start_loop().start()
    recovery = _recovery(h)
    now = h.store.now_ms()
    recovery.trigger()
    await recovery.wait()
    await h.settle()
    assert sorted(h.delivered) == ["M0", "M2"]
    assert [id_ for id_, _ in h.attempts].count("M1") == 1  # rescheduled, not taken again this round
    status = h.store.get("M1")
    assert status is not None and status.attempts == 4
    assert status.next_attempt_at_ms == now + round(DEFAULT_LADDER_S[4] * 1000)


async def test_a_round_stops_once_the_cause_is_back(h: Harness) -> None:
    await _spool(h, 10)
    await h.start_loop().start()
    recovery = _recovery(h)
    recovery.trigger(healthy=lambda: False)  # e.g. the broker was isolated again meanwhile
    await recovery.wait()
    await h.settle()
    assert h.attempts == []
    assert recovery.rounds[-1].stopped_early


async def test_a_replay_now_is_not_stopped_by_another_triggers_check(h: Harness) -> None:
    """An operator's replay (no check) joins a broker's recovery whose broker is isolated again: the
    round is the operator's too, so it replays everything (the admin API's retries:replay)."""
    await _spool(h, 10)
    await h.start_loop().start()
    recovery = _recovery(h)
    recovery.trigger(reason="broker-a recovered", healthy=lambda: False)
    recovery.trigger(reason="replay requested")  # before the round ran: one request for both
    await recovery.wait()
    await h.settle()
    assert sorted(h.delivered) == sorted(f"M{i}" for i in range(10))
    assert not recovery.rounds[-1].stopped_early


async def test_an_empty_store_starts_no_round(h: Harness) -> None:
    await h.start_loop().start()
    recovery = _recovery(h)
    recovery.trigger()
    assert not recovery.running
    await recovery.wait()
    assert recovery.rounds == []


async def test_triggers_during_a_round_merge_into_the_next(h: Harness) -> None:
    await _spool(h, 20, "orders", "O")
    await _spool(h, 20, "payments", "P")
    await h.start_loop().start()
    recovery = _recovery(h, rate_per_s=10, chunk=10)
    recovery.trigger("orders", reason="a")
    recovery.trigger("payments", reason="b")  # before the round started: one round for both
    while recovery.running:
        await h.until(lambda: bool(h.delivered))
        h.clock.advance(1.0)
        await h.settle()
    await recovery.wait()
    assert len(h.delivered) == 40 and len(recovery.rounds) == 1
    assert recovery.rounds[0].reasons == ("a", "b")


async def test_triggers_for_many_new_topics_during_a_round_are_bounded_and_leave_no_message_out(
    h: Harness,
) -> None:
    # A route appearing for each topic a client names triggers a round for it: the next round held every
    # topic and every reason (and its log line joined them all), however many names a client chose.
    await _spool(h, 3, "orders", "O")
    await _spool(h, 1, f"client-topic-{MAX_TOPICS + 500}", "C")  # a topic past the cap
    await h.start_loop(workers=1).start()
    recovery = _recovery(h, rate_per_s=1, chunk=1)
    recovery.trigger("orders", reason="route of orders appeared")
    await h.until(lambda: len(h.delivered) >= 1)  # the round is running, paced by the rate
    triggers = 2 * MAX_TOPICS
    for i in range(triggers):
        recovery.trigger(f"client-topic-{i}", reason=f"route of client-topic-{i} appeared")
    assert recovery._next is not None
    assert recovery._next.reasons == [f"route of client-topic-{i} appeared" for i in range(MAX_REASONS)]
    assert recovery._next.more_reasons == triggers - MAX_REASONS
    assert recovery._next.topics is None  # past MAX_TOPICS topics: every topic, not a set of them
    while recovery.running:
        await h.advance(1.0)
    await recovery.wait()
    await h.settle()
    assert sorted(h.delivered) == ["C0", "O0", "O1", "O2"]  # the topic past the cap too
    first, second = recovery.rounds
    assert first.reasons == ("route of orders appeared",)
    assert second.reasons == (
        *(f"route of client-topic-{i} appeared" for i in range(MAX_REASONS)),
        f"and {triggers - MAX_REASONS} more",
    )


async def test_no_round_after_close(h: Harness) -> None:
    await _spool(h, 3)
    await h.start_loop().start()
    recovery = _recovery(h)
    await recovery.close()
    recovery.trigger(reason="a send succeeded while stopping")
    assert not recovery.running and recovery.rounds == []


async def test_a_message_the_ladder_tried_after_the_round_started_is_left_to_the_ladder(h: Harness) -> None:
    """The round is behind the ladder's cursor: the ladder tries a message first, after the round started,
    and it fails again. Its next rung sorts ahead of the walk; the round finds it there and leaves it (it
    was tried since the recovery: at most one attempt per round, the ladder's counts as it)."""
    h.policies["slow"] = RetryPolicy(ladder_s=(100.0,))
    due = h.store.now_ms()
    await h.store.spool(record("O0"), due + 10_000)  # the round's first step; the walk goes on after it
    for i in (1, 2):
        await h.store.spool(record(f"O{i}"), due + FAR_S * 1000)
    h.fail_always["L"] = Redeliverable("SystemBusy")
    await h.start_loop().start()
    recovery = _recovery(h, rate_per_s=1, chunk=1)
    recovery.trigger(reason="broker-a recovered")
    await h.until(lambda: h.delivered == ["O0"])  # the round now paces for a second
    await h.store.spool(record("L", "slow"))  # due now, below the walk: the ladder's at once
    await h.settle()
    status = h.store.get("L")
    assert status is not None and status.attempts == 1  # rescheduled, 100 s ahead: ahead of the walk too
    while recovery.running:
        await h.advance(1.0)
    await recovery.wait()
    await h.settle()
    assert sorted(h.delivered) == ["O0", "O1", "O2"]
    assert [id_ for id_, _ in h.attempts].count("L") == 1
    [done] = recovery.rounds
    assert (done.handed_out, done.scanned) == (3, 4)  # L's new key walked, not taken


async def test_a_message_that_failed_before_the_round_started_is_taken(h: Harness) -> None:
    h.fail_always["M0"] = Redeliverable("SystemBusy")
    await h.store.spool(record("M0"))
    await h.start_loop().start()
    await h.settle()  # the ladder tried it: its next rung is 5 s ahead
    h.clock.advance(1.0)
    del h.fail_always["M0"]
    recovery = _recovery(h)
    await _replayed(h, recovery, reason="broker-a recovered")
    assert h.delivered == ["M0"] and recovery.rounds[-1].handed_out == 1


async def test_a_corrupt_value_is_handed_out_by_a_round_of_every_topic_only(h: Harness) -> None:
    """Its topic is unknown: a topic's round leaves it to the ladder, a round of all topics hands it to
    the workers, which quarantine it (out of pending: never walked again)."""
    bad = pending_key(h.store.now_ms() + FAR_S * 1000, 0, "orders", "BAD")
    h.kv.write([Put(PENDING_CF, bad, b"\x01\x00\x00\x00\x05{oops")], sync=True)
    await _spool(h, 1, "payments", "P")
    await h.start_loop().start()
    recovery = _recovery(h)
    await _replayed(h, recovery, "orders", reason="route of orders appeared")
    assert recovery.rounds[-1].handed_out == 0 and h.dead == []
    await _replayed(h, recovery, reason="replay requested")
    assert h.delivered == ["P0"] and [letter.id for letter in h.dead] == ["BAD"]
    assert h.kv.count(PENDING_CF) == 0


async def test_a_recovery_round_holds_no_memory_per_message_it_walks(h: Harness) -> None:
    """After an outage of hours with millions of pending messages, the round that starts when the broker
    comes back must not hold anything per message it walked (a set of the ids it handed out held ~100
    bytes each: 1 GB for 10 M, exactly when the sidecar is busiest). Measured: memory allocated by
    retry/recovery.py and retry/keys.py still alive just before the round's last chunk, for 20 000
    messages, stays bounded by the chunk."""
    n = 20_000
    due = h.store.now_ms() + FAR_S * 1000
    for start in range(0, n, 1000):
        await h.store.spool_many(
            [record(f"M{i:06d}", retry_count=3) for i in range(start, start + 1000)], due
        )
    loop = h.start_loop(workers=4, deliver_batch=h.deliver_batch, batch_max=32)
    await loop.start()
    await h.settle()
    snapshots: list[tracemalloc.Snapshot] = []
    pauses = 0
    chunk = 256

    async def pace(_seconds: float) -> None:  # the round's pacing pause: no wait, but look at memory
        nonlocal pauses
        pauses += 1
        if pauses == n // chunk - 1:
            snapshots.append(tracemalloc.take_snapshot())

    recovery = RecoveryReplay(
        h.store, loop, clock=h.clock.monotonic, sleep=pace, rate_per_s=1000.0, chunk=chunk
    )
    tracemalloc.start()
    try:
        recovery.trigger(reason="broker-a recovered")
        await asyncio.wait_for(recovery.wait(), 60)
    finally:
        tracemalloc.stop()
    await h.settle()
    assert h.store.pending_count == 0
    [snapshot] = snapshots
    mine = snapshot.filter_traces(
        [tracemalloc.Filter(True, "*retry/recovery.py"), tracemalloc.Filter(True, "*retry/keys.py")]
    )
    held = sum(stat.size for stat in mine.statistics("filename"))
    assert held < 256 * 1024, f"{held} bytes held by the round after {n - 2 * chunk} messages"
