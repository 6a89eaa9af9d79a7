"""Broker sends over the wire: V1 and V2 headers, binary headers, what is stored (§3.8), auto-creation,
the Java broker's rejections, batch-level properties, and fault injection."""

from __future__ import annotations

import asyncio

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.devbroker.schedule import SCHEDULE_TOPIC
from rocksidecar.rmq.codes import RequestCode, ResponseCode, SerializeType
from rocksidecar.rmq.message_codec import decode_stored_all, encode_batch
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.devbroker import wire


async def test_v1_send_is_stored_as_the_reference_says(cluster: DevCluster, client: RemotingClient) -> None:
    a = cluster.brokers["broker-a"]
    cmd = wire.send(
        "Orders", 2, b"body", "KEYS\x01k1\x02WAIT\x01true\x02TAGS\x01TagA", code=RequestCode.SEND_MESSAGE
    )
    resp = await client.invoke(a.addr, cmd, 3.0)
    assert resp.code == ResponseCode.SUCCESS
    ext = resp.ext_fields
    assert (ext["queueId"], ext["queueOffset"], ext["MSG_REGION"], ext["TRACE_ON"]) == (
        "2",
        "0",
        "DefaultRegion",
        "true",
    )
    (msg,) = a.messages("Orders", 2)
    assert ext["msgId"] == msg.offset_msg_id
    assert dict(msg.properties) == {"KEYS": "k1", "TAGS": "TagA", "CLUSTER": "DefaultCluster"}  # no WAIT
    assert msg.store_host == a.addr and msg.born_host.startswith("127.0.0.1:")
    assert msg.born_timestamp_ms == 1_700_000_000_000 and msg.body == b"body"


async def test_binary_header_send_is_answered_in_binary(cluster: DevCluster, client: RemotingClient) -> None:
    cmd = wire.send("Bin")
    cmd.serialize_type = SerializeType.ROCKETMQ
    resp = await client.invoke(cluster.brokers["broker-a"].addr, cmd, 3.0)
    assert resp.serialize_type is SerializeType.ROCKETMQ and resp.ext_fields["queueOffset"] == "0"


async def test_negative_queue_id_picks_a_writable_queue(cluster: DevCluster, client: RemotingClient) -> None:
    a = cluster.brokers["broker-a"]
    queues = {
        int((await client.invoke(a.addr, wire.send("Any", -1), 3.0)).ext_fields["queueId"]) for _ in range(20)
    }
    assert queues <= {0, 1, 2, 3} and len(queues) > 1


async def test_auto_created_topic_clamps_to_the_template(cluster: DevCluster, client: RemotingClient) -> None:
    a = cluster.brokers["broker-a"]
    cmd = wire.send("Auto")
    cmd.ext_fields["d"] = "16"  # more queues than TBW102 has
    assert (await client.invoke(a.addr, cmd, 3.0)).code == ResponseCode.SUCCESS
    cfg = a.topics.get("Auto")
    assert cfg is not None and (cfg.write_queue_nums, cfg.perm) == (4, 6)
    assert "Auto" not in cluster.brokers["broker-b"].topics


@pytest.mark.parametrize(
    ("topic", "queue_id", "body", "props", "code", "remark"),
    [
        ("bad topic!", 0, b"x", "", ResponseCode.SYSTEM_ERROR, "illegal characters"),
        ("T" * 128, 0, b"x", "", ResponseCode.SYSTEM_ERROR, "longer than topic max length"),
        ("SCHEDULE_TOPIC_XXXX", 0, b"x", "", ResponseCode.NO_PERMISSION, "is forbidden"),
        ("Fine", 4, b"x", "", ResponseCode.SYSTEM_ERROR, "queueId[4] is illegal"),
        ("Fine", 0, b"x" * (4 * 1024 * 1024 + 1), "", ResponseCode.MESSAGE_ILLEGAL, "body"),
        ("Fine", 0, b"x", "p\x01" + "v" * 32800, ResponseCode.MESSAGE_ILLEGAL, "properties"),
    ],
)
async def test_rejections(
    cluster: DevCluster,
    client: RemotingClient,
    topic: str,
    queue_id: int,
    body: bytes,
    props: str,
    code: int,
    remark: str,
) -> None:
    a = cluster.brokers["broker-a"]
    resp = await client.invoke(a.addr, wire.send(topic, queue_id, body, props), 5.0)
    assert resp.code == code and remark in (resp.remark or "")
    assert resp.ext_fields["MSG_REGION"] == "DefaultRegion"
    assert a.messages(topic) == []


@pytest.mark.parametrize(("key", "value", "words"), [("a", None, "lacks"), ("e", "one", "not an integer")])
async def test_bad_required_header_is_system_error(
    cluster: DevCluster, client: RemotingClient, key: str, value: str | None, words: str
) -> None:
    cmd = wire.send("T")
    if value is None:
        del cmd.ext_fields[key]
    else:
        cmd.ext_fields[key] = value
    resp = await client.invoke(cluster.brokers["broker-a"].addr, cmd, 3.0)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert words in (resp.remark or "") and repr(key) in (resp.remark or "")


async def test_without_auto_create_unknown_topics_do_not_exist(client: RemotingClient) -> None:
    async with DevCluster(brokers=1, auto_create=False) as cluster:
        assert cluster.namesrv.route("TBW102") is None
        resp = await client.invoke(cluster.brokers["broker-a"].addr, wire.send("New"), 3.0)
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST


async def test_batch_appends_batch_properties_and_uses_consecutive_offsets(
    cluster: DevCluster, client: RemotingClient
) -> None:
    a = cluster.brokers["broker-a"]
    await client.invoke(a.addr, wire.send("B", 1), 3.0)
    body = encode_batch(
        [(b"one", 1, "KEYS\x01k1\x02WAIT\x01true\x02TAGS\x01TagA"), (b"two", 2, "UNIQ_KEY\x01U2")]
    )
    cmd = wire.send("B", 1, body, "WAIT\x01true\x02INSTANCE_ID\x01ns", code=RequestCode.SEND_BATCH_MESSAGE)
    cmd.ext_fields["m"] = "true"
    resp = await client.invoke(a.addr, cmd, 3.0)
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["queueOffset"] == "1"
    stored = a.messages("B", 1)[1:]
    assert resp.ext_fields["msgId"] == ",".join(m.offset_msg_id for m in stored)
    assert [(m.body, m.flag, m.queue_offset) for m in stored] == [(b"one", 1, 1), (b"two", 2, 2)]
    # MessageExtBatchEncoder: each message's own properties verbatim, then the batch's with WAIT (4.9.4
    # keeps it in a batch, though it drops it from a single message) and CLUSTER.
    assert dict(stored[0].properties) == {
        "KEYS": "k1",
        "WAIT": "true",
        "TAGS": "TagA",
        "INSTANCE_ID": "ns",
        "CLUSTER": "DefaultCluster",
    }
    assert dict(stored[1].properties) == {
        "UNIQ_KEY": "U2",
        "WAIT": "true",
        "INSTANCE_ID": "ns",
        "CLUSTER": "DefaultCluster",
    }
    raw = a.store.record_at(stored[0].commit_log_offset)
    assert raw is not None
    assert (
        b"KEYS\x01k1\x02WAIT\x01true\x02TAGS\x01TagA\x02WAIT\x01true\x02INSTANCE_ID\x01ns\x02CLUSTER\x01"
        in raw
    )


async def test_batch_tag_code_is_the_last_tags_of_the_stored_properties(
    cluster: DevCluster, client: RemotingClient
) -> None:
    """The store's properties map keeps the last TAGS: a batch-level TAGS overrides the messages'."""
    a = cluster.brokers["broker-a"]
    body = encode_batch([(b"one", 0, "TAGS\x01Inner\x02"), (b"two", 0, "")])
    cmd = wire.send("BT", 0, body, "TAGS\x01Outer", code=RequestCode.SEND_BATCH_MESSAGE)
    assert (await client.invoke(a.addr, cmd, 3.0)).code == ResponseCode.SUCCESS
    outer = await client.invoke(a.addr, wire.pull("BT", 0, 0, subscription="Outer"), 3.0)
    inner = await client.invoke(a.addr, wire.pull("BT", 0, 0, subscription="Inner"), 3.0)
    assert len(decode_stored_all(outer.body)) == 2 and inner.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert [m.properties["TAGS"] for m in a.messages("BT", 0)] == ["Outer", "Outer"]


async def test_bad_batch_bodies_are_illegal(cluster: DevCluster, client: RemotingClient) -> None:
    addr = cluster.brokers["broker-a"].addr
    garbage = await client.invoke(
        addr, wire.send("B", 0, b"\x00\x00\x00\x09xx", code=RequestCode.SEND_BATCH_MESSAGE), 3.0
    )
    assert garbage.code == ResponseCode.MESSAGE_ILLEGAL


async def test_a_batch_to_a_retry_topic_is_stored_with_the_headers_reconsume_times(
    cluster: DevCluster, client: RemotingClient
) -> None:
    """4.9.4's batch path has no retry/DLQ handling: a batch to %RETRY%<group> is stored (the topic
    created on the way, no group check), each message with the header's reconsume times."""
    a = cluster.brokers["broker-a"]
    body = encode_batch([(b"one", 0, "TAGS\x01a"), (b"two", 0, "")])
    cmd = wire.send("%RETRY%g", 0, body, "WAIT\x01true", code=RequestCode.SEND_BATCH_MESSAGE)
    cmd.ext_fields["j"] = "3"  # reconsumeTimes
    resp = await client.invoke(a.addr, cmd, 3.0)
    assert (resp.code, resp.ext_fields["queueOffset"]) == (ResponseCode.SUCCESS, "0")
    assert [(m.body, m.reconsume_times) for m in a.messages("%RETRY%g", 0)] == [(b"one", 3), (b"two", 3)]


async def test_fail_next_sends_then_recover(cluster: DevCluster, client: RemotingClient) -> None:
    a = cluster.brokers["broker-a"]
    a.faults.fail_next_sends(2, ResponseCode.SYSTEM_BUSY, "[REJECTREQUEST]system busy")
    codes = [(await client.invoke(a.addr, wire.send("F"), 3.0)).code for _ in range(3)]
    assert codes == [ResponseCode.SYSTEM_BUSY, ResponseCode.SYSTEM_BUSY, ResponseCode.SUCCESS]
    assert len(a.messages("F")) == 1


async def test_fail_all_sends_until_cleared(cluster: DevCluster, client: RemotingClient) -> None:
    a = cluster.brokers["broker-a"]
    a.faults.fail_all_sends(ResponseCode.SERVICE_NOT_AVAILABLE, "disk full")
    for _ in range(3):
        resp = await client.invoke(a.addr, wire.send("F"), 3.0)
        assert (resp.code, resp.remark) == (ResponseCode.SERVICE_NOT_AVAILABLE, "disk full")
    a.faults.clear()
    assert (await client.invoke(a.addr, wire.send("F"), 3.0)).code == ResponseCode.SUCCESS


async def test_latency_delays_sends_but_not_other_requests(
    cluster: DevCluster, client: RemotingClient
) -> None:
    a = cluster.brokers["broker-a"]
    a.faults.latency_s = 0.2
    loop = asyncio.get_running_loop()
    start = loop.time()
    slow = asyncio.create_task(client.invoke(a.addr, wire.send("L"), 3.0))
    other = await client.invoke(
        a.addr, RemotingCommand(RequestCode.GET_MAX_OFFSET, {"topic": "L", "queueId": "0"}), 3.0
    )
    assert other.ext_fields["offset"] == "0" and not slow.done()
    assert (await slow).code == ResponseCode.SUCCESS
    assert loop.time() - start >= 0.2


async def test_a_batch_with_a_delay_level_is_refused_as_4_9_4_refuses_it(
    cluster: DevCluster, client: RemotingClient
) -> None:
    """CommitLog.asyncPutMessages (4.9.4) cannot schedule a batch: one whose own properties (the header's)
    carry a DELAY level above 0 is MESSAGE_ILLEGAL, with handlePutMessageResult's remark, before its
    messages are read (a malformed body too), and nothing is stored. A DELAY of 0, or one in a message
    of the batch (which 4.9.4 does not read), is stored at once; one Java cannot parse is SYSTEM_ERROR."""
    a = cluster.brokers["broker-a"]
    body = encode_batch([(b"one", 0, "UNIQ_KEY\x01U1"), (b"two", 0, "")])
    for batch, props in ((body, "WAIT\x01true\x02DELAY\x013"), (b"\x00\x00\x00\x09xx", "DELAY\x0199")):
        resp = await client.invoke(
            a.addr, wire.send("BD", 0, batch, props, code=RequestCode.SEND_BATCH_MESSAGE), 3.0
        )
        assert (resp.code, resp.remark) == (
            ResponseCode.MESSAGE_ILLEGAL,
            "the message is illegal, maybe msg body or properties length not matched. "
            "msg body length limit 4194304B, msg properties length limit 32KB.",
        )
    bad = await client.invoke(
        a.addr, wire.send("BD", 0, body, "DELAY\x01soon", code=RequestCode.SEND_BATCH_MESSAGE), 3.0
    )
    assert bad.code == ResponseCode.SYSTEM_ERROR and "DELAY" in (bad.remark or "")
    assert a.messages("BD") == [] and a.messages(SCHEDULE_TOPIC) == []

    inner = encode_batch([(b"three", 0, "DELAY\x013")])
    for batch, props in ((body, "WAIT\x01true\x02DELAY\x010"), (inner, "WAIT\x01true")):
        resp = await client.invoke(
            a.addr, wire.send("BD", 0, batch, props, code=RequestCode.SEND_BATCH_MESSAGE), 3.0
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert [m.body for m in a.messages("BD", 0)] == [b"one", b"two", b"three"]
    assert a.messages(SCHEDULE_TOPIC) == []
