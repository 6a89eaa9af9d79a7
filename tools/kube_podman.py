"""Turn `helm template` output into YAML that `podman kube play` (podman 4.3) runs.

kube play runs Pods, Deployments and ConfigMaps but no StatefulSet. Each StatefulSet replica becomes
the Pod Kubernetes would create (``<name>-<ordinal>``), its volumeClaimTemplates references to the PVCs
Kubernetes would bind to it (``<template>-<name>-<ordinal>``). kube play creates a missing claim as a
named volume and reuses an existing one, so the store outlives `kube down` and `kube play` as a PVC
outlives its pod. (No PersistentVolumeClaim objects are emitted: kube play refuses to play one whose
volume exists.) Objects kube play cannot use (Services, ServiceMonitors) are left out, and
named on stderr, as are annotations whose values podman 4.3 refuses (it applies the 63-character limit
of label values to them; the chart's checksum annotations only matter to a Deployment's rollout).

    helm template demo helm/rocksidecar --set sidecar.native=false | python3 tools/kube_podman.py >pod.yaml
    podman kube play pod.yaml
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterable
from typing import Any

import yaml

PLAYABLE = {"Pod", "Deployment", "ConfigMap", "Secret"}
MAX_ANNOTATION_VALUE = 63  # what podman 4.3's kube play accepts

Doc = dict[str, Any]


class NotPlayable(ValueError):
    """The input holds something kube play would run differently from Kubernetes."""


def statefulset_objects(sts: Doc) -> list[Doc]:
    """The Pods a StatefulSet's controller would create, their claims referenced by name."""
    name = sts["metadata"]["name"]
    spec = sts["spec"]
    template = spec["template"]
    out: list[Doc] = []
    for ordinal in range(int(spec.get("replicas", 1))):
        pod_spec = copy.deepcopy(template["spec"])
        volumes = pod_spec.setdefault("volumes", [])
        for claim in spec.get("volumeClaimTemplates", []):
            claim_name = f"{claim['metadata']['name']}-{name}-{ordinal}"
            volumes.append(
                {"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": claim_name}}
            )
        metadata = copy.deepcopy(template.get("metadata", {}))
        metadata["name"] = f"{name}-{ordinal}"
        out.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec})
    return out


def _drop_long_annotations(doc: Doc, where: str, skipped: list[str]) -> None:
    for metadata in (doc.get("metadata"), doc.get("spec", {}).get("template", {}).get("metadata")):
        annotations = (metadata or {}).get("annotations") or {}
        for key in [k for k, v in annotations.items() if len(str(v)) > MAX_ANNOTATION_VALUE]:
            del annotations[key]
            skipped.append(f"{where} annotation {key}")


def convert(docs: Iterable[Doc | None]) -> tuple[list[Doc], list[str]]:
    """(objects for kube play, what was left out: "Kind/name" or "Kind/name annotation key")."""
    out: list[Doc] = []
    skipped: list[str] = []
    for rendered in docs:
        if not rendered:
            continue
        doc = copy.deepcopy(rendered)  # the caller's objects stay as rendered
        kind = doc.get("kind", "")
        where = f"{kind}/{doc.get('metadata', {}).get('name', '?')}"
        if kind not in PLAYABLE and kind != "StatefulSet":
            skipped.append(where)
            continue
        pod_spec = (
            doc.get("spec", {}) if kind == "Pod" else doc.get("spec", {}).get("template", {}).get("spec", {})
        )
        if any(c.get("restartPolicy") == "Always" for c in pod_spec.get("initContainers") or []):
            raise NotPlayable(f"{where}: kube play runs no native sidecars; render with sidecar.native=false")
        _drop_long_annotations(doc, where, skipped)
        out.extend(statefulset_objects(doc) if kind == "StatefulSet" else [doc])
    return out, skipped


def main(argv: list[str] | None = None) -> int:
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        docs, skipped = convert(yaml.safe_load_all(sys.stdin))
    except (yaml.YAMLError, NotPlayable, KeyError, TypeError) as exc:
        print(f"kube_podman: {exc}", file=sys.stderr)
        return 1
    for item in skipped:
        print(f"kube_podman: left out {item}", file=sys.stderr)
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
