"""The Rock-DMQ service's objects (dmq.enabled): a StatefulSet with a retained PVC per replica running the
real `rocksidecar dmq` command line, a PodDisruptionBudget and a ServiceMonitor over its pods."""

from __future__ import annotations

from typing import Any

from rocksidecar.app import config
from rocksidecar.app.cli import build_parser
from tests.deploy import chart

DOCS = chart.render("dmq")


def dmq_set() -> dict[str, Any]:
    return chart.one(DOCS, "StatefulSet", "-dmq")


def test_each_replica_has_its_own_retained_volume() -> None:
    sts = dmq_set()["spec"]
    assert sts["replicas"] == 3
    (claim,) = sts["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert sts["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    (container,) = sts["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["rocksidecar-data"] == chart.env_of(container)["ROCKSIDECAR_DATA_DIR"]


def test_command_line_parses_with_the_real_cli_and_env_is_known() -> None:
    (container,) = dmq_set()["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "dmq" and args.dmq_inner_topic == "dmq_inner_topic"
    assert args.dmq_instance == "$(POD_NAME)"
    http_addr = (
        args.dmq_http_addr or config.setting("dmq_http_addr").default
    )  # flag, or the setting's default
    port = int(str(http_addr).rpartition(":")[2])
    assert {p["containerPort"] for p in container["ports"]} == {port}
    known = {s.env for s in config.SETTINGS} | {config.CONFIG_ENV}
    assert {n for n in chart.env_of(container) if n.startswith("ROCKSIDECAR_")} <= known
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"]["path"] == path


def test_disruption_budget_and_monitor_select_the_dmq_pods() -> None:
    pods = dmq_set()["spec"]["template"]["metadata"]["labels"]
    pdb = chart.one(DOCS, "PodDisruptionBudget", "-dmq")["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"].items() <= pods.items()
    service = chart.one(DOCS, "Service", "-dmq")
    assert service["spec"]["selector"].items() <= pods.items()
    monitor = chart.one(DOCS, "ServiceMonitor", "-dmq")["spec"]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]


def test_disabled_by_default() -> None:
    assert not [d for d in chart.render("default") if chart.is_dmq(d)]


def test_replicated_mode_names_every_pod_and_spreads_them() -> None:
    spec = dmq_set()["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    pods = [f"{dmq_set()['metadata']['name']}-{i}" for i in range(spec["replicas"])]
    assert args.dmq_replicas == ",".join(pods)  # the StatefulSet's pod names: what --instance says
    assert args.dmq_copies == "2" and args.dmq_marks_topic == "dmq_marks_topic"
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    selector = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert selector.items() <= spec["template"]["metadata"]["labels"].items()
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
