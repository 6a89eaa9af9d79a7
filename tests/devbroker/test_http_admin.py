"""The admin HTTP endpoint: through the ASGI app for every route, and once over a bound loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.devbroker.http_admin import build_app
from rocksidecar.rmq import BrokerApi, Message, MessageQueue, RemotingClient
from rocksidecar.rmq.codes import ResponseCode


@pytest.fixture
async def http(cluster: DevCluster) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(cluster.brokers))
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
        yield client


async def test_lists_brokers(http: httpx.AsyncClient, cluster: DevCluster) -> None:
    resp = await http.get("/brokers")
    assert resp.status_code == 200
    doc = resp.json()
    assert [(b["name"], b["addr"], b["running"]) for b in doc] == [
        (name, b.addr, True) for name, b in cluster.brokers.items()
    ]
    assert doc[0]["faults"]["fail_next"] == 0 and "TBW102" in doc[0]["topics"]


async def test_sets_and_clears_faults(http: httpx.AsyncClient, cluster: DevCluster) -> None:
    body = {"latency_ms": 250, "fail_next": 2, "fail_code": 2, "fail_remark": "busy", "fail_all": False}
    resp = await http.post("/brokers/broker-b/faults", json=body)
    assert resp.status_code == 200 and resp.json()["faults"]["latency_ms"] == 250
    faults = cluster.brokers["broker-b"].faults
    assert (faults.latency_s, faults.fail_next, faults.fail_code, faults.fail_remark) == (0.25, 2, 2, "busy")
    await http.post("/brokers/broker-b/faults", json={"fail_all": True})
    assert faults.take_failure() == (ResponseCode.SYSTEM_BUSY, "busy")
    assert (await http.delete("/brokers/broker-b/faults")).status_code == 200
    assert (faults.latency_s, faults.fail_next, faults.fail_all) == (0.0, 0, False)


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/brokers/broker-z/faults", {}, 404, "no broker named"),
        ("/brokers/broker-a/faults", {"latency_ms": -1}, 400, "latency_ms"),
        ("/brokers/broker-a/faults", {"fail_all": "yes"}, 400, "fail_all"),
        ("/brokers/broker-a/faults", {"fail_remark": 3}, 400, "fail_remark"),
        ("/brokers/broker-a/faults", {"bogus": 1}, 400, "unknown fields"),
        ("/brokers/broker-a/faults", [1], 400, "JSON object"),
        ("/brokers/broker-a/explode", {}, 404, "unknown action"),
    ],
)
async def test_bad_requests_say_what_is_wrong(
    http: httpx.AsyncClient, path: str, body: object, status: int, words: str
) -> None:
    resp = await http.post(path, json=body)
    assert resp.status_code == status and words in resp.json()["error"]


async def test_a_bad_field_changes_nothing(http: httpx.AsyncClient, cluster: DevCluster) -> None:
    resp = await http.post("/brokers/broker-a/faults", json={"latency_ms": 100, "fail_all": "yes"})
    assert resp.status_code == 400 and cluster.brokers["broker-a"].faults.latency_s == 0.0


async def test_stop_start_and_drop(http: httpx.AsyncClient, cluster: DevCluster) -> None:
    b = cluster.brokers["broker-b"]
    assert (await http.post("/brokers/broker-b/stop")).json()["running"] is False
    assert cluster.namesrv.route("TBW102").broker_datas[0].broker_name == "broker-a"  # type: ignore[union-attr]
    assert (await http.post("/brokers/broker-b/start")).json()["running"] is True and b.running
    assert (await http.post("/brokers/broker-b/drop")).status_code == 200
    assert (await http.get("/brokers/broker-b")).json()["connections"] == 0


async def test_lists_what_the_brokers_store_for_a_topic(http: httpx.AsyncClient, cluster: DevCluster) -> None:
    client = RemotingClient()
    api = BrokerApi(client, producer_group="admin-test")
    sent: list[str] = []
    try:
        for name, broker in cluster.brokers.items():
            await api.create_topic(broker.addr, "Listed")
            for i in range(3):
                uniq = f"{name}-{i}"
                msg = Message(topic="Listed", body=b"x" * (i + 1))
                await api.send(broker.addr, MessageQueue("Listed", name, i % 2), msg, uniq, 5.0)
                sent.append(uniq)
    finally:
        await client.close()
    doc = (await http.get("/topics/Listed/messages")).json()
    assert doc["total"] == 6 and doc["offset"] == 0
    assert sorted(m["uniqKey"] for m in doc["messages"]) == sorted(sent)
    first = doc["messages"][0]
    assert first["broker"] == "broker-a" and first["queueId"] == 0 and first["bodySize"] in (1, 3)
    page = (await http.get("/topics/Listed/messages", params={"offset": 4, "limit": 5})).json()
    assert [m["uniqKey"] for m in page["messages"]] == [m["uniqKey"] for m in doc["messages"][4:]]
    assert (await http.get("/topics/Nothing/messages")).json() == {
        "topic": "Nothing",
        "total": 0,
        "offset": 0,
        "messages": [],
    }
    for bad in ({"offset": "-1"}, {"limit": "0"}, {"limit": "x"}, {"limit": "100001"}):
        resp = await http.get("/topics/Listed/messages", params=bad)
        assert resp.status_code == 400 and next(iter(bad)) in resp.json()["error"]


async def test_expire_drops_a_queues_old_offsets_as_retention_would(
    http: httpx.AsyncClient, cluster: DevCluster
) -> None:
    broker = cluster.brokers["broker-a"]
    client = RemotingClient()
    api = BrokerApi(client, producer_group="admin-test")
    mq = MessageQueue("Expiring", "broker-a", 0)
    try:
        await api.create_topic(broker.addr, "Expiring")
        for i in range(5):
            await api.send(broker.addr, mq, Message(topic="Expiring", body=b"m%d" % i), f"e{i}", 5.0)
        resp = await http.post("/brokers/broker-a/topics/Expiring/queues/0/expire", params={"before": 3})
        assert resp.status_code == 200 and resp.json() == {"minOffset": 3}
        assert await api.get_min_offset(broker.addr, mq) == 3
        assert await api.get_max_offset(broker.addr, mq) == 5
        gone = await api.pull(broker.addr, "g", mq, 1)
        assert gone.status.name == "OFFSET_ILLEGAL" and gone.next_begin_offset == 3
        kept = await api.pull(broker.addr, "g", mq, 3)
        assert [m.body for m in kept.messages] == [b"m3", b"m4"]
        # never past the end; a bad queue id is refused and changes nothing
        assert (await http.post("/brokers/broker-a/topics/Expiring/queues/0/expire?before=99")).json() == {
            "minOffset": 5
        }
        bad = await http.post("/brokers/broker-a/topics/Expiring/queues/x/expire?before=1")
        assert bad.status_code == 400 and "queue id" in bad.json()["error"]
    finally:
        await client.close()


async def test_served_on_a_loopback_port() -> None:
    async with DevCluster(brokers=1, admin_port=0) as cluster:
        assert cluster.admin_url is not None and cluster.admin_url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient(base_url=cluster.admin_url) as client:
            resp = await client.post("/brokers/broker-a/faults", json={"fail_next": 1})
            assert resp.status_code == 200
        assert cluster.brokers["broker-a"].faults.fail_next == 1
