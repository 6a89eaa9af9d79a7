"""GET /v1/messages/{id} tells the whole story (issue 17 item 6): attempts count the failed send before
spooling, a delivered spooled message says when and where it was stored, a dead one keeps its topic."""

from __future__ import annotations

from typing import Any

import grpc

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.retry.policy import RetryPolicy
from tests.app.conftest import Stack


async def test_spooled_then_sent_shows_attempts_then_time_broker_and_offset(stack: Stack) -> None:
    await stack.stop_brokers()
    before = stack.service.delay.now_ms()
    r = await stack.http.post("/v1/messages", json={"topic": "St", "body": "x"})
    assert r.status_code == 202, r.text
    id_ = r.json()["id"]
    spooled = (await stack.http.get(f"/v1/messages/{id_}")).json()
    assert spooled["status"] == "SPOOLED" and spooled["topic"] == "St"
    assert spooled["attempts"] == 1 and spooled["lastError"]
    await stack.start_brokers()
    await stack.drain()
    [stored] = stack.stored("St")
    sent = (await stack.http.get(f"/v1/messages/{id_}")).json()
    assert sent["status"] == "SENT" and sent["sentAt"] >= before
    assert sent["broker"] in stack.cluster.brokers
    assert (sent["queueId"], sent["queueOffset"]) == (stored.queue_id, stored.queue_offset)
    assert sent["msgId"] == stored.offset_msg_id


async def test_a_dead_letter_keeps_its_topic_attempts_and_time(make_stack: Any) -> None:
    async with make_stack(retry_default=RetryPolicy((0.01,), 1)) as stack:
        await stack.stop_brokers()
        r = await stack.http.post("/v1/messages", json={"topic": "Dies", "body": "x"})
        id_ = r.json()["id"]
        await stack.drain()  # nothing pending once it is dead
        assert stack.service.retry.stats().dead == 1
        dead = (await stack.http.get(f"/v1/messages/{id_}")).json()
        assert dead["status"] == "DEAD" and dead["topic"] == "Dies"
        assert dead["attempts"] == 2 and dead["reason"] and dead["deadAt"] > 0
        status = await _grpc_status(stack, id_)
        assert (status.status, status.topic, status.attempts) == (pb.DEAD, "Dies", 2)
        assert status.dead_at_ms == dead["deadAt"]


async def _grpc_status(stack: Stack, id_: str) -> pb.MessageStatus:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel:
        status: pb.MessageStatus = await pb_grpc.SidecarStub(channel).GetMessage(pb.GetMessageRequest(id=id_))
        return status


async def test_a_published_delayed_message_says_when_and_where(stack: Stack) -> None:
    r = await stack.http.post("/v1/messages", json={"topic": "Later", "body": "x", "delayMs": 20})
    assert r.status_code == 202 and r.json()["status"] == "SCHEDULED"
    await stack.until_published(r.json()["deliverAt"])
    [stored] = stack.stored("Later")
    sent = (await stack.http.get(f"/v1/messages/{r.json()['id']}")).json()
    assert sent["status"] == "SENT" and sent["sentAt"] >= r.json()["deliverAt"]
    assert (sent["queueId"], sent["queueOffset"], sent["msgId"]) == (
        stored.queue_id,
        stored.queue_offset,
        stored.offset_msg_id,
    )
    assert sent["broker"] in stack.cluster.brokers
