"""Metrics reach Prometheus through the proxy, the Service and the ServiceMonitor; the APIs do not."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.deploy import chart

# ServiceMonitor is a CRD, absent from the Kubernetes schemas kubernetes-validate ships: these are the
# fields of monitoring.coreos.com/v1 the chart uses, checked by hand.
SERVICE_MONITOR_SPEC_KEYS = {"selector", "endpoints", "namespaceSelector", "jobLabel"}
ENDPOINT_KEYS = {"port", "path", "interval", "scrapeTimeout", "scheme", "authorization", "relabelings"}
DURATION = re.compile(
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = obj["metadata"].get("labels", {})
    return labels


def test_service_monitor_is_well_formed_and_selects_the_metrics_service() -> None:
    docs = chart.render("servicemonitor")
    monitor, service = chart.one(docs, "ServiceMonitor"), chart.one(docs, "Service", "-metrics")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor["metadata"]) <= {"name", "namespace", "labels", "annotations"}
    assert _labels(monitor)["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    assert set(spec) <= SERVICE_MONITOR_SPEC_KEYS
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= _labels(service).items(), "the ServiceMonitor must select the Service"
    (endpoint,) = spec["endpoints"]
    assert set(endpoint) <= ENDPOINT_KEYS
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert DURATION.match(endpoint["interval"]) and DURATION.match(endpoint["scrapeTimeout"])


@pytest.mark.parametrize("variant", ["servicemonitor", "auth"])
def test_service_reaches_only_the_metrics_proxy_of_the_sidecar_pods(variant: str) -> None:
    docs = chart.render(variant)
    service = chart.one(docs, "Service", "-metrics")
    pod = chart.workload(docs)["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    ported = {c["name"]: c.get("ports", []) for c in chart.containers(pod["spec"]).values()}
    assert {n for n, ports in ported.items() if ports} == {"rocksidecar-metrics"}
    assert port["targetPort"] == ported["rocksidecar-metrics"][0]["name"] == "metrics"


def test_proxy_forwards_from_the_pod_ip_to_the_loopback_listener() -> None:
    docs = chart.render("servicemonitor")
    spec = chart.pod_spec(docs)
    proxy, sidecar = chart.containers(spec)["rocksidecar-metrics"], chart.sidecar(docs)
    assert proxy["command"] == ["python", "/opt/rocksidecar/libexec/metrics_proxy.py"]
    args = dict(zip(proxy["args"][::2], proxy["args"][1::2], strict=True))
    assert args["--upstream"] == chart.env_of(sidecar)["ROCKSIDECAR_HTTP_ADDR"]
    assert args["--listen"] == f"[::]:{proxy['ports'][0]['containerPort']}"  # IPv4 and IPv6 pod IPs


def test_no_service_and_no_proxy_unless_metrics_are_scraped() -> None:
    docs = chart.render("default")
    assert not [d for d in docs if d["kind"] in {"Service", "ServiceMonitor"}]
    assert set(chart.containers(chart.pod_spec(docs))) == {"app", "rocksidecar"}


def test_dashboard_config_map_carries_the_grafana_label_and_the_json() -> None:
    docs = chart.render("servicemonitor")
    dashboard = chart.one(docs, "ConfigMap", "-dashboard")
    assert _labels(dashboard)["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "RocketMQ"}
    assert '"uid": "rocksidecar"' in dashboard["data"]["rocksidecar.json"]
