"""The dmq process's HTTP port (127.0.0.1:9890) checks Host and Origin as serve's edge does: a
DNS-rebinding page must not read /readyz (brokers, store errors) or /metrics (README: every path refuses a
foreign Host); loopback, the address a request came in on (kubelet's probes and Prometheus name the pod IP)
and configured names are answered."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from rocksidecar.app.api.guards import Guards
from rocksidecar.app.dmq.http import create_app

PATHS = ["/healthz", "/readyz", "/metrics"]


async def ready() -> tuple[bool, dict[str, Any]]:
    return False, {"store": "failing: I/O error at /var/lib/x", "brokers": [{"broker": "broker-a"}]}


async def get(
    path: str, headers: dict[str, str], base: str = "http://127.0.0.1:9890", **kw: Any
) -> httpx.Response:
    app = create_app(CollectorRegistry(), ready, **kw)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base) as client:
        return await client.get(path, headers=headers)


@pytest.mark.parametrize("path", PATHS)
async def test_dns_rebound_host_is_refused(path: str) -> None:
    r = await get(path, {"host": "rebind.evil.example:9890", "sec-fetch-site": "same-origin"})
    assert r.status_code == 403, f"{path} answered {r.status_code} to a rebound Host: {r.text[:80]!r}"
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["field"] == "Host" and "broker-a" not in r.text


@pytest.mark.parametrize("path", PATHS)
async def test_a_cross_origin_page_is_refused(path: str) -> None:
    r = await get(path, {"origin": "https://evil.example"})
    assert r.status_code == 403 and r.json()["field"] == "Origin"


@pytest.mark.parametrize("host", ["127.0.0.1:9890", "localhost:9890", "[::1]:9890", None])
async def test_loopback_hosts_are_answered(host: str | None) -> None:
    r = await get("/readyz", {"origin": "http://localhost:3000"} | ({"host": host} if host else {}))
    assert r.status_code == 503 and r.json()["ready"] is False


async def test_the_address_a_request_came_in_on_is_answered() -> None:
    """`--http-addr 0.0.0.0:9890` in the chart: kubelet and Prometheus send Host <pod IP>:9890."""
    assert (await get("/healthz", {}, base="http://10.1.2.3:9890")).status_code == 200
    assert (await get("/healthz", {"host": "10.1.2.4:9890"}, base="http://10.1.2.3:9890")).status_code == 403


async def test_configured_names_are_answered() -> None:
    guards = Guards.of("", ("dmq.internal",), ("https://grafana.internal",))
    headers = {"host": "dmq.internal:9890", "origin": "https://grafana.internal"}
    assert (await get("/healthz", headers, guards=guards)).status_code == 200
    assert (await get("/healthz", {"host": "other.internal"}, guards=guards)).status_code == 403
