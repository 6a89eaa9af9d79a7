"""The Grafana dashboard: valid JSON, the metric names of the service contract, every required view."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.deploy.paths import CHART

DASHBOARD = json.loads((CHART / "dashboards" / "rocksidecar.json").read_text())
# Issue 5's metric contract (prefix rocksidecar_), with the kind each one has.
HISTOGRAMS = {
    "rocksidecar_send_latency_seconds",
    "rocksidecar_delay_lateness_seconds",
    "rocksidecar_subscription_delivery_seconds",
}
COUNTERS = {
    "rocksidecar_requests_total",
    "rocksidecar_messages_total",
    "rocksidecar_send_attempts_total",
    "rocksidecar_replays_total",
    "rocksidecar_dead_letters_total",
    "rocksidecar_subscription_deliveries_total",
    "rocksidecar_consumer_undecodable_total",
    "rocksidecar_dmq_inner_messages_total",  # issue 14: Rock-DMQ service
}
GAUGES = {
    "rocksidecar_broker_backoff_seconds",
    "rocksidecar_broker_latency_seconds",
    "rocksidecar_retry_pending",
    "rocksidecar_retry_oldest_age_seconds",
    "rocksidecar_dead_letters_stored",  # not _dead_letters: the counter's OpenMetrics family
    "rocksidecar_delay_scheduled",
    "rocksidecar_consumer_lag",
    "rocksidecar_consumer_in_flight",
    "rocksidecar_consumer_queues_owned",
    "rocksidecar_consumer_rebalances",
    "rocksidecar_dmq_owned_queues",  # issue 14: Rock-DMQ service
}
METRIC = re.compile(r"\brocksidecar_[a-z_]+\b")
# What issue 8 asks the dashboard to show, as (metric, what the query must also contain).
REQUIRED_VIEWS = [
    ("rocksidecar_messages_total", "by (outcome)"),  # sends by outcome
    ("rocksidecar_send_latency_seconds_bucket", "histogram_quantile(0.99"),  # latency
    ("rocksidecar_broker_backoff_seconds", "by (broker)"),  # broker back-off
    ("rocksidecar_retry_pending", ""),  # retry depth
    ("rocksidecar_retry_oldest_age_seconds", ""),  # retry age
    ("rocksidecar_dead_letters_stored", ""),  # dead letters held
    ("rocksidecar_dead_letters_total", "increase("),  # new dead letters
    ("rocksidecar_delay_lateness_seconds_bucket", "histogram_quantile(0.99"),  # delay lateness
    # issue 13: the consume side
    ("rocksidecar_consumer_lag", "by (subscription)"),
    ("rocksidecar_subscription_deliveries_total", "by (outcome)"),
    ("rocksidecar_subscription_delivery_seconds_bucket", "histogram_quantile(0.99"),
    ("rocksidecar_consumer_queues_owned", ""),
    ("rocksidecar_consumer_in_flight", ""),
    ("rocksidecar_consumer_rebalances", ""),
    ("rocksidecar_delay_lateness_seconds_bucket", "by (le, pod)"),  # issue 14: lateness per dmq replica
    ("rocksidecar_delay_scheduled", "by (pod)"),  # issue 14: pending per dmq replica
    ("rocksidecar_dmq_owned_queues", "by (pod)"),  # issue 14: load per dmq replica
]


def _panels() -> list[dict[str, Any]]:
    return [p for p in DASHBOARD["panels"] if p["type"] != "row"]


def _exprs() -> list[str]:
    return [t["expr"] for p in _panels() for t in p["targets"]]


def test_every_query_uses_contract_metrics_the_way_their_kind_allows() -> None:
    for expr in _exprs():
        for name in METRIC.findall(expr):
            if name.endswith("_bucket"):
                assert name.removesuffix("_bucket") in HISTOGRAMS and "histogram_quantile" in expr, expr
            elif name in COUNTERS:
                assert re.search(rf"(rate|increase)\({name}\{{", expr), f"counter without rate: {expr}"
            else:
                assert name in GAUGES, f"{name} is not in the metric contract"


def test_required_views_are_present() -> None:
    exprs = _exprs()
    for metric, also in REQUIRED_VIEWS:
        assert any(re.search(rf"\b{metric}\{{", e) and also in e for e in exprs), (metric, also)


def test_queries_filter_by_the_namespace_and_pod_variables() -> None:
    variables = {v["name"] for v in DASHBOARD["templating"]["list"]}
    assert variables == {"datasource", "namespace", "pod"}
    for expr in _exprs():
        for selector in re.findall(r"\{([^}]*)\}", expr):
            assert 'namespace=~"$namespace"' in selector and 'pod=~"$pod"' in selector, expr


def test_panels_have_unique_ids_titles_and_non_overlapping_places() -> None:
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids)) and DASHBOARD["uid"] == "rocksidecar"
    cells: set[tuple[int, int]] = set()
    for panel in DASHBOARD["panels"]:
        assert panel["title"], panel
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not area & cells, f"panel {panel['title']} overlaps another"
        cells |= area
    for panel in _panels():
        assert panel["datasource"]["uid"] == "${datasource}" and panel["description"], panel["title"]


def test_the_latency_p99s_show_exemplars() -> None:
    """The latencies carry the trace of a message now and then (app.exemplars): each p99 panel asks
    Grafana to show them, so a slow point links to its trace."""
    targets = [t for p in DASHBOARD["panels"] for t in p.get("targets", [])]
    for metric in ("send_latency_seconds", "subscription_delivery_seconds", "delay_lateness_seconds"):
        p99s = [t for t in targets if t["expr"].startswith("histogram_quantile(0.99") and metric in t["expr"]]
        assert p99s and all(t.get("exemplar") is True for t in p99s), metric
