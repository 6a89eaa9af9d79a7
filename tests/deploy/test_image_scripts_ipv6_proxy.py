"""docker/healthcheck.py and docker/metrics_proxy.py with what a pod or a host gives them.

- An HTTP_PROXY in the environment (docker injects it from ~/.docker/config.json; clusters behind egress
  proxies set it) is never used: the probe reaches the loopback listener, and the metrics proxy never
  sends the sidecar's bearer token to it. Both run as the image runs them, in a fresh process, since
  urllib reads the proxies when it builds its opener.
- The metrics proxy listens on an IPv6 address, and with the chart's --listen ([::]:port) answers on an
  IPv6 and an IPv4 pod address alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer

import pytest

from tests.deploy import chart
from tests.deploy.fake_http import DIRECT, needs_ipv6, serve
from tests.deploy.paths import REPO, load_script

proxy = load_script("metrics_proxy")
METRICS = b"rocksidecar_dead_letters 0\n"


def _env_with_proxy(proxy_port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    proxy_url = f"http://127.0.0.1:{proxy_port}"
    return {**env, "http_proxy": proxy_url, "HTTP_PROXY": proxy_url, **extra}


def _status(url: str) -> int:
    try:
        with DIRECT.open(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@contextmanager
def _serving(server: ThreadingHTTPServer) -> Iterator[int]:
    """Serve in a thread; yield the port."""
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# --- proxies in the environment ---------------------------------------------------------------------
def test_healthcheck_ignores_a_proxy_in_the_environment() -> None:
    with serve({}) as (proxy_port, proxy_seen), serve({"/healthz": (200, b"ok")}) as (port, _):
        env = _env_with_proxy(proxy_port, ROCKSIDECAR_HTTP_ADDR=f"127.0.0.1:{port}")
        result = subprocess.run(
            [sys.executable, str(REPO / "docker" / "healthcheck.py"), "/healthz"],
            env=env, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    assert (result.returncode, result.stdout.strip()) == (0, "/healthz: 200"), (
        f"probe went through the proxy ({len(proxy_seen)} request(s) seen there): {result.stderr.strip()}"
    )
    assert not proxy_seen


def test_metrics_proxy_never_sends_the_token_to_an_http_proxy() -> None:
    with (
        serve({"/metrics": (200, METRICS)}, token="t0k") as (port, _),
        serve({}) as (proxy_port, proxy_seen),
    ):
        process = subprocess.Popen(
            [sys.executable, str(REPO / "docker" / "metrics_proxy.py"),
             "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{port}"],
            env=_env_with_proxy(proxy_port, UPSTREAM_BEARER_TOKEN="t0k"),
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert process.stderr is not None
            started = process.stderr.readline()  # printed once it listens: "... on 127.0.0.1:PORT from ..."
            assert " on 127.0.0.1:" in started, f"metrics_proxy did not start: {started!r}"
            listen = started.split(" on ", 1)[1].split()[0]
            status = _status(f"http://{listen}/metrics")
        finally:
            process.terminate()
            process.wait(10)
            if process.stderr is not None:
                process.stderr.close()
    leaked = [h.get("Authorization") for h in proxy_seen]
    assert not leaked, f"the sidecar's API token went to the HTTP proxy: {leaked} (scrape answered {status})"
    assert status == 200


# --- IPv6 --------------------------------------------------------------------------------------------
@needs_ipv6
@pytest.mark.parametrize("listen", ["[::]:0", "[::1]:0", "::1:0"])
def test_metrics_proxy_listens_on_an_ipv6_address(listen: str) -> None:
    with serve({"/metrics": (200, METRICS)}) as (upstream, _):
        try:
            server = proxy.build_server(listen, f"127.0.0.1:{upstream}", "")
        except OSError as exc:
            pytest.fail(f"--listen {listen} refused: {exc!r}")
        with _serving(server) as port:
            assert _status(f"http://[::1]:{port}/metrics") == 200


@needs_ipv6
def test_metrics_proxy_as_rendered_answers_on_ipv6_and_ipv4_pod_addresses() -> None:
    args = chart.containers(chart.pod_spec(chart.render("servicemonitor")))["rocksidecar-metrics"]["args"]
    listen = args[args.index("--listen") + 1]
    host = listen.rpartition(":")[0]
    with serve({"/metrics": (200, METRICS)}) as (upstream, _):
        server = proxy.build_server(f"{host}:0", f"127.0.0.1:{upstream}", "")
        with _serving(server) as port:
            # an IPv6-only cluster's pod IP, and an IPv4 one: here their loopbacks
            statuses = [_status(f"http://{ip}:{port}/metrics") for ip in ("[::1]", "127.0.0.1")]
    assert statuses == [200, 200], f"--listen {listen}"
