"""The hot path's counters (app.metrics): cached label children count exactly, past the bound too; the
per-message tally scrapes as the Counter it replaced."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from rocksidecar.app import metrics
from rocksidecar.app.metrics import Metrics


def sample(m: Metrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(f"rocksidecar_{name}", labels) or 0.0


def test_cached_children_count_exactly_within_and_beyond_the_bound() -> None:
    m = Metrics()
    m.count_messages("sent")
    m.count_messages("sent", 99)
    m.count_messages("spooled", 0)
    m.observe_attempt("broker-a", True)
    m.observe_attempt("broker-a", False)
    m.observe_attempt("broker-a", True)
    assert sample(m, "messages_total", outcome="sent") == 100
    assert sample(m, "send_attempts_total", broker="broker-a", result="ok") == 2
    assert sample(m, "send_attempts_total", broker="broker-a", result="error") == 1
    brokers = [f"b{i}" for i in range(metrics.MAX_CACHED_CHILDREN + 10)]
    for _ in range(2):
        for b in brokers:
            m.observe_attempt(b, True)
    assert len(m._attempt_children) == metrics.MAX_CACHED_CHILDREN
    assert all(sample(m, "send_attempts_total", broker=b, result="ok") == 2 for b in brokers)


def test_the_message_tally_scrapes_as_the_counter_it_replaces() -> None:
    counter_registry = CollectorRegistry()
    counter = Counter("rocksidecar_messages", "Messages.", ["outcome"], registry=counter_registry)
    tally_registry = CollectorRegistry()
    tally = metrics.Tally("rocksidecar_messages", "Messages.", "outcome")
    tally_registry.register(tally)
    for outcome, n in (("sent", 3), ("rejected", 1), ("sent", 2), ("spooled", 0)):
        counter.labels(outcome).inc(n)
        tally.inc(outcome, n)
    assert generate_latest(tally_registry) == generate_latest(counter_registry)
    with pytest.raises(ValueError, match="only goes up"):
        tally.inc("sent", -1)
    assert tally_registry.get_sample_value("rocksidecar_messages_total", {"outcome": "sent"}) == 5


def test_the_tally_counts_exactly_from_several_threads() -> None:
    tally = metrics.Tally("rocksidecar_messages", "Messages.", "outcome")

    def count() -> None:
        for _ in range(20_000):
            tally.inc("sent")

    threads = [threading.Thread(target=count) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    registry = CollectorRegistry()
    registry.register(tally)
    assert registry.get_sample_value("rocksidecar_messages_total", {"outcome": "sent"}) == 80_000


def test_the_delivery_tally_scrapes_as_the_counter_and_histogram_it_replaces() -> None:
    old = CollectorRegistry()
    counter = Counter("rocksidecar_subscription_deliveries", "D.", ["subscription", "outcome"], registry=old)
    histogram = Histogram(
        "rocksidecar_subscription_delivery_seconds",
        "L.",
        ["subscription"],
        buckets=metrics.LATENCY_BUCKETS,
        registry=old,
    )
    new = CollectorRegistry()
    tally = metrics.DeliveryTally(
        "rocksidecar_subscription_deliveries",
        "D.",
        "rocksidecar_subscription_delivery_seconds",
        "L.",
        metrics.LATENCY_BUCKETS,
    )
    new.register(tally)
    # on a bound, between bounds, below the first, past the last, zero
    seconds = [0.0005, 0.0007, 0.0001, 0.001, 0.3, 10.0, 11.5, 0.0, 2.5, 0.02]
    for i, s in enumerate(seconds):
        sub, outcome = ("orders", "ok") if i % 3 else ("audit", ("later", "failed", "error")[i % 4 % 3])
        counter.labels(sub, outcome).inc()
        histogram.labels(sub).observe(s)
        tally.observe(sub, outcome, s)
    assert generate_latest(new) == generate_latest(old)
    assert (
        new.get_sample_value("rocksidecar_subscription_delivery_seconds_count", {"subscription": "orders"})
        == 6
    )


def test_a_zeroed_counter_exports_each_value_from_zero() -> None:
    """The dmq service's one-label counters (reasons, outcomes, who went silent) are scraped at 0 before
    their first count: a rate or an alert never meets a missing series."""
    registry = CollectorRegistry()
    c = metrics.zeroed_counter("t_outcomes", "Outcomes.", "outcome", ("sent", "dropped"), registry)
    text = generate_latest(registry).decode()
    assert 't_outcomes_total{outcome="sent"} 0.0' in text
    assert 't_outcomes_total{outcome="dropped"} 0.0' in text
    c.labels("sent").inc(2)
    assert registry.get_sample_value("t_outcomes_total", {"outcome": "sent"}) == 2
    assert registry.get_sample_value("t_outcomes_total", {"outcome": "dropped"}) == 0


def test_a_latency_tally_without_a_label_scrapes_as_the_histogram_it_replaces() -> None:
    """The send latency: the same text before any observation (zero buckets) and after."""
    old = CollectorRegistry()
    histogram = Histogram(
        "rocksidecar_send_latency_seconds", "L.", buckets=metrics.LATENCY_BUCKETS, registry=old
    )
    new = CollectorRegistry()
    tally = metrics.LatencyTally("rocksidecar_send_latency_seconds", "L.", metrics.LATENCY_BUCKETS)
    new.register(tally)
    assert generate_latest(new) == generate_latest(old)
    for s in [0.0005, 0.0007, 0.0001, 0.001, 0.3, 10.0, 11.5, 0.0, 2.5, 0.02]:
        histogram.observe(s)
        tally.observe(s)
    assert generate_latest(new) == generate_latest(old)
    assert new.get_sample_value("rocksidecar_send_latency_seconds_count") == 10
