"""values.schema.json and the chart's own checks reject bad values: helm template fails, naming them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy import chart

BAD_VALUES: list[tuple[dict[str, Any], str]] = [
    ({"store": {"type": "hostPath"}}, "store/type"),
    ({"sidecar": {"httpPort": "9880"}}, "httpPort"),
    ({"sidecar": {"httpPort": 80}}, "httpPort"),
    ({"sidecar": {"shutdownGraceSeconds": -1}}, "shutdownGraceSeconds"),
    ({"sidecar": {"native": "yes"}}, "native"),
    ({"rocketmq": {"namesrv": ["namesrv-without-port"]}}, "namesrv"),
    ({"rocketmq": {"namesrv": []}}, "namesrv"),
    ({"config": {"http_addr": "0.0.0.0:9880"}}, "http_addr"),  # the chart owns it, through env
    ({"config": {"send_timout_ms": 1}}, "send_timout_ms"),
    ({"config": {"send_timeout_ms": "soon"}}, "send_timeout_ms"),
    ({"config": {"retry": {"default": {"ladder_s": []}}}}, "ladder_s"),
    ({"config": {"retry": {"default": {"ladder": [1]}}}}, "ladder"),
    ({"auth": {"enabled": True, "token": "short"}}, "token"),
    ({"auth": {"enabled": True}}, "token"),
    ({"rocketmq": {"acl": {"enabled": True, "accessKey": "ak"}}}, "secretKey"),
    ({"rocketmq": {"tls": {"enabled": True, "clientCertificate": True}}}, "secretName"),
    ({"rocketmq": {"tls": {"enabled": "yes"}}}, "enabled"),
    ({"metrics": {"serviceMonitor": {"interval": "often"}}}, "interval"),
    ({"example": {"topic": "no spaces allowed"}}, "topic"),
    ({"replicas": 2}, "replicas"),
]


@pytest.mark.parametrize(("values", "named"), BAD_VALUES, ids=[n for _, n in BAD_VALUES])
def test_schema_rejects(values: dict[str, Any], named: str) -> None:
    with pytest.raises(chart.HelmError, match=named) as err:
        chart.render_with(values)
    assert "schema" in str(err.value)


def test_existing_secret_stands_in_for_inline_credentials() -> None:
    docs = chart.render_with(
        {"existingSecret": "creds", "auth": {"enabled": True}, "rocketmq": {"acl": {"enabled": True}}}
    )
    assert "Secret" not in {d["kind"] for d in docs}


def test_ports_must_differ() -> None:
    with pytest.raises(chart.HelmError, match="must differ"):
        chart.render_with({"metrics": {"enabled": True, "port": 9881}})


def test_metrics_without_the_example_need_a_pod_selector() -> None:
    with pytest.raises(chart.HelmError, match=r"metrics\.podSelector"):
        chart.render_with({"example": {"enabled": False}, "metrics": {"enabled": True}})
    docs = chart.render_with(
        {"example": {"enabled": False}, "metrics": {"enabled": True, "podSelector": {"app": "orders"}}}
    )
    assert chart.one(docs, "Service", "-metrics")["spec"]["selector"] == {"app": "orders"}
