"""rocksidecar_consumer_queues_owned counts a subscription's own topic queues and its group's %RETRY%
queues apart (label kind), so a subscription on a 4-queue topic over 2 brokers shows 4, not 6."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from rocksidecar.app.metrics import ConsumerCollector


def test_retry_queues_are_counted_apart_from_the_topics() -> None:
    rows = [
        *(("orders", "Orders", b, q, 0, 0) for b in ("broker-a", "broker-b") for q in (0, 1)),
        *(("orders", "%RETRY%orders-app", b, 0, 0, 0) for b in ("broker-a", "broker-b")),
        ("audit", "Audit", "broker-a", 0, 3, 1),
    ]
    registry = CollectorRegistry()
    counts = {"orders": 1, "audit": 2, "idle": 0}
    registry.register(ConsumerCollector(lambda: rows, lambda: counts, lambda: {"orders": 3}, dict))

    def owned(sub: str, kind: str) -> float | None:
        return registry.get_sample_value(
            "rocksidecar_consumer_queues_owned", {"subscription": sub, "kind": kind}
        )

    assert (owned("orders", "topic"), owned("orders", "retry")) == (4, 2)
    assert (owned("audit", "topic"), owned("audit", "retry")) == (1, 0)
    assert (owned("idle", "topic"), owned("idle", "retry")) == (0, 0)  # a subscription owning nothing yet


def test_undecodable_messages_are_counted_per_subscription() -> None:
    registry = CollectorRegistry()
    registry.register(ConsumerCollector(list, lambda: {"orders": 1}, lambda: {"orders": 3, "audit": 0}, dict))
    value = registry.get_sample_value
    assert value("rocksidecar_consumer_undecodable_total", {"subscription": "orders"}) == 3
    assert value("rocksidecar_consumer_undecodable_total", {"subscription": "audit"}) == 0
