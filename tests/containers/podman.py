"""Run podman for the container tests: containers, a devbroker in its own container, the chart's pod
played with `podman kube play`, and requests sent from inside a container."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.deploy.chart import helm
from tests.deploy.paths import CHART, REPO
from tests.pipeline.sidecar_process import _pull as pull_topic

POLL_S = 0.25  # the containers are other processes: their state is polled, against a deadline


class PodmanError(RuntimeError):
    pass


def podman(*args: str, timeout_s: float = 180.0, check: bool = True) -> str:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and result.returncode != 0:
        raise PodmanError(f"podman {' '.join(args)}: exit {result.returncode}: {result.stderr.strip()}")
    return result.stdout.strip()


def succeeds(*args: str) -> bool:
    return subprocess.run(["podman", *args], capture_output=True, check=False, timeout=60).returncode == 0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(check: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    """The first truthy value of ``check()``, polled until the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(POLL_S)


def ip_of(container: str) -> str:
    return podman("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", container)


def healthy(container: str, path: str = "/healthz") -> bool:
    """The image's own probe (docker/healthcheck.py), run inside the container."""
    return succeeds("exec", container, "python", "/opt/rocksidecar/libexec/healthcheck.py", path)


# One request from inside a container, to the sidecar on its loopback listener (as the pod's app does).
_POST = """
import json, sys, urllib.error, urllib.request
req = urllib.request.Request("http://127.0.0.1:9880/v1/messages", data=sys.stdin.buffer.read(),
                             headers={"content-type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=30) as resp:
        print(json.dumps({"status": resp.status, "body": json.load(resp)}))
except urllib.error.HTTPError as exc:
    print(json.dumps({"status": exc.code, "body": exc.read().decode()}))
"""


def post_inside(container: str, message: dict[str, Any]) -> tuple[int, Any]:
    result = subprocess.run(
        ["podman", "exec", "-i", container, "python", "-c", _POST],
        input=json.dumps(message), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    answer = json.loads(result.stdout)
    return answer["status"], answer["body"]


def metrics_inside(container: str) -> str:
    """The sidecar's /metrics, read on its loopback listener from inside the container."""
    url = "http://127.0.0.1:9880/metrics"
    script = f"import urllib.request as u; print(u.urlopen({url!r}, timeout=30).read().decode())"
    return podman("exec", container, "python", "-c", script)


@dataclass(frozen=True)
class Devbroker:
    """``rocksidecar devbroker`` (two brokers) in a container of its own, listening on its address."""

    name: str
    ip: str

    @property
    def namesrv(self) -> str:
        return f"{self.ip}:19876"

    def brokers(self, action: str) -> None:
        """stop or start both brokers (the name server stays)."""
        for broker in ("broker-a", "broker-b"):
            httpx.post(f"http://{self.ip}:19880/brokers/{broker}/{action}", timeout=10).raise_for_status()

    def set_latency(self, ms: int) -> None:
        for broker in ("broker-a", "broker-b"):
            url = f"http://{self.ip}:19880/brokers/{broker}/faults"
            httpx.post(url, json={"latency_ms": ms}, timeout=10).raise_for_status()

    def received(self, topic: str) -> set[str]:
        """UNIQ_KEY (the sidecar's message id) of every message stored in ``topic``."""
        try:
            return {m.properties["UNIQ_KEY"] for m in asyncio.run(pull_topic(self.namesrv, topic))}
        except Exception as exc:  # no route yet: nothing was sent to the topic
            if "route" in str(exc).lower() or "TOPIC_NOT_EXIST" in str(exc):
                return set()
            raise


@contextmanager
def devbroker(image: str) -> Iterator[Devbroker]:
    name = unique("rs-e2e-broker")
    podman(
        "run",
        "-d",
        "--no-healthcheck",
        "--name",
        name,
        "--hostname",
        name,
        image,
        "devbroker",
        "--host",
        name,
    )
    try:
        wait_until(lambda: "devbroker ready" in podman("logs", name), f"{name} to be ready", 60)
        yield Devbroker(name, ip_of(name))
    finally:
        podman("rm", "-f", "-v", "-t", "0", name, check=False)


@dataclass(frozen=True)
class PlayedPod:
    """The chart's example pod as `podman kube play` runs it: replica 0 of the StatefulSet (PVC store), or
    of the Deployment (emptyDir store), which podman 4.3 names ``<deployment>-pod-0``."""

    release: str
    manifest: Path
    name: str

    @property
    def sidecar(self) -> str:
        return f"{self.name}-rocksidecar"

    @property
    def volume(self) -> str:
        """The named volume standing in for the StatefulSet's PVC."""
        return f"rocksidecar-data-{self.release}-rocksidecar-example-0"

    def play(self) -> None:
        podman("kube", "play", str(self.manifest))

    def down(self) -> None:
        podman("kube", "down", str(self.manifest))

    @property
    def ip(self) -> str:
        return ip_of(podman("pod", "inspect", "-f", "{{.InfraContainerID}}", self.name))


def render_pod(image: str, busybox: str, namesrv: str, out_dir: Path, *sets: str) -> PlayedPod:
    """`helm template` of the chart in classic sidecar mode, made playable by tools/kube_podman.py."""
    release = unique("rs-e2e")
    repository, _, tag = image.rpartition(":")
    bb_repository, _, bb_tag = busybox.rpartition(":")
    values = [
        "sidecar.native=false",
        "metrics.enabled=true",
        f"image.repository={repository}",
        f"image.tag={tag}",
        f"example.image.repository={bb_repository}",
        f"example.image.tag={bb_tag}",
        f"rocketmq.namesrv[0]={namesrv}",
        *sets,
    ]
    rendered = helm("template", release, str(CHART), *(a for v in values for a in ("--set", v)))
    manifest = out_dir / f"{release}.yaml"
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / "kube_podman.py")],
        input=rendered, capture_output=True, text=True, check=True,
    )  # fmt: skip
    manifest.write_text(result.stdout)
    kinds = {doc["kind"]: doc["metadata"]["name"] for doc in yaml.safe_load_all(result.stdout)}
    name = kinds["Pod"] if "Pod" in kinds else f"{kinds['Deployment']}-pod-0"
    return PlayedPod(release, manifest, name)


@contextmanager
def played(pod: PlayedPod) -> Iterator[PlayedPod]:
    """Play the pod; afterwards remove it, its claim's volume and the config volume kube play made."""
    pod.play()
    try:
        yield pod
    finally:
        podman("kube", "down", str(pod.manifest), check=False)
        podman("volume", "rm", "-f", pod.volume, f"{pod.release}-rocksidecar", check=False)
