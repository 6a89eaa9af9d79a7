"""Run helm on the chart and pick objects out of what it renders."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.paths import CHART, EXAMPLE_PARENT, tool

RELEASE = "shop"
NAMESPACE = "orders"
# The documented variants: default values, then each ci/*-values.yaml (see the chart's README).
VARIANTS = ["default", *sorted(p.name.removesuffix("-values.yaml") for p in (CHART / "ci").glob("*.yaml"))]


class HelmError(RuntimeError):
    pass


def helm(*args: str) -> str:
    result = subprocess.run([tool("helm"), *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise HelmError(result.stderr or result.stdout)
    return result.stdout


def variant_args(variant: str) -> tuple[str, ...]:
    return () if variant == "default" else ("-f", str(CHART / "ci" / f"{variant}-values.yaml"))


def template(*args: str, chart: Path = CHART) -> list[dict[str, Any]]:
    out = helm("template", RELEASE, str(chart), "--namespace", NAMESPACE, *args)
    return [doc for doc in yaml.safe_load_all(out) if doc]


@cache
def render(variant: str) -> tuple[dict[str, Any], ...]:
    return tuple(template(*variant_args(variant)))


def render_with(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Render with extra values given as a mapping (written to a temporary values file)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(values, f)
        f.flush()
        return template("-f", f.name)


def assemble_parent(root: Path) -> Path:
    """helm/examples/orders-app with this chart unpacked into its charts/ under ``root``, as
    `helm dependency build` would leave it (the source tree is never written)."""
    shutil.copytree(EXAMPLE_PARENT, root, dirs_exist_ok=True)
    shutil.copytree(CHART, root / "charts" / "rocksidecar", ignore=shutil.ignore_patterns("ci"))
    return root


def one(docs: Iterable[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, (
        f"expected one {kind} *{name_suffix}, got {[d['metadata']['name'] for d in found]}"
    )
    return found[0]


def workload(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    # the app's pod with the sidecar; the Rock-DMQ service's StatefulSet (dmq.enabled) is not one
    found = [d for d in docs if d["kind"] in {"StatefulSet", "Deployment"} and not is_dmq(d)]
    assert len(found) == 1, [d["kind"] for d in found]
    return found[0]


def is_dmq(doc: dict[str, Any]) -> bool:
    return bool(doc["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "dmq")


def pod_spec(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = workload(docs)["spec"]["template"]["spec"]
    return spec


def containers(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every container of a pod spec, init or not, by name."""
    return {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}


def sidecar(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return containers(pod_spec(docs))["rocksidecar"]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """name -> literal value, or the valueFrom mapping."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}
