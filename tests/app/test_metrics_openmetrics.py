"""/metrics in both formats a scraper may ask for: every family name once. The dead letters held were a
gauge named rocksidecar_dead_letters, the OpenMetrics family of the counter rocksidecar_dead_letters_total
too; a strict parser (Prometheus' OpenMetrics one among them) refused the whole scrape."""

from __future__ import annotations

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as text_families

from rocksidecar.app.metrics import (
    CoalesceCollector,
    ConsumerCollector,
    Metrics,
    MsgTraceCollector,
    StateCollector,
    TransactionCollector,
    exposition,
)
from rocksidecar.rmq.producer.fault import BrokerState

STORE = {"retry_pending": 3.0, "retry_oldest_age_seconds": 1.5, "dead_letters": 2.0, "delay_scheduled": 4.0}


def served() -> Metrics:
    """Metrics with every collector the sidecar may add (app/assembly.py), each with a row to show."""
    m = Metrics()
    m.dead_letters.inc()
    m.add_state(StateCollector(lambda: [BrokerState("broker-a", 2.0, 0.0, "available")], lambda: STORE))
    m.add_state(MsgTraceCollector(lambda: (1, 0, 0)))
    m.add_state(TransactionCollector(lambda: {"committed": 1}, lambda: (0, None)))
    m.add_state(CoalesceCollector(lambda: (1, 2)))
    m.add_state(
        ConsumerCollector(
            lambda: [("sub", "Orders", "broker-a", 0, 5, 1)], lambda: {"sub": 1}, lambda: {}, lambda: {}
        )
    )
    return m


def test_openmetrics_names_each_family_once() -> None:
    body, content_type = exposition(served().registry, "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    families = {f.name: f for f in openmetrics_families(body.decode())}  # raises on a clashing name
    assert families["rocksidecar_dead_letters"].type == "counter"
    assert families["rocksidecar_dead_letters_stored"].type == "gauge"
    [held] = families["rocksidecar_dead_letters_stored"].samples
    assert held.value == 2.0


def test_the_classic_text_format_shows_both_too() -> None:
    body, content_type = exposition(served().registry, None)
    assert content_type.startswith("text/plain")
    families = [f.name for f in text_families(body.decode())]
    assert len(families) == len(set(families))
    samples = {s.name: s.value for f in text_families(body.decode()) for s in f.samples}
    assert samples["rocksidecar_dead_letters_total"] == 1.0
    assert samples["rocksidecar_dead_letters_stored"] == 2.0
    assert "rocksidecar_dead_letters" not in samples
