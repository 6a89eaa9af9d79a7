"""SIGTERM drain: `podman stop` of the sidecar while a client in the same pod has requests in flight
loses none of the messages it answered 2xx, once the sidecar runs again on its volume."""

from __future__ import annotations

import time

from tests.containers.podman import devbroker, healthy, podman, unique, wait_until
from tests.deploy.paths import REPO

CLIENT = REPO / "tests" / "containers" / "load_client.py"
THREADS = 8
LATENCY_MS = 300  # every send waits this long at the broker, so requests are in flight at SIGTERM


def _acked(logs: str) -> list[tuple[str, float]]:
    """(id, when) of each 2xx answer the client printed."""
    return [(w[1], float(w[2])) for w in (line.split() for line in logs.splitlines()) if w[0] == "acked"]


def test_podman_stop_with_requests_in_flight_loses_no_acknowledged_message(image: str) -> None:
    topic, pod, volume = unique("E2EDrain"), unique("rs-e2e-drain"), unique("rs-e2e-store")
    sidecar, client = f"{pod}-sidecar", f"{pod}-client"
    with devbroker(image) as broker:
        podman("pod", "create", "--name", pod)
        try:
            podman(
                "run", "-d", "--pod", pod, "--name", sidecar, "--read-only", "--tmpfs", "/tmp",
                "-v", f"{volume}:/var/lib/rocksidecar", "-e", f"ROCKSIDECAR_NAMESRV={broker.namesrv}", image,
            )  # fmt: skip
            wait_until(lambda: healthy(sidecar, "/readyz"), "the sidecar to be ready", 60)
            broker.set_latency(LATENCY_MS)
            podman(
                "run", "-d", "--pod", pod, "--name", client, "--no-healthcheck",
                "-v", f"{CLIENT}:/load_client.py:ro", "--entrypoint", "python", image,
                "/load_client.py", topic, str(THREADS),
            )  # fmt: skip
            wait_until(
                lambda: len(_acked(podman("logs", client))) >= 2 * THREADS, "the client's first answers"
            )
            sigterm_at = time.time()
            stopped = podman("stop", "-t", "60", sidecar)
            assert stopped == sidecar
            assert podman("inspect", "-f", "{{.State.ExitCode}}", sidecar) == "0", podman("logs", sidecar)
            assert podman("wait", client) == "0"
            logs = podman("logs", client)
            acked = {id_ for id_, _ in _acked(logs)}
            assert logs.count("gone ") == THREADS, "every client thread ran until the sidecar was gone"
            assert len(acked) == len(_acked(logs)) >= 2 * THREADS
            # Requests in flight at SIGTERM were answered during the drain, not cut off.
            assert any(when > sigterm_at for _, when in _acked(logs)), logs
            # The answered messages were sent or spooled; the spooled ones go out once it runs again.
            broker.set_latency(0)
            podman("start", sidecar)
            wait_until(
                lambda: broker.received(topic) >= acked, "every acknowledged message at the broker", 90
            )
        finally:
            podman("pod", "rm", "-f", "-t", "0", pod, check=False)
            podman("volume", "rm", "-f", volume, check=False)
