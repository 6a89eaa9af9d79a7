"""The chart agrees with what the app reads and what Kubernetes accepts.

- The sidecars and the Rock-DMQ replicas of one release use one inner topic, dmq.innerTopic; with
  dmq.enabled the config.dmq_* settings the replicas' flags set are refused, naming the dmq.* value.
- values.schema.json takes every subscription key app/subscriptions/spec.py takes, the settings file's
  `transactions:` section app/config.py takes, and Prometheus' compound durations (1m30s).
- Every name rendered from the longest fullnameOverride the schema takes, or the longest release name
  Helm takes, is a valid Kubernetes name.
- The dmq replicas' --http-addr, as rendered, answers on an IPv6 pod address and on an IPv4 one.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from rocksidecar.app import config
from rocksidecar.app.api.servers import HttpServer
from rocksidecar.app.cli import build_parser
from rocksidecar.app.dmq.cli import FLAGS as DMQ_FLAGS
from rocksidecar.app.dmq.http import create_app
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from tests.deploy import chart
from tests.deploy.fake_http import DIRECT, needs_ipv6
from tests.deploy.paths import CHART

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
HELM_MAX_RELEASE_NAME = 53  # helm install refuses longer release names


def _sidecar_settings(docs: list[dict[str, Any]], tmp_path: Path) -> config.Settings:
    """What `rocksidecar serve` in the rendered sidecar container ends up with (env + mounted ConfigMap)."""
    env = {
        k: v if isinstance(v, str) else f"from-secret-{k.lower()}"
        for k, v in chart.env_of(chart.sidecar(docs)).items()
    }
    config_file = tmp_path / Path(env[config.CONFIG_ENV]).name
    config_file.write_text(chart.one(docs, "ConfigMap", "rocksidecar")["data"][config_file.name])
    return config.load(env, config_file, require_namesrv=True)


def _dmq_args(docs: list[dict[str, Any]]) -> Any:
    (container,) = chart.one(docs, "StatefulSet", "-dmq")["spec"]["template"]["spec"]["containers"]
    return build_parser().parse_args(container["args"])


def _load_file(tmp_path: Path, doc: dict[str, Any]) -> config.Settings:
    cfg = tmp_path / "rocksidecar.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    return config.load({}, cfg, require_namesrv=False)


# --- one inner topic: the sidecars send where the dmq replicas read ----------------------------------
@pytest.mark.parametrize(
    "dmq",
    [{"enabled": True, "innerTopic": "orders_delay"}, {"enabled": True}],
    ids=["dmq.innerTopic", "default"],
)
def test_sidecar_in_service_mode_sends_to_the_inner_topic_the_dmq_pods_consume(
    dmq: dict[str, Any], tmp_path: Path
) -> None:
    docs = chart.render_with({"dmq": dmq, "config": {"delay_mode": "service"}})
    sidecar = _sidecar_settings(docs, tmp_path)
    assert sidecar.delay_mode == "service"
    expected = dmq.get("innerTopic", "dmq_inner_topic")
    assert sidecar.dmq_inner_topic == _dmq_args(docs).dmq_inner_topic == expected, (
        "delayed messages go to a topic the Rock-DMQ replicas never read"
    )


@pytest.mark.parametrize("setting", [name for _, name, _ in DMQ_FLAGS])
def test_with_dmq_enabled_config_may_not_set_what_the_replicas_flags_set(setting: str) -> None:
    value = 2 if setting == "dmq_copies" else "orders_delay"
    with pytest.raises(chart.HelmError, match=rf"config\.{setting}: .*from (dmq\.|the pod name)"):
        chart.render_with({"dmq": {"enabled": True}, "config": {setting: value}})


def test_without_dmq_config_names_the_inner_topic_of_a_service_run_elsewhere(tmp_path: Path) -> None:
    docs = chart.render_with({"config": {"delay_mode": "service", "dmq_inner_topic": "orders_delay"}})
    assert "ROCKSIDECAR_DMQ_INNER_TOPIC" not in chart.env_of(chart.sidecar(docs))
    assert _sidecar_settings(docs, tmp_path).dmq_inner_topic == "orders_delay"


# --- values.schema.json takes what the app takes ----------------------------------------------------
EVERY_SUBSCRIPTION_KEY = {
    "name": "orders",
    "topic": "orders",
    "group": "orders-app",
    "endpoint": "http://127.0.0.1:8080/events",
    "expression": "*",
    "expression_type": "TAG",
    "mode": "concurrent",
    "concurrency": 20,
    "timeout_s": 15,
    "max_reconsume_times": 16,
    "consume_from": "timestamp",
    "consume_timestamp_ms": 1700000000000,
    "allocation": "sticky",
    "commit_window": 256,
    "bulk": True,
    "bulk_max_messages": 100,
    "max_body_bytes": 16 * 1024 * 1024,
}
GRPC_SUBSCRIPTION = {"name": "audit", "topic": "audit", "group": "audit-app", "endpoint": "grpc"}


def test_schema_subscription_keys_are_the_apps() -> None:
    offered = set(SCHEMA["definitions"]["subscription"]["properties"])
    assert offered == set(SubscriptionSpec.__dataclass_fields__) == set(EVERY_SUBSCRIPTION_KEY)


def test_schema_accepts_every_subscription_key_the_app_accepts(tmp_path: Path) -> None:
    subscriptions = [EVERY_SUBSCRIPTION_KEY, GRPC_SUBSCRIPTION]
    loaded = _load_file(tmp_path, {"subscriptions": subscriptions}).subscriptions
    assert [s.name for s in loaded] == ["orders", "audit"] and loaded[0].allocation == "sticky"
    try:
        chart.render_with({"config": {"subscriptions": subscriptions}})
    except chart.HelmError as exc:
        pytest.fail(f"helm refuses subscriptions the app takes: {str(exc).strip()}")


@pytest.mark.parametrize(
    ("key", "value"),
    [("allocation", "random"), ("commit_window", -1), ("bulk", "maybe"), ("bulk_max_messages", 0)],
)
def test_schema_refuses_a_subscription_value_the_app_refuses(key: str, value: Any, tmp_path: Path) -> None:
    entry = {**GRPC_SUBSCRIPTION, "endpoint": "http://127.0.0.1:8080/events", key: value}
    with pytest.raises(config.ConfigError):
        _load_file(tmp_path, {"subscriptions": [entry]})
    with pytest.raises(chart.HelmError, match=key):
        chart.render_with({"config": {"subscriptions": [entry]}})


def test_schema_accepts_the_config_files_transactions_section(tmp_path: Path) -> None:
    section = {"mode": "auto", "check_endpoint": "http://127.0.0.1:8080/tx", "undecided_timeout_s": 30}
    settings = _load_file(tmp_path, {"transactions": section})
    assert (settings.transactions_mode, settings.transactions_undecided_timeout_s) == ("auto", 30)
    docs = chart.render_with({"config": {"transactions": section}})
    assert _sidecar_settings(docs, tmp_path).transactions_mode == "auto"
    offered = set(SCHEMA["properties"]["config"]["properties"]["transactions"]["properties"])
    assert {f"transactions_{key}" for key in offered} == {
        s.name for s in config.SETTINGS if s.name.startswith("transactions_")
    }


def test_a_transactions_setting_given_twice_is_refused_as_the_app_refuses_it(tmp_path: Path) -> None:
    doc = {"transactions_mode": "local", "transactions": {"mode": "auto"}}
    with pytest.raises(config.ConfigError, match="set twice"):
        _load_file(tmp_path, doc)
    with pytest.raises(chart.HelmError, match=r"config\.transactions\.mode and config\.transactions_mode"):
        chart.render_with({"config": doc})


@pytest.mark.parametrize("interval", ["1m30s", "500ms", "1h", "2d"])
def test_schema_accepts_prometheus_durations(interval: str) -> None:
    try:
        docs = chart.render_with({"metrics": {"serviceMonitor": {"enabled": True, "interval": interval}}})
    except chart.HelmError as exc:
        pytest.fail(f"helm refuses interval {interval}: {str(exc).strip()}")
    assert chart.one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["interval"] == interval


@pytest.mark.parametrize("interval", ["1m30", "m", "1.5m", "30 s"])
def test_schema_refuses_what_prometheus_refuses(interval: str) -> None:
    with pytest.raises(chart.HelmError, match="interval"):
        chart.render_with({"metrics": {"serviceMonitor": {"enabled": True, "interval": interval}}})


# --- names: the longest base the chart allows still gives valid Kubernetes names ---------------------
NAME_VALUES = {"metrics": {"enabled": True}, "dmq": {"enabled": True}, "dashboard": {"enabled": True}}


def _name_problems(docs: list[dict[str, Any]]) -> list[str]:
    problems = []
    for doc in docs:
        name, kind = doc["metadata"]["name"], doc["kind"]
        most = 63 if kind == "Service" else 253  # a Service's name is a DNS label, the rest subdomains
        if len(name) > most or name.endswith("-"):
            problems.append(f"{kind}/{name}: {len(name)} characters")
        # a StatefulSet's pods carry controller-revision-hash: <name>-<hash of up to 10>, a label value
        if kind == "StatefulSet" and len(name) > 52:
            problems.append(f"{kind}/{name}: {len(name)} characters, its pods' revision label > 63")
    return problems


@pytest.mark.parametrize("store", ["persistentVolumeClaim", "emptyDir"])
def test_names_stay_valid_with_the_longest_fullname_override_the_schema_accepts(store: str) -> None:
    longest = SCHEMA["properties"]["fullnameOverride"]["maxLength"]
    values = {**NAME_VALUES, "store": {"type": store}, "fullnameOverride": "o" * longest}
    docs = chart.render_with(values)
    assert chart.one(docs, "ConfigMap", "o" * longest)
    assert not _name_problems(docs)
    with pytest.raises(chart.HelmError, match="fullnameOverride"):
        chart.render_with({**values, "fullnameOverride": "o" * (longest + 1)})


def test_names_within_their_limits_are_never_cut() -> None:
    # A release whose objects exist keeps their names: a StatefulSet renamed by an upgrade would get new,
    # empty volumes (the Rock-DMQ replicas' stores). Only names past a limit are cut.
    def names(fullname: str) -> set[tuple[str, str]]:
        docs = chart.render_with({**NAME_VALUES, "fullnameOverride": fullname})
        return {(d["kind"], d["metadata"]["name"]) for d in docs}

    within = names("o" * 48)  # "-dmq": 52, the most a StatefulSet's name may have
    assert {("StatefulSet", "o" * 48 + "-dmq"), ("Service", "o" * 48 + "-metrics")} <= within
    past = names("o" * 49)
    assert {("StatefulSet", "o" * 48 + "-dmq"), ("Service", "o" * 49 + "-metrics")} <= past


def test_names_stay_valid_with_the_longest_release_name(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(NAME_VALUES))
    release = "r" * (HELM_MAX_RELEASE_NAME - 2) + "-x"
    out = chart.helm("template", release, str(CHART), "--namespace", chart.NAMESPACE, "-f", str(values))
    docs = [doc for doc in yaml.safe_load_all(out) if doc]
    assert not _name_problems(docs)


# --- the dmq replicas listen where kubelet's httpGet probes and Prometheus connect: the pod IP --------


def _status(url: str) -> int:
    with DIRECT.open(url, timeout=3) as response:
        return int(response.status)


@needs_ipv6
def test_dmq_listener_as_rendered_answers_on_ipv6_and_ipv4_pod_addresses() -> None:
    args = _dmq_args(list(chart.render("dmq")))
    host = str(args.dmq_http_addr).rpartition(":")[0]

    async def ready() -> tuple[bool, dict[str, Any]]:
        return True, {}

    async def statuses() -> list[int]:
        server = HttpServer(create_app(CollectorRegistry(), ready), f"{host}:0", grace_s=0.1)
        await server.start()
        try:
            # an IPv6-only cluster's pod IP, and an IPv4 one: here their loopbacks
            urls = [f"http://[::1]:{server.port}/healthz", f"http://127.0.0.1:{server.port}/healthz"]
            return [await asyncio.to_thread(_status, url) for url in urls]
        except OSError as exc:
            pytest.fail(f"--http-addr {args.dmq_http_addr}: not answering on both families: {exc}")
        finally:
            await server.stop()

    assert asyncio.run(statuses()) == [200, 200]
