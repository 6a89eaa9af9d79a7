"""Broker pulls over the wire: response codes and the four offset headers, filters from the request or
from a heartbeat, rejections, committing with the pull, and long polling (woken by a send, or timed out)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from rocksidecar.devbroker import DevBroker, DevCluster
from rocksidecar.rmq.broker import java_string_hash
from rocksidecar.rmq.codes import (
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    RequestCode,
    ResponseCode,
)
from rocksidecar.rmq.errors import ConnectionClosed
from rocksidecar.rmq.message_codec import decode_stored_all
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.devbroker import wire

OFFSET_HEADERS = ("nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId")


@pytest.fixture
def broker(cluster: DevCluster) -> DevBroker:
    return cluster.brokers["broker-a"]


async def fill(client: RemotingClient, broker: DevBroker, topic: str, tags: list[str]) -> None:
    for tag in tags:
        resp = await client.invoke(broker.addr, wire.send(topic, 0, tag.encode(), f"TAGS\x01{tag}"), 3.0)
        assert resp.code == ResponseCode.SUCCESS


async def barrier(client: RemotingClient, broker: DevBroker) -> None:
    """One round trip on the connection that sent a pull: the broker dispatches requests in order
    and a pull parks itself before it first yields, so afterwards the pull is parked."""
    await client.invoke(
        broker.addr, RemotingCommand(RequestCode.GET_MAX_OFFSET, {"topic": "LP", "queueId": "0"}), 3.0
    )
    assert len(broker.holds) == 1


@pytest.mark.parametrize(
    ("offset", "code", "remark", "next_offset"),
    [
        (0, ResponseCode.SUCCESS, "FOUND", 3),
        (3, ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", 3),
        (9, ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", 3),
    ],
)
async def test_codes_remarks_and_all_four_offsets(
    broker: DevBroker, client: RemotingClient, offset: int, code: int, remark: str, next_offset: int
) -> None:
    await fill(client, broker, "P", ["A", "B", "C"])
    resp = await client.invoke(broker.addr, wire.pull("P", 0, offset), 3.0)
    assert (resp.code, resp.remark) == (code, remark)
    assert [resp.ext_fields[h] for h in OFFSET_HEADERS] == [str(next_offset), "0", "3", "0"]
    assert len(decode_stored_all(resp.body)) == (3 if code == ResponseCode.SUCCESS else 0)


async def test_empty_queue_is_not_found_at_zero_and_moved_elsewhere(
    broker: DevBroker, client: RemotingClient
) -> None:
    broker.topics.ensure("Empty", 4)
    at_zero = await client.invoke(broker.addr, wire.pull("Empty", 1, 0), 3.0)
    beyond = await client.invoke(broker.addr, wire.pull("Empty", 1, 5), 3.0)
    assert (at_zero.code, at_zero.remark) == (ResponseCode.PULL_NOT_FOUND, "NO_MATCHED_LOGIC_QUEUE")
    assert (beyond.code, beyond.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "0")


async def test_request_filter_by_tag_and_retry_immediately(broker: DevBroker, client: RemotingClient) -> None:
    await fill(client, broker, "P", ["A", "B", "A"])
    only_a = await client.invoke(broker.addr, wire.pull("P", subscription="A || Z"), 3.0)
    assert [m.tags for m in decode_stored_all(only_a.body)] == ["A", "A"]
    none = await client.invoke(broker.addr, wire.pull("P", subscription="Q"), 3.0)
    assert (none.code, none.remark, none.ext_fields["nextBeginOffset"]) == (
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        "NO_MATCHED_MESSAGE",
        "3",
    )


async def test_filter_from_the_heartbeat_when_the_request_has_none(
    broker: DevBroker, client: RemotingClient
) -> None:
    await fill(client, broker, "P", ["A", "B"])
    unknown = await client.invoke(broker.addr, wire.pull("P", sys_flag=0), 3.0)
    assert unknown.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    sub = {"topic": "P", "subString": "B", "tagsSet": ["B"], "codeSet": [java_string_hash("B")]}
    beat = {"clientID": "c1", "consumerDataSet": [{"groupName": "cg", "subscriptionDataSet": [sub]}]}
    await client.invoke(broker.addr, RemotingCommand(RequestCode.HEART_BEAT, body=orjson.dumps(beat)), 3.0)
    resp = await client.invoke(broker.addr, wire.pull("P", sys_flag=0), 3.0)
    assert [m.tags for m in decode_stored_all(resp.body)] == ["B"]


async def test_a_pull_asking_a_newer_sub_version_than_the_heartbeat_is_not_latest(
    broker: DevBroker, client: RemotingClient
) -> None:
    """PullMessageProcessor: without the subscription flag, a registered subVersion older than the
    pull's is SUBSCRIPTION_NOT_LATEST (the client heartbeats, then pulls again); equal or older pulls
    are served. With the flag the request's own subscription is used and subVersion is not checked."""
    await fill(client, broker, "P", ["A"])
    sub = {"topic": "P", "subString": "*", "subVersion": 1000}
    beat = {"clientID": "c1", "consumerDataSet": [{"groupName": "cg", "subscriptionDataSet": [sub]}]}
    await client.invoke(broker.addr, RemotingCommand(RequestCode.HEART_BEAT, body=orjson.dumps(beat)), 3.0)

    async def pull(sub_version: int, sys_flag: int = 0) -> int:
        cmd = wire.pull("P", sys_flag=sys_flag)
        cmd.ext_fields["subVersion"] = str(sub_version)
        return (await client.invoke(broker.addr, cmd, 3.0)).code

    assert await pull(2000) == ResponseCode.SUBSCRIPTION_NOT_LATEST
    assert (await pull(1000), await pull(999)) == (ResponseCode.SUCCESS, ResponseCode.SUCCESS)
    assert await pull(2000, PULL_SUBSCRIPTION) == ResponseCode.SUCCESS
    sub["subVersion"] = 2000  # the next heartbeat catches up
    await client.invoke(broker.addr, RemotingCommand(RequestCode.HEART_BEAT, body=orjson.dumps(beat)), 3.0)
    assert await pull(2000) == ResponseCode.SUCCESS


@pytest.mark.parametrize(
    ("cmd", "code"),
    [
        (wire.pull("Nope"), ResponseCode.TOPIC_NOT_EXIST),
        (wire.pull("TBW102", 4), ResponseCode.SYSTEM_ERROR),
        (wire.pull("TBW102", expression_type="SQL92", subscription="a > 1"), ResponseCode.SYSTEM_ERROR),
    ],
)
async def test_rejections(broker: DevBroker, client: RemotingClient, cmd: RemotingCommand, code: int) -> None:
    resp = await client.invoke(broker.addr, cmd, 3.0)
    assert resp.code == code and "nextBeginOffset" not in resp.ext_fields


async def test_unreadable_topic_is_no_permission(broker: DevBroker, client: RemotingClient) -> None:
    create = RemotingCommand(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": "WriteOnly", "readQueueNums": "1", "writeQueueNums": "1", "perm": "2"},
    )
    assert (await client.invoke(broker.addr, create, 3.0)).code == ResponseCode.SUCCESS
    assert (await client.invoke(broker.addr, wire.pull("WriteOnly"), 3.0)).code == ResponseCode.NO_PERMISSION


async def test_commit_offset_flag_stores_the_offset(broker: DevBroker, client: RemotingClient) -> None:
    await fill(client, broker, "P", ["A"])
    cmd = wire.pull("P", group="g1", sys_flag=PULL_SUBSCRIPTION | PULL_COMMIT_OFFSET, commit_offset=1)
    await client.invoke(broker.addr, cmd, 3.0)
    assert broker.offsets.query("g1", "P", 0) == 1


async def test_long_poll_is_answered_when_a_matching_message_arrives(
    broker: DevBroker, client: RemotingClient
) -> None:
    broker.topics.ensure("LP", 1)
    held = asyncio.create_task(
        client.invoke(
            broker.addr,
            wire.pull("LP", sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND, subscription="A", suspend_ms=20_000),
            30.0,
        )
    )
    await barrier(client, broker)
    await fill(client, broker, "LP", ["B"])  # does not match: the pull stays parked
    assert not held.done() and len(broker.holds) == 1
    loop = asyncio.get_running_loop()
    start = loop.time()
    await fill(client, broker, "LP", ["A"])
    resp = await asyncio.wait_for(held, 1.0)
    assert loop.time() - start < 1.0
    assert resp.code == ResponseCode.SUCCESS and [m.tags for m in decode_stored_all(resp.body)] == ["A"]
    assert resp.ext_fields["nextBeginOffset"] == "2" and len(broker.holds) == 0


async def test_long_poll_times_out_with_not_found(broker: DevBroker, client: RemotingClient) -> None:
    broker.topics.ensure("LP", 1)
    cmd = wire.pull("LP", sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND, suspend_ms=50)
    resp = await client.invoke(broker.addr, cmd, 5.0)
    assert (resp.code, resp.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_NOT_FOUND, "0")
    assert len(broker.holds) == 0


async def test_dropping_connections_releases_parked_pulls(broker: DevBroker, client: RemotingClient) -> None:
    broker.topics.ensure("LP", 1)
    cmd = wire.pull("LP", sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND, suspend_ms=20_000)
    held = asyncio.create_task(client.invoke(broker.addr, cmd, 30.0))
    await barrier(client, broker)
    assert broker.drop_connections() == 1
    with pytest.raises(ConnectionClosed):
        await held
    assert len(broker.holds) == 0 and not broker.listener.connections
