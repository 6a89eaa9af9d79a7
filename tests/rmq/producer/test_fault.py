"""Latency fault tolerance: the tables, isolation, pickOneAtLeast, observability (injected clock)."""

from __future__ import annotations

import random

import pytest

from rocksidecar.rmq.producer.fault import BrokerState, LatencyFaultTolerance
from tests.fakes import FakeClock


@pytest.mark.parametrize(
    ("latency_ms", "backoff_ms"),
    [
        (0, 0),
        (49, 0),
        (50, 0),
        (99, 0),
        (100, 0),
        (549, 0),
        (550, 30000),
        (999, 30000),
        (1000, 60000),
        (2000, 120000),
        (3000, 180000),
        (14999, 180000),
        (15000, 600000),
        (30000, 600000),
    ],
)
def test_default_tables(latency_ms: int, backoff_ms: int) -> None:
    assert LatencyFaultTolerance().not_available_duration_ms(latency_ms) == backoff_ms


def test_tables_are_configurable_and_checked() -> None:
    table = LatencyFaultTolerance([10, 20], [1000, 5000])
    assert table.not_available_duration_ms(15) == 1000 and table.not_available_duration_ms(25) == 5000
    with pytest.raises(ValueError):
        LatencyFaultTolerance([10, 20], [1])
    with pytest.raises(ValueError):
        LatencyFaultTolerance([20, 10], [1, 2])


def test_slow_broker_backs_off_for_its_rung() -> None:
    clock = FakeClock()
    table = LatencyFaultTolerance(clock=clock)
    table.update("a", 0.6, isolation=False)
    assert not table.is_available("a") and table.is_available("b")
    clock.advance(29.9)
    assert not table.is_available("a")
    clock.advance(0.1)
    assert table.is_available("a")


def test_failure_isolates_as_30_s_latency() -> None:
    clock = FakeClock()
    table = LatencyFaultTolerance(clock=clock)
    table.update("a", 0.002, isolation=True, unreachable=True)
    (row,) = table.snapshot()
    assert row.state == "isolated" and row.not_available_for_s == pytest.approx(600.0)
    assert table.unreachable_brokers() == ["a"]
    clock.advance(600)
    assert table.is_available("a") and table.unreachable_brokers() == []


def test_a_fast_answer_ends_the_backoff() -> None:
    clock = FakeClock()
    table = LatencyFaultTolerance(clock=clock)
    table.update("a", 0.6, isolation=False)
    table.update("a", 0.01, isolation=False)
    assert table.is_available("a")


def test_recovery_probe_lifts_isolation() -> None:
    table = LatencyFaultTolerance(clock=FakeClock())
    table.update("a", 0.001, isolation=True, unreachable=True)
    table.mark_recovered("a")
    assert table.is_available("a") and table.snapshot()[0].state == "available"


def test_pick_one_at_least_prefers_available_then_low_latency_and_rotates_over_better_half() -> None:
    clock = FakeClock()
    table = LatencyFaultTolerance(clock=clock, rng=random.Random(1))
    table.update("slow", 2.5, isolation=False)  # backoff 120 s
    table.update("slower", 3.5, isolation=False)  # backoff 180 s
    table.update("dead", 0.001, isolation=True)  # 600 s, latency tiny
    table.update("ok", 0.6, isolation=False)  # backoff 30 s
    clock.advance(31)  # "ok" is available again
    picks = [table.pick_one_at_least(["slow", "slower", "dead", "ok"]) for _ in range(6)]
    # sorted: ok (available), then unavailable by latency: dead (1 ms), slow, slower; better half = ok, dead
    assert picks == ["ok", "dead", "ok", "dead", "ok", "dead"]
    assert table.pick_one_at_least(["slower"]) == "slower"
    assert table.pick_one_at_least([]) is None


def test_snapshot_lists_known_brokers_even_before_any_send() -> None:
    clock = FakeClock()
    table = LatencyFaultTolerance(clock=clock)
    table.update("a", 0.7, isolation=False)
    rows = {r.broker: r for r in table.snapshot(["a", "b"])}
    assert rows["a"].state == "backoff" and rows["a"].latency_ms == pytest.approx(700)
    assert rows["b"].state == "available" and rows["b"].not_available_for_s == 0


def test_a_broker_state_row_as_json_rounds_to_the_microsecond() -> None:
    row = BrokerState("broker-a", latency_ms=12.34567, not_available_for_s=0.5004999, state="backoff")
    assert row.to_json() == {
        "broker": "broker-a",
        "state": "backoff",
        "latencyMs": 12.346,
        "notAvailableForS": 0.5,
    }


def test_a_table_whose_lowest_rung_is_reached_by_any_latency_backs_off_every_send() -> None:
    clock = FakeClock()
    table = LatencyFaultTolerance([0, 20], [1000, 5000], clock=clock)
    table.update("a", 0.0, isolation=False)  # 0 ms reaches the 0 ms rung: 1 s
    assert not table.is_available("a")
    clock.advance(1.0)
    table.update("a", 0.0199, isolation=False)
    assert table.snapshot()[0].not_available_for_s == pytest.approx(1.0)


def test_the_state_listener_hears_each_transition_once_as_the_same_broker_is_updated() -> None:
    clock = FakeClock()
    heard: list[tuple[str, str]] = []
    table = LatencyFaultTolerance(clock=clock, on_change=lambda b, state, _r, _s: heard.append((b, state)))
    table.update("a", 0.01, isolation=False)  # first seen, fast: nothing to say
    table.update("a", 0.6, isolation=False)  # slow: backs off 30 s
    table.update("a", 0.7, isolation=False)  # still backing off: no second report
    table.update("a", 0.01, isolation=True, reason="boom")  # fails while backing off
    table.update("a", 0.01, isolation=True)  # still isolated: once only
    before = table.snapshot()
    table.update("a", 0.01, isolation=False)  # a send succeeds
    table.update("a", 0.01, isolation=False)  # and another: it was not failed any more
    assert heard == [("a", "backoff"), ("a", "isolated"), ("a", "recovered")]
    assert before[0].state == "isolated" and table.snapshot()[0].state == "available"  # rows are copies
    clock.advance(1)
    table.update("a", 0.6, isolation=False)
    assert heard[-1] == ("a", "backoff")
