"""Per-topic pull and consume rates (ConsumerRunningInfo's statusTable), on an injected clock."""

from __future__ import annotations

import pytest

from rocksidecar.rmq.consumer.topic_stats import TopicStats


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rates_are_over_the_last_minute_of_snapshots() -> None:
    clock = Clock()
    stats = TopicStats(clock)
    assert stats.status("T") == {
        "consumeFailedMsgs": 0, "consumeFailedTPS": 0.0, "consumeOKTPS": 0.0,
        "consumeRT": 0.0, "pullRT": 0.0, "pullTPS": 0.0,
    }  # fmt: skip
    for _ in range(60):  # a minute of one pull of 32 messages (20 ms) and 32 calls (5 ms, 2 failed) a second
        clock.now += 1
        stats.pulled("T", 32, 0.020)
        for i in range(32):
            stats.consumed("T", 0 if i < 2 else 1, 1 if i < 2 else 0, 0.005)
    got = stats.status("T")
    assert got["pullTPS"] == pytest.approx(32.0, rel=0.02)
    assert got["pullRT"] == pytest.approx(20.0)
    assert got["consumeRT"] == pytest.approx(5.0)
    assert got["consumeOKTPS"] == pytest.approx(30.0, rel=0.02)
    assert got["consumeFailedTPS"] == pytest.approx(2.0, rel=0.02)
    assert got["consumeFailedMsgs"] == 120  # the hour's sum
    assert list(got) == sorted(got)  # fastjson's field order


def test_a_quiet_minute_reads_zero_rates_but_keeps_the_hours_failures_and_rt() -> None:
    clock = Clock()
    stats = TopicStats(clock)
    for _ in range(10):
        clock.now += 1
        stats.consumed("T", 0, 1, 0.25)
    for _ in range(12):  # two quiet minutes, read now and then
        clock.now += 10
        stats.status("T")
    got = stats.status("T")
    assert got["consumeOKTPS"] == got["consumeFailedTPS"] == got["pullTPS"] == 0.0
    assert got["consumeFailedMsgs"] == 10
    assert got["consumeRT"] == pytest.approx(250.0)  # no call this minute: the hour's mean, as Java's


def test_topics_are_apart_and_forgotten_when_unsubscribed() -> None:
    clock = Clock()
    stats = TopicStats(clock)
    stats.status("A"), stats.status("%RETRY%g")  # a topic's rates start when it is first seen
    clock.now += 10
    stats.consumed("A", 5, 0, 0.001)
    stats.consumed("%RETRY%g", 1, 0, 0.001)
    assert stats.status("A")["consumeOKTPS"] == pytest.approx(0.5)
    assert stats.status("%RETRY%g")["consumeOKTPS"] == pytest.approx(0.1)
    stats.forget({"%RETRY%g"})
    assert stats.status("A")["consumeOKTPS"] == 0.0
