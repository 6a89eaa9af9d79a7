"""RecoveryReplay with an injected clock: pending messages brought forward when their cause recovers,
at a bounded rate, per topic or all; the ladder still governs those that fail again."""

from __future__ import annotations

from rocksidecar.retry.policy import DEFAULT_LADDER_S
from rocksidecar.retry.recovery import MAX_REASONS, MAX_TOPICS, RecoveryReplay
from tests.retry.conftest import Harness, Redeliverable, record

FAR_S = 600  # every message waits ten minutes for its rung


async def _spool(h: Harness, n: int, topic: str = "orders", prefix: str = "M") -> None:
    due = h.store.now_ms() + FAR_S * 1000
    for i in range(n):
        await h.store.spool(record(f"{prefix}{i}", topic, retry_count=3), due)


def _recovery(h: Harness, **kw: float) -> RecoveryReplay:
    assert h.loop is not None
    return RecoveryReplay(h.store, h.loop, clock=h.clock.monotonic, sleep=h.clock.sleep, **kw)  # type: ignore[arg-type]


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
    recovery = _recovery(h)
    recovery.trigger("payments", reason="route of payments appeared")
    await recovery.wait()
    await h.settle()
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
