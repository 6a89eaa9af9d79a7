"""The chart's pod (classic sidecar mode) played with `podman kube play`: the example app POSTs to the
sidecar on localhost and its messages reach a devbroker; Prometheus' view through the metrics port; and
the seed's loss case fixed: spooled messages survive `kube down` and `kube play` on the same volume."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.containers.podman import (
    Devbroker,
    PlayedPod,
    devbroker,
    healthy,
    metrics_inside,
    played,
    podman,
    post_inside,
    render_pod,
    succeeds,
    unique,
    wait_until,
)


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is not in the scrape")


def test_the_example_app_sends_through_the_sidecar_and_metrics_are_scraped(
    image: str, busybox: str, tmp_path: Path
) -> None:
    topic = unique("E2EPod")
    with devbroker(image) as broker:
        pod = render_pod(
            image, busybox, broker.namesrv, tmp_path, f"example.topic={topic}", "example.intervalSeconds=1"
        )
        with played(pod):
            # The app (busybox wget, Content-Type: application/json, to 127.0.0.1:9880) every second.
            received = wait_until(
                lambda: len(broker.received(topic)) >= 3 and broker.received(topic), "3 messages"
            )
            logs = podman("logs", f"{pod.name}-app")
            assert logs.count('"status":"SENT"') >= 3, logs
            ids_in_logs = {
                line.split('"id":"')[1].split('"')[0] for line in logs.splitlines() if '"id":"' in line
            }
            assert received <= ids_in_logs
            # Prometheus' view: the pod IP's metrics port serves /metrics and nothing else; the API
            # itself stays on the pod's loopback.
            scrape = httpx.get(f"http://{pod.ip}:9882/metrics", timeout=10)
            assert scrape.status_code == 200
            assert _metric(scrape.text, 'rocksidecar_messages_total{outcome="sent"}') >= len(received)
            assert httpx.get(f"http://{pod.ip}:9882/healthz", timeout=10).status_code == 404
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"http://{pod.ip}:9880/healthz", timeout=10)


def _spool_then_kube_down_and_play(
    broker: Devbroker, pod: PlayedPod, topic: str, between: Callable[[], None]
) -> set[str]:
    """The seed's loss case: with the brokers stopped, 20 messages answered 202 SPOOLED; the pod torn
    down (SIGTERM, as on a rescheduling) and played again; the brokers back. Returns the acked ids."""
    wait_until(lambda: healthy(pod.sidecar, "/readyz"), "the sidecar to be ready", 60)
    broker.brokers("stop")
    acked = set()
    for i in range(20):
        status, body = post_inside(pod.sidecar, {"topic": topic, "body": f"during the outage {i}"})
        assert (status, body["status"]) == (202, "SPOOLED"), body
        acked.add(body["id"])
    pod.down()
    assert not succeeds("pod", "exists", pod.name)
    assert broker.received(topic) == set()
    between()
    pod.play()
    broker.brokers("start")
    assert len(acked) == 20
    return acked


def test_spooled_messages_survive_kube_down_and_play_on_the_named_volume(
    image: str, busybox: str, tmp_path: Path
) -> None:
    topic = unique("E2ESpool")
    with devbroker(image) as broker:
        pod = render_pod(
            image, busybox, broker.namesrv, tmp_path,
            "example.intervalSeconds=3600",  # the app's one message at start; this test sends its own
            "config.retry.default.ladder_s={1,2,3}",
        )  # fmt: skip
        with played(pod):

            def the_claim_outlives_the_pod() -> None:
                assert succeeds("volume", "exists", pod.volume)

            acked = _spool_then_kube_down_and_play(broker, pod, topic, the_claim_outlives_the_pod)
            wait_until(lambda: broker.received(topic) >= acked, "every spooled message at the broker", 90)


def test_with_an_emptydir_store_the_same_sequence_loses_them(
    image: str, busybox: str, tmp_path: Path
) -> None:
    """What the chart's README says of store.type=emptyDir, and proof that the test above can see a loss."""
    topic = unique("E2ELoss")
    with devbroker(image) as broker:
        pod = render_pod(
            image, busybox, broker.namesrv, tmp_path,
            "store.type=emptyDir", "example.intervalSeconds=3600", "config.retry.default.ladder_s={1,2,3}",
        )  # fmt: skip
        with played(pod):
            acked = _spool_then_kube_down_and_play(broker, pod, topic, lambda: None)
            wait_until(lambda: healthy(pod.sidecar, "/readyz"), "the new sidecar to be ready", 60)
            status, body = post_inside(pod.sidecar, {"topic": topic, "body": "after the restart"})
            assert (status, body["status"]) == (200, "SENT"), body
            wait_until(lambda: body["id"] in broker.received(topic), "the new message at the broker")
            # The new pod started on an empty store: nothing is pending, so nothing will ever replay.
            assert "rocksidecar_retry_pending 0.0" in metrics_inside(pod.sidecar)
            assert broker.received(topic) & acked == set()
