"""docker/metrics_proxy.py: exposes /metrics of the loopback sidecar and nothing else."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.deploy.fake_http import serve
from tests.deploy.paths import load_script

proxy = load_script("metrics_proxy")
METRICS = b"# HELP rocksidecar_dead_letters Dead letters held.\nrocksidecar_dead_letters 0\n"


@contextmanager
def running_proxy(upstream_port: int, token: str = "") -> Iterator[str]:
    server = proxy.build_server("127.0.0.1:0", f"127.0.0.1:{upstream_port}", token)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _get(url: str, method: str = "GET") -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), ""


def test_metrics_pass_through_with_the_token() -> None:
    routes = {"/metrics": (200, METRICS), "/v1/messages": (200, b"api")}
    with serve(routes, token="t0k") as (port, seen), running_proxy(port, "t0k") as url:
        status, body, ctype = _get(url + "/metrics")
        assert (status, body) == (200, METRICS) and ctype.startswith("text/plain")
        assert seen[-1]["Authorization"] == "Bearer t0k"


@pytest.mark.parametrize("path", ["/v1/messages", "/healthz", "/openapi.json", "/metricsx"])
def test_every_other_path_is_404_and_never_reaches_the_sidecar(path: str) -> None:
    with serve({path: (200, b"api")}) as (port, seen), running_proxy(port) as url:
        assert _get(url + path)[0] == 404
        assert seen == []


def test_writes_are_refused() -> None:
    with serve({"/metrics": (200, METRICS)}) as (port, seen), running_proxy(port) as url:
        assert _get(url + "/metrics", method="POST")[0] == 501
        assert seen == []


def test_sidecar_down_is_502() -> None:
    with serve({}) as (port, _):
        pass
    with running_proxy(port) as url:
        assert _get(url + "/metrics")[0] == 502
