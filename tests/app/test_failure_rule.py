"""The one failure rule (issue 12, README "Failure rule") against a running sidecar and devbroker:
Java's retry codes go to another broker within the send, what can never succeed is final (422 now, dead
letters during replay), everything else is spooled with the broker's code and remark."""

from __future__ import annotations

from rocksidecar.rmq.codes import ResponseCode
from tests.app.conftest import Stack


async def test_no_permission_on_one_broker_is_sent_through_the_other(stack: Stack) -> None:
    # A broker made read-only for maintenance answers NO_PERMISSION; Java's producer tries another.
    stack.cluster.brokers["broker-a"].faults.fail_all_sends(ResponseCode.NO_PERMISSION, "read-only")
    statuses = []
    for i in range(40):
        r = await stack.http.post("/v1/messages", json={"topic": "ReadOnlyA", "body": f"m{i}"})
        statuses.append((r.status_code, r.json()["status"], r.json().get("broker")))
    assert set(statuses) == {(200, "SENT", "broker-b")}
    assert stack.service.retry.stats().pending == 0
    assert len(stack.stored("ReadOnlyA")) == 40
    errors = stack.service.metrics.registry.get_sample_value(
        "rocksidecar_send_errors_total", {"broker": "broker-a", "code": "NO_PERMISSION"}
    )
    assert errors is not None and errors >= 1  # the metrics name the broker's code


async def test_no_permission_everywhere_is_spooled_with_the_code_and_remark(stack: Stack) -> None:
    for broker in stack.cluster.brokers.values():
        broker.faults.fail_all_sends(ResponseCode.NO_PERMISSION, "maintenance window")
    r = await stack.http.post("/v1/messages", json={"topic": "ReadOnlyAll", "body": "x"})
    assert r.status_code == 202
    doc = r.json()
    assert doc["status"] == "SPOOLED"
    assert "NO_PERMISSION" in doc["lastError"] and "maintenance window" in doc["lastError"]
    status = (await stack.http.get(f"/v1/messages/{doc['id']}")).json()
    assert status["status"] == "SPOOLED" and "NO_PERMISSION" in status["lastError"]
    for broker in stack.cluster.brokers.values():  # it heals: the replay delivers it
        broker.faults.clear()
    await stack.drain()
    assert [m.uniq_key for m in stack.stored("ReadOnlyAll")] == [doc["id"]]


async def test_message_illegal_during_replay_goes_straight_to_the_dead_letters(stack: Stack) -> None:
    for broker in stack.cluster.brokers.values():
        broker.faults.fail_all_sends(ResponseCode.MESSAGE_ILLEGAL, "too odd")
    r = await stack.http.post(
        "/v1/messages", params={"ack": "spool"}, json={"topic": "OddLater", "body": "x"}
    )
    assert r.status_code == 202
    msg_id = r.json()["id"]
    await stack.drain()  # one replay attempt, not the ladder: the error is final
    stats = stack.service.retry.stats()
    assert (stats.pending, stats.dead) == (0, 1)
    status = (await stack.http.get(f"/v1/messages/{msg_id}")).json()
    assert status["status"] == "DEAD" and "MESSAGE_ILLEGAL" in status["reason"]
    assert stack.stored("OddLater") == []
