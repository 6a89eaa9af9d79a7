"""helm lint and helm template for every documented variant; every object valid for Kubernetes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy import chart
from tests.deploy.paths import CHART

# The oldest release with native sidecars on by default (restartPolicy: Always on init containers), and the
# newest kubernetes-validate knows.
K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
# The Prometheus Operator's CRD is not in the Kubernetes schemas; test_chart_metrics.py checks it.
CRD_KINDS = {"ServiceMonitor"}

EXPECTED_KINDS = {
    "default": {"ConfigMap", "StatefulSet"},
    "statefulset-pvc": {"ConfigMap", "StatefulSet"},
    "deployment-emptydir": {"ConfigMap", "Deployment"},
    "servicemonitor": {"ConfigMap", "StatefulSet", "Service", "ServiceMonitor"},
    "auth": {"ConfigMap", "StatefulSet", "Secret", "Service"},
    "existing-secret": {"ConfigMap", "StatefulSet"},
    "classic-sidecar": {"ConfigMap", "StatefulSet"},
    "dmq": {"ConfigMap", "StatefulSet", "Service", "ServiceMonitor", "PodDisruptionBudget"},
    "tls": {"ConfigMap", "StatefulSet", "Service", "PodDisruptionBudget"},
}


def validate(docs: Any) -> list[str]:
    """Validate each object against the Kubernetes schemas (strict: unknown fields are errors)."""
    checked = []
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                pytest.fail(f"{version} {doc['kind']}/{doc['metadata']['name']}: {path}: {exc.message}")
        checked.append(doc["kind"])
    return checked


def test_every_documented_variant_is_tested() -> None:
    assert set(chart.VARIANTS) == set(EXPECTED_KINDS), "add the new ci/ variant to EXPECTED_KINDS"


@pytest.mark.parametrize("variant", chart.VARIANTS)
def test_helm_lint_strict(variant: str) -> None:
    out = chart.helm("lint", "--strict", str(CHART), *chart.variant_args(variant))
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("variant", chart.VARIANTS)
def test_rendered_objects_are_valid_kubernetes(variant: str) -> None:
    docs = chart.render(variant)
    kinds = {d["kind"] for d in docs}
    dashboard = {"ConfigMap"} if variant == "servicemonitor" else set()
    assert kinds == EXPECTED_KINDS[variant] | dashboard
    assert sorted(validate(docs)) == sorted(d["kind"] for d in docs if d["kind"] not in CRD_KINDS)


def test_example_parent_chart_lints_and_renders_valid_objects(parent_chart: Path) -> None:
    assert "0 chart(s) failed" in chart.helm("lint", "--strict", str(parent_chart))
    docs = chart.template(chart=parent_chart)
    assert {d["kind"] for d in docs} == {"ConfigMap", "StatefulSet", "Service", "ServiceMonitor"}
    validate(docs)


def test_validation_catches_a_misspelt_field() -> None:
    docs = [dict(d) for d in chart.render("default")]
    for doc in docs:
        if doc["kind"] == "StatefulSet":
            doc["spec"] = {**doc["spec"], "replica": 2}
    with pytest.raises(pytest.fail.Exception, match="replica"):
        validate(docs)
