"""SEND_MESSAGE(_V2) to a %RETRY% topic: 4.9.4's SendMessageProcessor.handleRetryAndDLQ stores a message
whose reconsume times (header field j) reach the maximum (field l; absent: the group's retryMaxTimes,
16) in %DLQ%<group> queue 0 instead, its properties and reconsume times as sent; below the maximum it
stays in the retry topic. The answer names the queue chosen in the retry topic, the DLQ copy's offset
and message id. A consumer whose CONSUMER_SEND_MSG_BACK fails sends its message this way."""

from __future__ import annotations

import pytest

from rocksidecar.devbroker import DevBroker, DevCluster
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.message_codec import encode_batch
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.devbroker import wire

RETRY = "%RETRY%g"
DLQ = "%DLQ%g"


async def resend(
    client: RemotingClient,
    broker: DevBroker,
    reconsume_times: int,
    max_times: int | None,
    *,
    code: int = RequestCode.SEND_MESSAGE_V2,
    version: int | None = None,
) -> RemotingCommand:
    """What a consumer sends when its send-back failed: the message to %RETRY%g, queue 0."""
    cmd = wire.send(RETRY, 0, b"work", "TAGS\x01a\x02RETRY_TOPIC\x01T\x02WAIT\x01true", code=code)
    long_names = code == RequestCode.SEND_MESSAGE
    cmd.ext_fields["reconsumeTimes" if long_names else "j"] = str(reconsume_times)
    if max_times is not None:
        cmd.ext_fields["maxReconsumeTimes" if long_names else "l"] = str(max_times)
    if version is not None:
        cmd.version = version
    return await client.invoke(broker.addr, cmd, 3.0)


@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE])
async def test_a_message_at_its_maximum_goes_to_the_dlq(
    cluster: DevCluster, client: RemotingClient, code: int
) -> None:
    a = cluster.brokers["broker-a"]
    resp = await resend(client, a, 3, 3, code=code)
    assert resp.code == ResponseCode.SUCCESS
    assert a.messages(RETRY) == []
    (dead,) = a.messages(DLQ, 0)
    assert (dead.body, dead.reconsume_times) == (b"work", 3)
    assert dict(dead.properties) == {"TAGS": "a", "RETRY_TOPIC": "T", "CLUSTER": "DefaultCluster"}
    ext = resp.ext_fields
    assert (ext["msgId"], ext["queueId"], ext["queueOffset"]) == (dead.offset_msg_id, "0", "0")
    dlq = a.topics.get(DLQ)
    assert dlq is not None and (dlq.read_queue_nums, dlq.write_queue_nums, dlq.perm) == (1, 1, 6)


async def test_below_its_maximum_it_stays_in_the_retry_topic(
    cluster: DevCluster, client: RemotingClient
) -> None:
    a = cluster.brokers["broker-a"]
    assert (await resend(client, a, 2, 3)).code == ResponseCode.SUCCESS
    (retry,) = a.messages(RETRY, 0)
    assert retry.reconsume_times == 2
    assert DLQ not in a.topics and a.messages(DLQ) == []


async def test_without_a_maximum_the_groups_default_of_16_applies(
    cluster: DevCluster, client: RemotingClient
) -> None:
    a = cluster.brokers["broker-a"]
    assert (await resend(client, a, 15, None)).code == ResponseCode.SUCCESS
    assert (await resend(client, a, 16, None)).code == ResponseCode.SUCCESS
    assert [m.reconsume_times for m in a.messages(RETRY, 0)] == [15]
    assert [m.reconsume_times for m in a.messages(DLQ, 0)] == [16]


async def test_a_client_older_than_3_4_9_gets_the_groups_maximum(
    cluster: DevCluster, client: RemotingClient
) -> None:
    """Java reads maxReconsumeTimes only from clients of version V3_4_9 (ordinal 165) or later."""
    a = cluster.brokers["broker-a"]
    assert (await resend(client, a, 3, 3, version=164)).code == ResponseCode.SUCCESS
    assert len(a.messages(RETRY, 0)) == 1 and a.messages(DLQ) == []


async def test_the_answer_names_the_queue_chosen_in_the_retry_topic(
    cluster: DevCluster, client: RemotingClient
) -> None:
    """A retry topic auto-created from TBW102 has four queues; the DLQ has one, but 4.9.4 answers with
    the queue id it picked before handleRetryAndDLQ."""
    a = cluster.brokers["broker-a"]
    cmd = wire.send(RETRY, 2, b"work")
    cmd.ext_fields.update(j="1", l="1")
    resp = await client.invoke(a.addr, cmd, 3.0)
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["queueId"] == "2"
    assert len(a.messages(DLQ, 0)) == 1 and a.messages(RETRY) == []


async def test_a_batch_to_a_retry_topic_is_never_dead_lettered(
    cluster: DevCluster, client: RemotingClient
) -> None:
    """4.9.4's sendBatchMessage has no handleRetryAndDLQ."""
    a = cluster.brokers["broker-a"]
    cmd = wire.send(RETRY, 0, encode_batch([(b"x", 0, "")]), "", code=RequestCode.SEND_BATCH_MESSAGE)
    cmd.ext_fields.update(j="5", l="1")
    assert (await client.invoke(a.addr, cmd, 3.0)).code == ResponseCode.SUCCESS
    assert len(a.messages(RETRY, 0)) == 1 and a.messages(DLQ) == []
