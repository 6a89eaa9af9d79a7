"""A broker's other requests and its lifecycle: topics, offsets, view by id, send-back, heartbeats with
expiry on an injected clock, unknown codes, restart on the same port, and restart from a directory."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.message_codec import decode_stored
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.devbroker import wire


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def create_topic(topic: str, queues: str = "2", perm: str = "6") -> RemotingCommand:
    header = {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": perm}
    return RemotingCommand(
        RequestCode.UPDATE_AND_CREATE_TOPIC, header | {"topicSysFlag": "0", "order": "false"}
    )


def offset_query(code: int, group: str = "cg", topic: str = "T", **extra: str) -> RemotingCommand:
    return RemotingCommand(code, {"consumerGroup": group, "topic": topic, "queueId": "0"} | extra)


async def test_create_topic_validates_like_the_java_broker(
    cluster: DevCluster, client: RemotingClient
) -> None:
    a = cluster.brokers["broker-a"]
    assert (await client.invoke(a.addr, create_topic("Made", "3"), 3.0)).code == ResponseCode.SUCCESS
    assert cluster.namesrv.route("Made").queue_datas[0].write_queue_nums == 3  # type: ignore[union-attr]
    for bad in (
        create_topic("TBW102"),
        create_topic("rmq_sys_x"),
        create_topic("a b"),
        create_topic("Z", "0"),
    ):
        assert (await client.invoke(a.addr, bad, 3.0)).code == ResponseCode.SYSTEM_ERROR


async def test_consumer_offsets_and_queue_offsets(cluster: DevCluster, client: RemotingClient) -> None:
    a = cluster.brokers["broker-a"]
    for _ in range(3):
        await client.invoke(a.addr, wire.send("T"), 3.0)
    fresh = await client.invoke(a.addr, offset_query(RequestCode.QUERY_CONSUMER_OFFSET), 3.0)
    assert (fresh.code, fresh.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")  # the queue starts at 0
    update = offset_query(RequestCode.UPDATE_CONSUMER_OFFSET, commitOffset="2")
    assert (await client.invoke(a.addr, update, 3.0)).code == ResponseCode.SUCCESS
    await client.invoke_oneway(
        a.addr, offset_query(RequestCode.UPDATE_CONSUMER_OFFSET, group="g2", commitOffset="3")
    )
    got = await client.invoke(a.addr, offset_query(RequestCode.QUERY_CONSUMER_OFFSET), 3.0)
    assert got.ext_fields["offset"] == "2"
    got2 = await client.invoke(a.addr, offset_query(RequestCode.QUERY_CONSUMER_OFFSET, group="g2"), 3.0)
    assert got2.ext_fields["offset"] == "3"  # the one-way update arrived before this request
    queue = {"topic": "T", "queueId": "0"}
    max_off = await client.invoke(a.addr, RemotingCommand(RequestCode.GET_MAX_OFFSET, queue), 3.0)
    min_off = await client.invoke(a.addr, RemotingCommand(RequestCode.GET_MIN_OFFSET, queue), 3.0)
    assert (max_off.ext_fields["offset"], min_off.ext_fields["offset"]) == ("3", "0")
    stamp = str(a.messages("T", 0)[1].store_timestamp_ms)
    by_time = await client.invoke(
        a.addr, RemotingCommand(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, queue | {"timestamp": stamp}), 3.0
    )
    assert by_time.ext_fields["offset"] in {"0", "1"}  # sends within one millisecond share a time


async def test_query_not_found_once_the_queue_no_longer_starts_at_zero(client: RemotingClient) -> None:
    async with DevCluster(brokers=1, segment_bytes=4096, max_log_bytes=8192) as cluster:
        a = cluster.brokers["broker-a"]
        for _ in range(30):
            await client.invoke(a.addr, wire.send("T", 0, b"x" * 900), 3.0)
        assert a.store.min_offset("T", 0) > 0
        resp = await client.invoke(a.addr, offset_query(RequestCode.QUERY_CONSUMER_OFFSET), 3.0)
        assert resp.code == ResponseCode.QUERY_NOT_FOUND


async def test_view_message_by_commit_log_offset(cluster: DevCluster, client: RemotingClient) -> None:
    a = cluster.brokers["broker-a"]
    await client.invoke(a.addr, wire.send("T", 0, b"one"), 3.0)
    (msg,) = a.messages("T", 0)
    view = RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(msg.commit_log_offset)})
    resp = await client.invoke(a.addr, view, 3.0)
    assert decode_stored(resp.body)[0].body == b"one"
    missing = await client.invoke(
        a.addr, RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "3"}), 3.0
    )
    assert missing.code == ResponseCode.SYSTEM_ERROR


async def test_send_back_copies_to_the_retry_topic_then_the_dlq(
    cluster: DevCluster, client: RemotingClient
) -> None:
    a = cluster.brokers["broker-a"]
    await client.invoke(a.addr, wire.send("T", 0, b"work"), 3.0)
    (original,) = a.messages("T", 0)

    async def send_back(offset: int, max_times: str) -> int:
        header = {"offset": str(offset), "group": "cg", "delayLevel": "0", "maxReconsumeTimes": max_times}
        return (
            await client.invoke(a.addr, RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, header), 3.0)
        ).code

    assert await send_back(original.commit_log_offset, "16") == ResponseCode.SUCCESS
    (retry,) = a.messages("%RETRY%cg", 0)
    assert (retry.body, retry.reconsume_times, retry.properties["RETRY_TOPIC"]) == (b"work", 1, "T")
    assert retry.properties["ORIGIN_MESSAGE_ID"] == original.offset_msg_id
    # Through SCHEDULE_TOPIC_XXXX (at once: DevCluster's delay_scale is 0), level 0 meaning 3 + 0.
    assert [(k, retry.properties[k]) for k in ("DELAY", "REAL_TOPIC", "REAL_QID", "WAIT")] == [
        ("DELAY", "3"),
        ("REAL_TOPIC", "%RETRY%cg"),
        ("REAL_QID", "0"),
        ("WAIT", "false"),
    ]
    assert [m.topic for m in a.messages("SCHEDULE_TOPIC_XXXX", 2)] == ["SCHEDULE_TOPIC_XXXX"]
    assert cluster.namesrv.route("%RETRY%cg") is not None
    assert await send_back(retry.commit_log_offset, "1") == ResponseCode.SUCCESS
    (dead,) = a.messages("%DLQ%cg", 0)
    assert (dead.reconsume_times, dead.properties["RETRY_TOPIC"]) == (2, "T")
    assert (dead.properties["DELAY"], dead.properties["WAIT"]) == ("0", "false")  # setDelayTimeLevel(0)
    assert await send_back(7, "16") == ResponseCode.SYSTEM_ERROR


async def test_unknown_request_code_is_not_supported(cluster: DevCluster, client: RemotingClient) -> None:
    resp = await client.invoke(
        cluster.brokers["broker-a"].addr, RemotingCommand(RequestCode.QUERY_MESSAGE), 3.0
    )
    assert (resp.code, resp.remark) == (
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        " request type 12 not supported",
    )


def heartbeat(client_id: str, *groups: str) -> RemotingCommand:
    consumers = [{"groupName": g, "subscriptionDataSet": [{"topic": "T", "subString": "*"}]} for g in groups]
    body = {"clientID": client_id, "producerDataSet": [{"groupName": "pg"}], "consumerDataSet": consumers}
    return RemotingCommand(RequestCode.HEART_BEAT, body=orjson.dumps(body))


async def test_heartbeat_registers_groups_and_expires_after_120_s(client: RemotingClient) -> None:
    clock = FakeClock()
    async with DevCluster(brokers=1, clock=clock) as cluster:
        a = cluster.brokers["broker-a"]
        resp = await client.invoke(a.addr, heartbeat("c1", "cg"), 3.0)
        assert (resp.code, resp.version) == (ResponseCode.SUCCESS, 401)
        assert a.clients.consumer_ids("cg") == ["c1"] and "%RETRY%cg" in a.topics
        assert a.clients.groups() == {"producer": ["pg"], "consumer": ["cg"]}
        clock.now += 119
        a.housekeep()
        assert a.clients.consumer_ids("cg") == ["c1"]
        clock.now += 2
        (server_side,) = a.listener.connections
        client_side = await client.connection(a.addr)
        a.housekeep()
        assert a.clients.consumer_ids("cg") == [] and server_side.is_closed
        await client_side.closed_event.wait()  # Java closes an expired client's channel too
        bad = await client.invoke(a.addr, RemotingCommand(RequestCode.HEART_BEAT, body=b"{}"), 3.0)
        assert bad.code == ResponseCode.SYSTEM_ERROR


async def test_stop_and_start_keep_the_port_and_the_messages(
    cluster: DevCluster, client: RemotingClient
) -> None:
    a = cluster.brokers["broker-a"]
    await client.invoke(a.addr, wire.send("T"), 3.0)
    addr = a.addr
    await a.stop()
    assert not a.running and cluster.namesrv.route("T") is None
    await a.start()
    resp = await client.invoke(a.addr, wire.send("T"), 3.0)
    assert a.addr == addr and resp.ext_fields["queueOffset"] == "1"


@pytest.mark.parametrize("restart_port", [False, True])
async def test_restart_from_a_directory_keeps_topics_messages_and_offsets(
    tmp_path: Path, client: RemotingClient, restart_port: bool
) -> None:
    async with DevCluster(brokers=1, data_dir=tmp_path) as cluster:
        a = cluster.brokers["broker-a"]
        await client.invoke(a.addr, create_topic("Kept", "2"), 3.0)
        for body in (b"one", b"two"):
            await client.invoke(a.addr, wire.send("Kept", 1, body), 3.0)
        update = offset_query(RequestCode.UPDATE_CONSUMER_OFFSET, topic="Kept", commitOffset="1")
        await client.invoke(a.addr, update, 3.0)
        before = a.messages("Kept", 1)
        port = a.listener.port if restart_port else 0
    async with DevCluster(brokers=1, data_dir=tmp_path, broker_base_port=port) as cluster:
        a = cluster.brokers["broker-a"]
        assert a.topics.get("Kept") is not None and cluster.namesrv.route("Kept") is not None
        assert a.messages("Kept", 1) == before
        assert a.offsets.query("cg", "Kept", 0) == 1
        resp = await client.invoke(a.addr, wire.send("Kept", 1, b"three"), 3.0)
        assert resp.ext_fields["queueOffset"] == "2"
        assert (
            a.messages("Kept", 1)[2].commit_log_offset == before[1].commit_log_offset + before[1].store_size
        )
