"""HTTP sends against a running sidecar and devbroker: SENT, SPOOLED (ack=spool and broker down),
batches, status, and that the id answered is the UNIQ_KEY stored in RocketMQ."""

from __future__ import annotations

import base64

from rocksidecar.rmq.codes import ResponseCode
from tests.app.conftest import Stack


async def test_send_answers_sent_with_the_stored_unique_key(stack: Stack) -> None:
    r = await stack.http.post(
        "/v1/messages",
        json={
            "topic": "Orders",
            "body": "héllo",
            "tags": "TagA",
            "keys": ["o-1", "c-9"],
            "properties": {"region": "eu"},
        },
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    doc = r.json()
    assert doc["status"] == "SENT" and doc["broker"].startswith("broker-") and doc["queueOffset"] == 0
    (stored,) = stack.stored("Orders")
    assert stored.uniq_key == doc["id"] and stored.body == "héllo".encode()
    assert (
        stored.tags == "TagA" and stored.keys == ("o-1", "c-9") and stored.user_properties == {"region": "eu"}
    )
    assert stored.queue_id == doc["queueId"] and stored.offset_msg_id == doc["msgId"]


async def test_binary_bodies_travel_as_base64(stack: Stack) -> None:
    raw = bytes(range(256)) * 20  # over 4 KiB: compressed on the wire, inflated on the way back
    r = await stack.http.post(
        "/v1/messages", json={"topic": "Bin", "bodyBase64": base64.b64encode(raw).decode()}
    )
    assert r.status_code == 200
    assert stack.stored("Bin")[0].body == raw


async def test_ack_spool_answers_202_then_delivers_in_the_background(stack: Stack) -> None:
    r = await stack.http.post("/v1/messages", params={"ack": "spool"}, json={"topic": "Later", "body": "x"})
    assert r.status_code == 202
    doc = r.json()
    assert doc["status"] == "SPOOLED" and "nextAttemptAt" in doc
    await stack.drain()
    assert [m.uniq_key for m in stack.stored("Later")] == [doc["id"]]
    assert stack.service.retry.stats().pending == 0


async def test_broker_down_spools_with_the_reason_and_replays_when_back(stack: Stack) -> None:
    await stack.http.post("/v1/messages", json={"topic": "Flaky", "body": "warm"})  # route known
    await stack.stop_brokers()
    r = await stack.http.post("/v1/messages", json={"topic": "Flaky", "body": "kept"})
    assert r.status_code == 202
    doc = r.json()
    assert doc["status"] == "SPOOLED" and doc["lastError"]
    status = (await stack.http.get(f"/v1/messages/{doc['id']}")).json()
    assert status["status"] == "SPOOLED" and status["topic"] == "Flaky"
    await stack.start_brokers()
    await stack.drain()
    assert doc["id"] in {m.uniq_key for m in stack.stored("Flaky")}
    delivered = await stack.http.get(f"/v1/messages/{doc['id']}")
    assert delivered.status_code == 200 and delivered.json()["status"] == "SENT"  # remembered for 24 h
    assert (await stack.http.delete(f"/v1/messages/{doc['id']}")).status_code == 409


async def test_broker_refusing_the_message_itself_is_422_and_nothing_is_kept(stack: Stack) -> None:
    for broker in stack.cluster.brokers.values():
        broker.faults.fail_all_sends(ResponseCode.MESSAGE_ILLEGAL, "too odd")
    r = await stack.http.post("/v1/messages", json={"topic": "Odd", "body": "x"})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    assert "MESSAGE_ILLEGAL" in r.json()["detail"]
    assert stack.service.retry.stats().pending == 0


async def test_batch_reports_each_message_in_order(stack: Stack) -> None:
    msgs = [{"topic": "Batch", "body": f"m{i}"} for i in range(5)]
    msgs[2] = {"topic": "bad topic!", "body": "x"}
    msgs[3] = {"topic": "Batch", "body": "k", "shardingKey": "order-7"}
    r = await stack.http.post("/v1/messages:batch", json={"messages": msgs})
    assert r.status_code == 200
    doc = r.json()
    assert [x["index"] for x in doc["results"]] == [0, 1, 2, 3, 4]
    assert [x["status"] for x in doc["results"]] == ["SENT", "SENT", "REJECTED", "SENT", "SENT"]
    assert doc["results"][2]["error"]["field"] == "messages[2].topic"
    assert (doc["sent"], doc["rejected"]) == (4, 1)
    stored = {m.uniq_key: m.body for m in stack.stored("Batch")}
    assert {x["id"] for x in doc["results"] if x["status"] == "SENT"} == set(stored)


async def test_batch_with_brokers_down_spools_every_item(stack: Stack) -> None:
    await stack.http.post("/v1/messages", json={"topic": "BatchDown", "body": "warm"})
    await stack.stop_brokers()
    r = await stack.http.post(
        "/v1/messages:batch",
        json={"messages": [{"topic": "BatchDown", "body": "a"}, {"topic": "BatchDown", "body": "b"}]},
    )
    doc = r.json()
    assert r.status_code == 200 and doc["spooled"] == 2
    assert all(x["status"] == "SPOOLED" and x["lastError"] for x in doc["results"])
    assert stack.service.retry.stats().pending == 2


async def test_batch_ack_spool(stack: Stack) -> None:
    r = await stack.http.post(
        "/v1/messages:batch",
        params={"ack": "spool"},
        json={"messages": [{"topic": "BS", "body": str(i)} for i in range(10)]},
    )
    assert r.json()["spooled"] == 10
    await stack.drain()
    assert len(stack.stored("BS")) == 10


async def test_status_and_cancel_of_unknown_ids_are_404(stack: Stack) -> None:
    for method in ("GET", "DELETE"):
        r = await stack.http.request(method, "/v1/messages/NOPE")
        assert r.status_code == 404 and r.json()["field"] == "id"
