"""The image: runs as UID 10001 with its OCI labels, starts with a read-only root filesystem, answers
its HEALTHCHECK, and delivers a message sent inside the container to a devbroker in another container."""

from __future__ import annotations

import json
import tomllib

from tests.containers.podman import (
    devbroker,
    healthy,
    podman,
    post_inside,
    succeeds,
    unique,
    wait_until,
)
from tests.deploy.paths import REPO


def test_runs_as_uid_10001_and_carries_oci_labels(image: str) -> None:
    ids = podman("run", "--rm", "--no-healthcheck", "--entrypoint", "id", image)
    assert ids.startswith("uid=10001(rocksidecar) gid=10001(rocksidecar)"), ids
    labels = json.loads(podman("image", "inspect", "-f", "{{json .Labels}}", image))
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert labels["org.opencontainers.image.version"] == version
    assert len(labels["org.opencontainers.image.revision"].removesuffix("-dirty")) == 40, labels
    assert labels["org.opencontainers.image.source"]
    # `podman build --format docker` keeps the HEALTHCHECK (the OCI format drops it).
    check = json.loads(podman("image", "inspect", "-f", "{{json .Config.Healthcheck}}", image))
    assert check["Test"][-1] == "/healthz"


def test_read_only_root_healthy_and_a_message_reaches_a_devbroker_in_another_container(image: str) -> None:
    topic, name, volume = unique("E2EImage"), unique("rs-e2e-sidecar"), unique("rs-e2e-store")
    with devbroker(image) as broker:
        podman(
            "run", "-d", "--name", name, "--read-only", "--tmpfs", "/tmp",
            "-v", f"{volume}:/var/lib/rocksidecar", "-e", f"ROCKSIDECAR_NAMESRV={broker.namesrv}", image,
        )  # fmt: skip
        try:
            # The image's own HEALTHCHECK command, run the way podman runs it.
            wait_until(lambda: succeeds("healthcheck", "run", name), "the HEALTHCHECK to pass", 60)
            assert healthy(name, "/readyz")
            status, body = post_inside(name, {"topic": topic, "body": "from inside the container"})
            assert (status, body["status"]) == (200, "SENT"), body
            assert broker.received(topic) == {body["id"]}
            # It ran with nothing writable but the store volume and /tmp.
            probe = podman("exec", name, "sh", "-c", "touch /opt/x 2>&1 || echo refused")
            assert "refused" in probe
        finally:
            podman("rm", "-f", "-v", "-t", "0", name, check=False)
            podman("volume", "rm", "-f", volume, check=False)
