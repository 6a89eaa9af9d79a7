"""The admin endpoint (127.0.0.1:19880 under `make run`) against a web page on any site: a cross-site
form or no-cors fetch (no preflight) must not stop a broker, set faults or expire messages, and a
DNS-rebinding page must not read /brokers or a topic's messages; curl, the demo and the tests still work."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator

import httpx
import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.devbroker.http_admin import build_app

# What a browser adds to a form POST from https://evil.example to http://127.0.0.1:19880 (no custom headers).
CROSS_SITE_FORM = {
    "origin": "https://evil.example",
    "referer": "https://evil.example/",
    "sec-fetch-site": "cross-site",
    "sec-fetch-mode": "navigate",
    "sec-fetch-dest": "document",
}
REBOUND = {"host": "rebind.evil.example:19880"}  # rebind.evil.example resolved to 127.0.0.1


@pytest.fixture
async def http(cluster: DevCluster) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(cluster.brokers))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:19880") as client:
        yield client


async def test_cross_site_form_post_does_not_stop_a_broker(
    http: httpx.AsyncClient, cluster: DevCluster
) -> None:
    # <form method=post action="http://127.0.0.1:19880/brokers/broker-a/stop"></form> submitted by script
    r = await http.post(
        "/brokers/broker-a/stop",
        content=b"",
        headers={**CROSS_SITE_FORM, "content-type": "application/x-www-form-urlencoded"},
    )
    assert cluster.brokers["broker-a"].running, f"a cross-site form POST stopped broker-a ({r.status_code})"
    assert r.status_code == 403 and "cross-origin" in r.json()["error"]
    assert not any(h.startswith("access-control-") for h in r.headers)


async def test_cross_site_text_plain_post_does_not_set_faults(
    http: httpx.AsyncClient, cluster: DevCluster
) -> None:
    # fetch(url, {method: "POST", mode: "no-cors", body: '{"fail_all": true}'}): text/plain, no preflight
    r = await http.post(
        "/brokers/broker-b/faults",
        content=b'{"fail_all": true, "fail_code": 2}',
        headers={**CROSS_SITE_FORM, "sec-fetch-mode": "no-cors", "sec-fetch-dest": "empty",
                 "content-type": "text/plain;charset=UTF-8"},
    )  # fmt: skip
    assert not cluster.brokers["broker-b"].faults.fail_all, (
        f"a cross-site POST set fail_all ({r.status_code})"
    )
    assert r.status_code == 403


async def test_cross_site_post_does_not_expire_messages(http: httpx.AsyncClient) -> None:
    r = await http.post("/brokers/broker-a/topics/T/queues/0/expire?before=99", headers=CROSS_SITE_FORM)
    assert r.status_code == 403


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
async def test_a_body_that_is_not_json_is_refused_415(
    http: httpx.AsyncClient, cluster: DevCluster, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    r = await http.post("/brokers/broker-b/faults", content=b'{"fail_all": true}', headers=headers)
    assert r.status_code == 415 and "application/json" in r.json()["error"]
    assert not cluster.brokers["broker-b"].faults.fail_all


@pytest.mark.parametrize("path", ["/brokers", "/brokers/broker-a", "/topics/TBW102/messages"])
async def test_dns_rebound_host_is_refused(http: httpx.AsyncClient, path: str) -> None:
    r = await http.get(path, headers=REBOUND)
    assert r.status_code == 403, f"answered {r.status_code} to Host rebind.evil.example: {r.text[:80]}"
    assert "Host" in r.json()["error"]


async def test_dns_rebound_host_cannot_act_either(http: httpx.AsyncClient, cluster: DevCluster) -> None:
    r = await http.post("/brokers/broker-a/stop", headers=REBOUND)
    assert r.status_code == 403 and cluster.brokers["broker-a"].running


@pytest.mark.parametrize(
    "host", ["127.0.0.1:19880", "localhost:19880", "LOCALHOST", "127.0.0.2", "[::1]:19880", "localhost."]
)
async def test_loopback_hosts_and_origins_are_answered(http: httpx.AsyncClient, host: str) -> None:
    origin = f"http://{host}" if ":" in host else f"http://{host}:19880"
    r = await http.get("/brokers", headers={"host": host, "origin": origin})
    assert r.status_code == 200


@pytest.mark.parametrize("origin", ["null", "http://127.0.0.1.nip.io:19880", "file://", "ftp://127.0.0.1"])
async def test_other_origins_are_refused(http: httpx.AsyncClient, origin: str) -> None:
    assert (await http.get("/brokers", headers={"origin": origin})).status_code == 403


async def test_json_bodies_and_bodiless_posts_still_work(
    http: httpx.AsyncClient, cluster: DevCluster
) -> None:
    # what bench/common.py, tests/containers and the README's curl examples send
    r = await http.post("/brokers/broker-b/faults", json={"latency_ms": 5})
    assert r.status_code == 200 and cluster.brokers["broker-b"].faults.latency_s == 0.005
    ok = await http.post(
        "/brokers/broker-b/faults",
        content=b'{"fail_next": 1}',
        headers={"content-type": "application/json; charset=utf-8", "origin": "http://127.0.0.1:19880"},
    )
    assert ok.status_code == 200 and cluster.brokers["broker-b"].faults.fail_next == 1
    assert (await http.delete("/brokers/broker-b/faults")).status_code == 200
    assert (await http.post("/brokers/broker-a/drop")).status_code == 200  # tools/demo.sh: no body


async def test_the_address_a_request_came_in_on_is_answered(cluster: DevCluster) -> None:
    """A container's --host (tests/containers posts to http://<its IP>:19880): a Host naming the address
    the connection arrived on (ASGI's ``server``) is no rebinding, which names the attacker's domain."""
    transport = httpx.ASGITransport(app=build_app(cluster.brokers))
    async with httpx.AsyncClient(transport=transport, base_url="http://10.88.0.5:19880") as client:
        assert (await client.get("/brokers")).status_code == 200
        assert (await client.get("/brokers", headers={"host": "10.88.0.6:19880"})).status_code == 403
        assert (await client.get("/brokers", headers=REBOUND)).status_code == 403


async def test_served_on_a_loopback_port_with_the_checks() -> None:
    async with DevCluster(brokers=1, admin_port=0, host="127.0.0.2") as cluster:
        assert cluster.admin_url is not None
        async with httpx.AsyncClient(base_url=cluster.admin_url) as client:
            assert (await client.get("/brokers")).status_code == 200
            assert (await client.get("/brokers", headers=REBOUND)).status_code == 403


@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl")
async def test_the_demos_curl_calls_still_work() -> None:
    """tools/demo.sh's `curl -s -X POST $ADMIN/brokers/broker-a/stop` (no body), and the README's faults."""
    async with DevCluster(brokers=1, admin_port=0) as cluster:

        async def curl(*args: str) -> str:
            proc = await asyncio.create_subprocess_exec(
                "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", *args,
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, _ = await proc.communicate()
            return out.decode()

        url = f"{cluster.admin_url}/brokers/broker-a"
        assert await curl("-X", "POST", f"{url}/stop") == "200"
        assert not cluster.brokers["broker-a"].running
        assert await curl("-X", "POST", f"{url}/start") == "200"
        json_faults = ["-H", "content-type: application/json", "-d", '{"latency_ms": 600}']
        assert await curl("-X", "POST", f"{url}/faults", *json_faults) == "200"
        assert await curl("-X", "POST", f"{url}/faults", "-d", '{"fail_all": true}') == "415"  # form
        assert cluster.brokers["broker-a"].faults.latency_s == 0.6
        assert not cluster.brokers["broker-a"].faults.fail_all
