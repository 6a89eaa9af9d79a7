"""The hot path's counters keep their label children (app.metrics): counts stay exact, past the bound too."""

from __future__ import annotations

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
