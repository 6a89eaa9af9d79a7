"""tools/kube_podman.py: the chart's StatefulSet becomes the pod Kubernetes would run, with its claim as a
named volume; what podman 4.3's kube play cannot run is left out or refused with a clear line."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
import yaml

from tests.deploy.chart import RELEASE, helm, template
from tests.deploy.paths import CHART, REPO, load_script

kube_podman = load_script("kube_podman", "tools")
CLASSIC = ("--set", "sidecar.native=false", "--set", "metrics.enabled=true")


def _by_kind(docs: list[dict]) -> dict[str, list[dict]]:  # type: ignore[type-arg]
    out: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    for doc in docs:
        out.setdefault(doc["kind"], []).append(doc)
    return out


def test_the_statefulset_becomes_one_pod_per_replica_with_its_claim_as_a_named_volume() -> None:
    rendered = template(*CLASSIC, "--set", "example.replicas=2")
    sts = _by_kind(rendered)["StatefulSet"][0]
    docs, skipped = kube_podman.convert(rendered)
    kinds = _by_kind(docs)
    assert set(kinds) == {"ConfigMap", "Pod"}
    name = sts["metadata"]["name"]
    assert [p["metadata"]["name"] for p in kinds["Pod"]] == [f"{name}-0", f"{name}-1"]
    for ordinal, pod in enumerate(kinds["Pod"]):
        claims = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
        # The name Kubernetes gives the PVC of a volumeClaimTemplate: <template>-<statefulset>-<ordinal>.
        assert claims == [
            {
                "name": "rocksidecar-data",
                "persistentVolumeClaim": {"claimName": f"rocksidecar-data-{name}-{ordinal}"},
            }
        ]
        mounts = {m["name"] for c in pod["spec"]["containers"] for m in c.get("volumeMounts", [])}
        assert "rocksidecar-data" in mounts
        assert [c["name"] for c in pod["spec"]["containers"]] == [
            c["name"] for c in sts["spec"]["template"]["spec"]["containers"]
        ]
        assert pod["metadata"]["labels"] == sts["spec"]["template"]["metadata"]["labels"]
        # podman 4.3 refuses annotation values over 63 characters; the config checksum is one.
        assert all(len(str(v)) <= 63 for v in pod["metadata"].get("annotations", {}).values())
    assert any(s.startswith("Service/") for s in skipped)
    assert any("checksum/rocksidecar-config" in s for s in skipped)
    assert sts["spec"]["template"]["metadata"]["annotations"], "the input is not modified"


def test_an_emptydir_deployment_passes_through() -> None:
    docs, _ = kube_podman.convert(template(*CLASSIC, "--set", "store.type=emptyDir"))
    assert {d["kind"] for d in docs} == {"ConfigMap", "Deployment"}


def test_native_sidecars_are_refused() -> None:
    with pytest.raises(kube_podman.NotPlayable, match=r"sidecar\.native=false"):
        kube_podman.convert(template())


def _cli(stdin: str) -> subprocess.CompletedProcess[str]:
    script = str(REPO / "tools" / "kube_podman.py")
    return subprocess.run([sys.executable, script], input=stdin, capture_output=True, text=True, check=False)


def test_the_command_line_reads_helm_output_and_says_what_it_left_out() -> None:
    run = _cli(helm("template", RELEASE, str(CHART), *CLASSIC))
    assert run.returncode == 0, run.stderr
    assert {d["kind"] for d in yaml.safe_load_all(io.StringIO(run.stdout))} == {"ConfigMap", "Pod"}
    assert "left out Service/" in run.stderr
    refused = _cli(helm("template", RELEASE, str(CHART)))
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "native sidecars" in refused.stderr
