"""The pod the chart builds: hardening, probes, shutdown timing, store volume, secrets, sidecar placement."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import chart
from tests.deploy.paths import CHART

HEALTHCHECK = "/opt/rocksidecar/libexec/healthcheck.py"


@pytest.mark.parametrize("variant", chart.VARIANTS)
def test_every_container_is_locked_down(variant: str) -> None:
    spec = chart.pod_spec(chart.render(variant))
    assert spec["securityContext"]["runAsNonRoot"] and spec["automountServiceAccountToken"] is False
    for name, container in chart.containers(spec).items():
        sc = container["securityContext"]
        assert sc["readOnlyRootFilesystem"] and sc["runAsNonRoot"], name
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"], name
        assert "resources" in container and container["resources"]["requests"], name
    assert (
        spec["securityContext"]["fsGroup"]
        == chart.sidecar(chart.render(variant))["securityContext"]["runAsGroup"]
    ), "fsGroup must let the sidecar write its store"


@pytest.mark.parametrize("variant", chart.VARIANTS)
def test_probes_run_the_healthcheck_on_healthz_and_readyz(variant: str) -> None:
    sidecar = chart.sidecar(chart.render(variant))
    for probe, path in (
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ):
        assert sidecar[probe]["exec"]["command"] == ["python", HEALTHCHECK, path], probe


@pytest.mark.parametrize("variant", chart.VARIANTS)
def test_termination_grace_covers_prestop_and_drain(variant: str) -> None:
    docs = chart.render(variant)
    spec, sidecar = chart.pod_spec(docs), chart.sidecar(docs)
    drain_s = float(chart.env_of(sidecar)["ROCKSIDECAR_SHUTDOWN_GRACE_S"])
    pre_stop = sidecar["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert spec["terminationGracePeriodSeconds"] > int(pre_stop[1]) + math.ceil(drain_s)


def test_native_sidecar_starts_first_and_classic_runs_beside_the_app() -> None:
    native = chart.pod_spec(chart.render("default"))
    assert [c["name"] for c in native["initContainers"]] == ["rocksidecar"]
    assert native["initContainers"][0]["restartPolicy"] == "Always"
    assert [c["name"] for c in native["containers"]] == ["app"]
    classic = chart.pod_spec(chart.render("classic-sidecar"))
    assert "initContainers" not in classic
    assert [c["name"] for c in classic["containers"]] == ["app", "rocksidecar"]
    assert "restartPolicy" not in classic["containers"][1]


def test_statefulset_gives_each_pod_a_retained_pvc() -> None:
    sts = chart.workload(chart.render("statefulset-pvc"))
    assert sts["kind"] == "StatefulSet" and sts["spec"]["replicas"] == 2
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "rocksidecar-data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert claim["spec"]["storageClassName"] == "fast-ssd" and claim["spec"]["accessModes"] == [
        "ReadWriteOnce"
    ]
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    volumes = {v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert "rocksidecar-data" not in volumes, "the store comes from the claim template"


def test_deployment_keeps_the_store_in_an_emptydir_and_says_what_that_loses() -> None:
    docs = chart.render("deployment-emptydir")
    deployment = chart.workload(docs)
    assert deployment["kind"] == "Deployment"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["rocksidecar-data"]["emptyDir"] == {"sizeLimit": "1Gi"}
    comments = (CHART / "values.yaml").read_text()
    assert "LOSES ITS SPOOL" in comments
    notes = chart.helm(
        "install", "x", str(CHART), "--dry-run=client", *chart.variant_args("deployment-emptydir")
    )
    assert "loses its spool" in notes


def test_store_and_config_are_mounted_where_the_env_points() -> None:
    sidecar = chart.sidecar(chart.render("default"))
    env, mounts = chart.env_of(sidecar), {m["name"]: m for m in sidecar["volumeMounts"]}
    assert mounts["rocksidecar-data"]["mountPath"] == env["ROCKSIDECAR_DATA_DIR"]
    assert Path(env["ROCKSIDECAR_CONFIG"]).parent == Path(mounts["rocksidecar-config"]["mountPath"])
    assert mounts["rocksidecar-config"]["readOnly"] and mounts["rocksidecar-tmp"]["mountPath"] == "/tmp"


def test_secret_holds_credentials_and_containers_read_them_from_it() -> None:
    docs = chart.render("auth")
    secret = chart.one(docs, "Secret")
    assert secret["stringData"] == {
        "access-key": "ci-access",
        "secret-key": "ci-secret",
        "auth-token": "ci-token-0123456789abcdef",
    }
    spec = chart.pod_spec(docs)
    env = chart.env_of(chart.containers(spec)["rocksidecar"])
    ref = {"secretKeyRef": {"name": secret["metadata"]["name"], "key": "auth-token"}}
    assert env["ROCKSIDECAR_AUTH_TOKEN"] == ref
    assert env["ROCKSIDECAR_ACCESS_KEY"]["secretKeyRef"]["key"] == "access-key"
    assert chart.env_of(chart.containers(spec)["app"])["SIDECAR_AUTH_TOKEN"] == ref
    assert chart.env_of(chart.containers(spec)["rocksidecar-metrics"])["UPSTREAM_BEARER_TOKEN"] == ref
    assert "ci-token" not in yaml.safe_dump(chart.workload(docs)), "no credential inline in the pod"


def test_existing_secret_is_referenced_by_name() -> None:
    env = chart.env_of(chart.sidecar(chart.render("existing-secret")))
    for name, key in (("ROCKSIDECAR_ACCESS_KEY", "access-key"), ("ROCKSIDECAR_AUTH_TOKEN", "auth-token")):
        assert env[name] == {"secretKeyRef": {"name": "rocketmq-credentials", "key": key}}


def test_config_change_rolls_the_pods() -> None:
    def checksum(docs: Iterable[dict[str, Any]]) -> str:
        return str(
            chart.workload(docs)["spec"]["template"]["metadata"]["annotations"]["checksum/rocksidecar-config"]
        )

    base = checksum(chart.render("default"))
    assert base != checksum(chart.render_with({"config": {"producer_group": "other"}}))
    assert base == checksum(chart.render_with({"example": {"replicas": 3}}))


def test_parent_chart_gets_the_same_sidecar_as_the_example(parent_chart: Path) -> None:
    docs = chart.template(chart=parent_chart)
    sts = chart.one(docs, "StatefulSet")
    spec = sts["spec"]["template"]["spec"]
    sidecar = chart.containers(spec)["rocksidecar"]
    assert [c["name"] for c in spec["initContainers"]] == ["rocksidecar", "rocksidecar-metrics"]
    assert chart.env_of(sidecar)["ROCKSIDECAR_AUTH_TOKEN"]["secretKeyRef"]["name"] == "orders-rocketmq"
    assert {v["name"] for v in spec["volumes"]} == {"rocksidecar-config", "rocksidecar-tmp"}
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "rocksidecar-data"
    config_map = chart.one(docs, "ConfigMap")
    assert (
        next(v for v in spec["volumes"] if v["name"] == "rocksidecar-config")["configMap"]["name"]
        == (config_map["metadata"]["name"])
    )
    assert chart.env_of(chart.containers(spec)["orders"])["SIDECAR_HTTP_URL"] == "http://127.0.0.1:9880"
    assert spec["terminationGracePeriodSeconds"] == 15 + 5 + 20 + 5


def test_tls_to_rocketmq_mounts_the_secret_for_the_sidecar_and_the_dmq_replicas() -> None:
    docs = chart.render("tls")
    dmq = next(d for d in docs if chart.is_dmq(d) and d["kind"] == "StatefulSet")["spec"]["template"]["spec"]
    for spec, name in ((chart.pod_spec(docs), "rocksidecar"), (dmq, "dmq")):
        container = chart.containers(spec)[name]
        env = chart.env_of(container)
        assert env["ROCKSIDECAR_TLS"] == "true", name
        files = [env[f"ROCKSIDECAR_TLS_{kind}_FILE"] for kind in ("CA", "CERT", "KEY")]
        assert files == [f"/etc/rocksidecar/tls/{f}" for f in ("ca.crt", "tls.crt", "tls.key")], name
        mount = next(m for m in container["volumeMounts"] if m["name"] == "rocksidecar-tls")
        assert mount == {"name": "rocksidecar-tls", "mountPath": "/etc/rocksidecar/tls", "readOnly": True}
        volume = next(v for v in spec["volumes"] if v["name"] == "rocksidecar-tls")
        assert volume["secret"] == {"secretName": "rocketmq-client-tls"}, name
    # TLS without a Secret: on, nothing verified, nothing mounted
    plain = chart.sidecar(chart.render_with({"rocketmq": {"tls": {"enabled": True}}}))
    assert chart.env_of(plain)["ROCKSIDECAR_TLS"] == "true"
    assert "ROCKSIDECAR_TLS_CA_FILE" not in chart.env_of(plain)
    assert all(m["name"] != "rocksidecar-tls" for m in plain["volumeMounts"])
    default = chart.sidecar(chart.render("default"))
    assert not any(name.startswith("ROCKSIDECAR_TLS") for name in chart.env_of(default))
